import type { LoadResult } from './load.js';
import type { Machine } from './machine.js';
import type { CacheLookups } from './metrics.js';

/**
 * What a run measured, the DESIGN.md targets evaluated against it, and the tables printed to
 * the terminal and pasted into BENCHMARKS.md. Pure functions of the results: the harness
 * measures, this file only judges and formats.
 */

export interface ScenarioResult {
  id: string;
  title: string;
  load: LoadResult;
  /** CPU ms per 1,000 requests of the process(es) in front of the upstream; null when none. */
  gatewayCpuMsPer1k: number | null;
  /** CPU ms per 1,000 requests of Redis. */
  storeCpuMsPer1k: number;
  /** Scenario the req/s ratio is taken against. */
  baseline: string | null;
  /** tokengate's token cache during the run (from its /metrics); null for other servers or without a cache. */
  cacheLookups: CacheLookups | null;
  /**
   * Share of the servers' CPUs used by processes outside the benchmark, and stolen by the
   * hypervisor, during the run; null when the servers are not pinned. High values: a noisy row.
   */
  serverCpuElsewherePercent: number | null;
  serverCpuStealPercent: number | null;
  /** Busy share of the load generator's CPU: near 100 means the generator, not the server, set the pace. */
  loadGeneratorCpuPercent: number;
}

export interface FixedRateResult {
  rate: number;
  direct: LoadResult;
  tokengate: LoadResult;
}

export interface RevocationResult {
  samples: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export interface MemoryResult {
  idleBytes: number;
  /** RSS just before and just after the cache-miss run filled the cache. */
  beforeFillBytes: number;
  filledBytes: number;
  /** V8 heap in use and reserved at that moment (tokengate's own metrics), to tell live data from heap headroom. */
  filledHeap: { usedBytes: number; totalBytes: number } | null;
  cachedEntries: number;
  /** RSS once a second during the cache-hit run. */
  soak: { seconds: number; samples: number[] };
}

export interface BenchResults {
  scenarios: Record<string, ScenarioResult>;
  forgedStoreCommands: number | null;
  fixedRate: FixedRateResult | null;
  revocation: RevocationResult | null;
  memory: MemoryResult | null;
}

export interface TargetCheck {
  /** The scenario row the verdict is printed beside. */
  scenario: string;
  target: string;
  /** A few words for the cell beside the scenario's figures. */
  label: string;
  measured: string;
  /** null: the run did not measure it (a scenario skipped or failed). */
  met: boolean | null;
}

const MB = 1024 * 1024;

export function ratio(results: BenchResults, id: string, baseline: string): number | null {
  const subject = results.scenarios[id];
  const base = results.scenarios[baseline];
  if (subject === undefined || base === undefined || base.load.requestsPerSecond === 0) return null;
  return subject.load.requestsPerSecond / base.load.requestsPerSecond;
}

export function bytesPerCachedEntry(memory: MemoryResult): number {
  return (memory.filledBytes - memory.beforeFillBytes) / memory.cachedEntries;
}

export interface SoakSummary {
  /** Lowest RSS in the first and in the second half of the samples. */
  firstHalfFloorBytes: number;
  secondHalfFloorBytes: number;
  minBytes: number;
  maxBytes: number;
  /** Full collections seen: RSS falling by 10% or more from one sample to the next. */
  collections: number;
  /**
   * With full collections: secondHalfFloor / firstHalfFloor - 1. Without: last / first - 1,
   * which says "flat" when small but cannot tell garbage from a leak when large.
   */
  growth: number;
  /** False when RSS climbed and no full collection showed where its floor is. */
  conclusive: boolean;
}

/**
 * Growth of the RSS floor over the soak. Under load, V8 may let garbage pile up in the old
 * generation (RSS climbing for tens of seconds) until a full collection returns it at once;
 * what a leak raises is the floor RSS comes back to. So with full collections the lowest
 * sample of the second half is compared with the lowest of the first; without one, RSS that
 * stayed flat is flat, and RSS that climbed gives no verdict.
 */
export function summarizeSoak(samples: readonly number[]): SoakSummary {
  const half = Math.max(1, Math.floor(samples.length / 2));
  const firstHalfFloorBytes = Math.min(...samples.slice(0, half));
  const secondHalfFloorBytes = Math.min(...samples.slice(half));
  const collections = samples.filter((value, index) => index > 0 && value <= samples[index - 1]! * 0.9).length;
  const growth = collections > 0 ? secondHalfFloorBytes / firstHalfFloorBytes - 1 : samples.at(-1)! / samples[0]! - 1;
  return {
    firstHalfFloorBytes,
    secondHalfFloorBytes,
    minBytes: Math.min(...samples),
    maxBytes: Math.max(...samples),
    collections,
    growth,
    conclusive: collections > 0 || growth <= SOAK_TOLERANCE,
  };
}

const SOAK_TOLERANCE = 0.05;

/** The performance targets of DESIGN.md, each judged on this run's figures. */
export function evaluateTargets(results: BenchResults): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const atLeast = (scenario: string, target: string, label: string, value: number | null, minimum: number) =>
    checks.push({ scenario, target, label, measured: value === null ? 'not measured' : `${value.toFixed(2)}x`, met: value === null ? null : value >= minimum });

