/**
 * tokengate's own metrics, read before and after each window: they show that a cache-hit row
 * was answered from the cache and a cache-miss row was not, and how many tokens are cached.
 */

/** Every sample of a Prometheus text exposition under its series (`name{labels}`), and each metric's sum over its labels under its name. */
export function parseSamples(exposition: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of exposition.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line);
    if (match === null) continue;
    const [, name, labels, value] = match as unknown as [string, string, string | undefined, string];
    if (labels !== undefined) samples.set(name + labels, Number(value));
    samples.set(name, (samples.get(name) ?? 0) + Number(value));
  }
  return samples;
}

export async function scrapeMetrics(opsUrl: string): Promise<Map<string, number>> {
  const response = await fetch(`${opsUrl}/metrics`);
  if (response.status !== 200) throw new Error(`${opsUrl}/metrics answered ${response.status}`);
  return parseSamples(await response.text());
}

export interface CacheLookups {
  hits: number;
  /** Hits, and lookups that went to the store. */
  lookups: number;
}

/** Token lookups between two scrapes, and how many the cache answered. */
export function cacheLookupsBetween(before: Map<string, number>, after: Map<string, number>): CacheLookups {
  const delta = (name: string) => (after.get(name) ?? 0) - (before.get(name) ?? 0);
  const hits = delta('tokengate_cache_hits_total');
  return { hits, lookups: hits + delta('tokengate_cache_misses_total') };
}

export const CACHED_TOKENS = 'tokengate_cache_entries{kind="valid"}';

/** Garbage collections between two scrapes, by the upper bound (seconds) of their pause's bucket in `nodejs_gc_duration_seconds`, every kind together. */
export function gcPausesBetween(before: Map<string, number>, after: Map<string, number>): Map<number, number> {
  const cumulative = new Map<number, number>();
  for (const [series, value] of after) {
    const bound = /^nodejs_gc_duration_seconds_bucket\{.*le="([^"]+)"/.exec(series)?.[1];
    if (bound === undefined) continue;
    const le = bound === '+Inf' ? Infinity : Number(bound);
    cumulative.set(le, (cumulative.get(le) ?? 0) + value - (before.get(series) ?? 0));
  }
  return cumulative;
}

/** The bucket bound under which `share` of the collections counted in `cumulative` paused; null when none ran. */
export function pauseQuantile(cumulative: Map<number, number>, share: number): number | null {
  const bounds = [...cumulative.keys()].sort((a, b) => a - b);
  const total = cumulative.get(Infinity) ?? 0;
  if (total === 0) return null;
  return bounds.find((bound) => cumulative.get(bound)! >= share * total) ?? Infinity;
}
