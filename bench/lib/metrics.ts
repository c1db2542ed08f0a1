/**
 * tokengate's own counters, read from its /metrics before and after a scenario, so the report
 * can show that a cache-hit run was answered from the cache and a cache-miss run was not.
 */

/** Sums every sample of each metric in a Prometheus text exposition, over all label values. */
export function parseCounters(exposition: string): Map<string, number> {
  const totals = new Map<string, number>();
  for (const line of exposition.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? (\S+)/.exec(line);
    if (match === null) continue;
    totals.set(match[1]!, (totals.get(match[1]!) ?? 0) + Number(match[2]));
  }
  return totals;
}

export async function scrapeCounters(opsUrl: string): Promise<Map<string, number>> {
  const response = await fetch(`${opsUrl}/metrics`);
  if (response.status !== 200) throw new Error(`/metrics answered ${response.status}`);
  return parseCounters(await response.text());
}

export interface CacheLookups {
  hits: number;
  misses: number;
}

const HITS = 'tokengate_cache_hits_total';
const MISSES = 'tokengate_cache_misses_total';

/** Lookups between two scrapes; null when this build has no token cache metrics. */
export function cacheLookupsBetween(before: Map<string, number>, after: Map<string, number>): CacheLookups | null {
  const delta = (name: string) => {
    const end = after.get(name);
    return end === undefined ? undefined : end - (before.get(name) ?? 0);
  };
  const hits = delta(HITS);
  const misses = delta(MISSES);
  return hits === undefined || misses === undefined ? null : { hits, misses };
}