  atLeast('cache-hit', 'cache hit >= 1.0x bare @fastify/http-proxy', '>= 1.0x bare proxy', ratio(results, 'cache-hit', 'bare-proxy'), 1.0);
  atLeast('cache-hit', 'cache hit >= 1.0x nginx auth_request', '>= 1.0x nginx', ratio(results, 'cache-hit', 'nginx-peer'), 1.0);

  const hitCpu = results.scenarios['cache-hit']?.gatewayCpuMsPer1k ?? null;
  const peerCpu = results.scenarios['nginx-peer']?.gatewayCpuMsPer1k ?? null;
  checks.push({
    scenario: 'cache-hit',
    target: 'gateway CPU per request below nginx + check service',
    label: 'CPU/request < nginx + check',
    measured: hitCpu === null || peerCpu === null ? 'not measured' : `${hitCpu.toFixed(0)} vs ${peerCpu.toFixed(0)} ms/1k`,
    met: hitCpu === null || peerCpu === null ? null : hitCpu < peerCpu,
  });

  atLeast('cache-miss', 'cache miss (100k tokens) >= 0.7x cache hit', '>= 0.7x cache hit', ratio(results, 'cache-miss', 'cache-hit'), 0.7);

  checks.push({
    scenario: 'forged',
    target: 'forged tokens: 0 store calls',
    label: '0 store calls',
    measured: results.forgedStoreCommands === null ? 'not measured' : `${results.forgedStoreCommands} Redis commands`,
    met: results.forgedStoreCommands === null ? null : results.forgedStoreCommands === 0,
  });

  const fixed = results.fixedRate;
  const addedP99 = fixed === null ? null : fixed.tokengate.p99Ms - fixed.direct.p99Ms;
  checks.push({
    scenario: 'fixed-rate',
    target: `added p99 over direct at ${fixed?.rate ?? 2000} req/s <= 1 ms`,
    label: 'added p99 <= 1 ms',
    measured: addedP99 === null ? 'not measured' : `${addedP99.toFixed(2)} ms`,
    met: addedP99 === null ? null : addedP99 <= 1,
  });

  const revocation = results.revocation;
  checks.push({
    scenario: 'revocation',
    target: 'revocation seen by a second sidecar <= 50 ms p99',
    label: 'p99 <= 50 ms',
    measured: revocation === null ? 'not measured' : `${revocation.p99Ms.toFixed(1)} ms p99`,
    met: revocation === null ? null : revocation.p99Ms <= 50,
  });

  const issuance = results.scenarios['issuance']?.load.requestsPerSecond ?? null;
  checks.push({
    scenario: 'issuance',
    target: 'client_credentials issuance >= 5,000 tokens/s',
    label: '>= 5,000 tokens/s',
    measured: issuance === null ? 'not measured' : `${Math.round(issuance)} tokens/s`,
    met: issuance === null ? null : issuance >= 5000,
  });

