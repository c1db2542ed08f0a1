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

interface Readable {
  readonly name: string;
  readonly help: string;
  readonly type: string;
  readonly aggregator?: string;
  get(): Promise<{ name: string }> | { name: string };
}

export async function openMetricsOf(registry: Registry<RegistryContentType>): Promise<string> {
  const open = new Registry<OpenMetricsContentType>();
  open.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
  for (const metric of registry.getMetricsAsArray() as unknown as Readable[]) {
    const standIn = {
      name: metric.name,
      help: metric.help,
      type: metric.type,
      aggregator: metric.aggregator,
      // The stand-in's name is the one the registry shortened; the metric's own is left as it was.
      get: async () => ({ ...(await metric.get()), name: standIn.name }),
    };
    open.registerMetric(standIn as never);
  }
  return open.metrics();
}
