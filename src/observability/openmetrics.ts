import { Registry, type OpenMetricsContentType, type RegistryContentType } from 'prom-client';

/**
 * The OpenMetrics exposition of a registry, for a scrape that asks for it (the only format with
 * exemplars). prom-client writes OpenMetrics by renaming each counter it holds (`_total` comes
 * off its `name`), so the live metrics never go into an OpenMetrics registry: each is read
 * through a stand-in made for this scrape, whose name alone is changed.
 */

export const OPENMETRICS_CONTENT_TYPE = Registry.OPENMETRICS_CONTENT_TYPE;

/** Whether a scrape's Accept asks for OpenMetrics (as Prometheus does when it can take exemplars). */
export function acceptsOpenMetrics(accept: string | undefined): boolean {
  return accept !== undefined && accept.includes('application/openmetrics-text');
}

interface Exemplar {
  readonly labelSet: Record<string, string>;
  readonly value: number;
  readonly timestamp: number;
}

interface Sample {
  readonly labels: Partial<Record<string, string | number>>;
  readonly value: number;
  readonly metricName?: string;
  /** prom-client's own histograms give null when they have none. */
  readonly exemplar?: Exemplar | null;
}

interface Family {
  readonly name: string;
  /** 'histogram', ...: prom-client's typings name them with an enum of those strings. */
  readonly type: unknown;
  readonly values?: readonly Sample[];
}

interface Readable {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly aggregator?: string;
  get(): Promise<Family> | Family;
}

const sampleKey = (sample: Sample) => `${sample.metricName ?? ''}\u0000${JSON.stringify(sample.labels)}`;

/**
 * The latest exemplar of each histogram bucket across the workers' metrics (as getMetricsAsJSON
 * gives them), for their sum: prom-client's aggregation drops them.
 */
export function latestExemplars(workers: ReadonlyArray<readonly Family[]>): Map<string, Exemplar> {
  const latest = new Map<string, Exemplar>();
  for (const families of workers) {
    for (const family of families) {
      if (family.type !== 'histogram') continue;
      for (const sample of family.values ?? []) {
        if (sample.exemplar === undefined || sample.exemplar === null) continue;
        const key = sampleKey(sample);
        const kept = latest.get(key);
        if (kept === undefined || kept.timestamp < sample.exemplar.timestamp) latest.set(key, sample.exemplar);
      }
    }
  }
  return latest;
}

/** `exemplars`: the buckets' exemplars when the registry's histograms have lost theirs (a sum of workers). */
export async function openMetricsOf(registry: Registry<RegistryContentType>, exemplars: ReadonlyMap<string, Exemplar> | null = null): Promise<string> {
  const open = new Registry<OpenMetricsContentType>();
  open.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
  for (const metric of registry.getMetricsAsArray() as unknown as Readable[]) {
    const standIn = {
      name: metric.name,
      help: metric.help,
      type: metric.type,
      aggregator: metric.aggregator,
      // The stand-in's name is the one the registry shortened; the metric's own is left as it was.
      get: async () => {
        const family = await metric.get();
        if (exemplars === null || exemplars.size === 0 || family.type !== 'histogram') return { ...family, name: standIn.name };
        const values = family.values?.map((sample) => {
          const exemplar = exemplars.get(sampleKey(sample));
          return exemplar === undefined ? sample : { ...sample, exemplar };
        });
        return { ...family, name: standIn.name, values };
      },
    };
    open.registerMetric(standIn as never);
  }
  return open.metrics();
}