  const memory = results.memory;
  checks.push({
    scenario: 'memory',
    target: 'RSS <= 150 MB with 100k cached tokens',
    label: 'RSS <= 150 MB with 100k cached',
    measured: memory === null ? 'not measured' : `${(memory.filledBytes / MB).toFixed(0)} MB with ${memory.cachedEntries} cached`,
    // Fewer entries than the target names (a shortened run) cannot tell.
    met: memory === null || memory.cachedEntries < 100_000 ? null : memory.filledBytes <= 150 * MB,
  });
  const soak = memory === null ? null : summarizeSoak(memory.soak.samples);
  checks.push({
    scenario: 'memory',
    target: `RSS flat (within 5%) over ${memory?.soak.seconds ?? 60} s at full load`,
    label: 'RSS flat within 5%',
    measured:
      soak === null
        ? 'not measured'
        : soak.conclusive
          ? `${(soak.growth * 100).toFixed(1)}% (${soak.collections > 0 ? 'floor, second vs first half' : 'last vs first sample, no full collection'})`
          : `RSS rose ${(soak.growth * 100).toFixed(1)}% with no full collection during the soak: garbage and a leak look alike`,
    // A leak grows; a floor that sinks (V8 returning memory) is not what the target guards against.
    met: soak === null || !soak.conclusive ? null : soak.growth <= SOAK_TOLERANCE,
  });
  return checks;
}

export function verdict(check: TargetCheck): string {
  return check.met === null ? 'not measured' : check.met ? 'met' : 'NOT MET';
}

/** A Markdown table with padded columns, readable in a terminal and pasteable as is. */
export function markdownTable(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((cell, column) => cell.padEnd(widths[column]!)).join(' | ')} |`;
  return [line(header), `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

function cacheHitShare(lookups: CacheLookups | null): string {
  if (lookups === null || lookups.hits + lookups.misses === 0) return '-';
  return `${((lookups.hits / (lookups.hits + lookups.misses)) * 100).toFixed(1)}%`;
}

const fixed = (value: number | null, digits: number) => (value === null || Number.isNaN(value) ? '-' : value.toFixed(digits));

export function scenarioTable(results: BenchResults, checks: TargetCheck[]): string {
  const rows = Object.values(results.scenarios).map((scenario) => {
    const { load } = scenario;
    const vs = scenario.baseline === null ? '-' : `${fixed(ratio(results, scenario.id, scenario.baseline), 2)}x ${scenario.baseline}`;
    const targets = checks.filter((check) => check.scenario === scenario.id).map((check) => `${verdict(check)}: ${check.label}`);
    return [
      scenario.title,
      Math.round(load.requestsPerSecond).toString(),
      fixed(load.p50Ms, 2),
      fixed(load.p99Ms, 2),
      `${load.errors}/${load.unexpected}`,
      fixed(scenario.gatewayCpuMsPer1k, 0),
      fixed(scenario.storeCpuMsPer1k, 0),
      fixed(scenario.loadGeneratorCpuPercent, 0),
      cacheHitShare(scenario.cacheLookups),
      scenario.serverCpuElsewherePercent === null ? '-' : `${fixed(scenario.serverCpuElsewherePercent, 0)} / ${fixed(scenario.serverCpuStealPercent, 0)}`,
      vs,
      targets.join('; ') || '-',
    ];
  });
  return markdownTable(
    [
      'scenario',
      'req/s',
      'p50 ms',
      'p99 ms',
      'errors/unexpected',
      'gateway CPU ms/1k req',
      'Redis CPU ms/1k req',
      'load gen CPU %',
      'cache hits',
      'server CPU: other / steal %',
      'vs',
      'DESIGN.md target',
    ],
    rows,
  );
}

export function otherTable(results: BenchResults, checks: TargetCheck[]): string {
  const rows: string[][] = [];
  const targetsOf = (scenario: string) =>
    checks
      .filter((check) => check.scenario === scenario)
      .map((check) => `${verdict(check)}: ${check.label}`)
      .join('; ');
  const { fixedRate, revocation, memory } = results;
  if (fixedRate !== null) {
    const { direct, tokengate, rate } = fixedRate;
    rows.push([
      `added latency at ${rate} req/s`,
      `direct p50 ${fixed(direct.p50Ms, 2)} / p99 ${fixed(direct.p99Ms, 2)} ms; tokengate p50 ${fixed(tokengate.p50Ms, 2)} / p99 ${fixed(tokengate.p99Ms, 2)} ms; ` +
        `added p50 ${fixed(tokengate.p50Ms - direct.p50Ms, 2)} / p99 ${fixed(tokengate.p99Ms - direct.p99Ms, 2)} ms ` +
        `(achieved ${Math.round(direct.requestsPerSecond)} and ${Math.round(tokengate.requestsPerSecond)} req/s)`,
      targetsOf('fixed-rate'),
    ]);
  }
  if (revocation !== null) {
    rows.push([
      'revocation seen by a second sidecar',
      `${revocation.samples} revocations: p50 ${fixed(revocation.p50Ms, 1)} ms, p99 ${fixed(revocation.p99Ms, 1)} ms, max ${fixed(revocation.maxMs, 1)} ms`,
      targetsOf('revocation'),
    ]);
  }
  if (memory !== null) {
    const soak = summarizeSoak(memory.soak.samples);
    rows.push([
      'memory (RSS)',
      `idle ${(memory.idleBytes / MB).toFixed(1)} MB; ${memory.cachedEntries} cached tokens ${(memory.filledBytes / MB).toFixed(1)} MB ` +
        (memory.filledHeap === null
          ? ''
          : `(V8 heap ${(memory.filledHeap.usedBytes / MB).toFixed(0)} MB used of ${(memory.filledHeap.totalBytes / MB).toFixed(0)} MB) `) +
        `(${Math.round(bytesPerCachedEntry(memory))} bytes/entry); ${memory.soak.seconds} s at full load: RSS ${(soak.minBytes / MB).toFixed(0)}-${(soak.maxBytes / MB).toFixed(0)} MB, ` +
        `${soak.collections} full collection(s), floor ${(soak.firstHalfFloorBytes / MB).toFixed(1)} MB in the first half, ${(soak.secondHalfFloorBytes / MB).toFixed(1)} MB in the second`,
      targetsOf('memory'),
    ]);
  }
  return markdownTable(['measurement', 'result', 'DESIGN.md target'], rows);
}

export function targetsTable(checks: TargetCheck[]): string {
  return markdownTable(
    ['DESIGN.md target', 'measured', 'verdict'],
    checks.map((check) => [check.target, check.measured, verdict(check)]),
  );
}

/** What a run writes to bench/results/<name>.json: enough to print its tables again. */
export interface RecordedRun {
  date: string;
  machine: Machine & { loadAverageAtEnd: string[] };
  settings: { connections: number; gatewayNodeFlags: string[] } & Record<string, unknown>;
  seconds: number;
  results: BenchResults;
  targets: TargetCheck[];
  failures: string[];
}

/** The report of a run: where and how it ran, then every table. */
export function renderRun(run: RecordedRun): string {
  const { machine, settings } = run;
  const flags = settings.gatewayNodeFlags.length > 0 ? ` tokengate node flags: ${settings.gatewayNodeFlags.join(' ')};` : '';
  const heading =
    `${run.date}, ${machine.cpuModel}, ${machine.cpus} CPUs, Node ${machine.node}, nginx ${machine.nginx ?? 'absent'}, Redis ${machine.redis}, commit ${machine.commit}\n` +
    `${machine.pinning}; ${settings.connections} connections;${flags} load average ${machine.loadAverageAtStart.join(' ')} at start, ` +
    `${machine.loadAverageAtEnd.join(' ')} at end; run took ${run.seconds.toFixed(0)} s`;
  const checks = evaluateTargets(run.results);
  return `${heading}\n\n${scenarioTable(run.results, checks)}\n\n${otherTable(run.results, checks)}\n\n${targetsTable(checks)}\n`;
}
