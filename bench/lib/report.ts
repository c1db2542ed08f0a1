import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import type { Results, RowResult } from './measure.js';
import { nginxVersion } from './nginx.js';
import type { Settings } from './settings.js';
import { atLeast, atMost, machineDrift, NOT_MEASURED, ofRow, perRound, single, spread, withDrift, type Judged } from './verdict.js';
import { wrkVersion } from './wrk.js';

/**
 * The printed report: where the run ran, one table of rows, the memory and revocation figures,
 * and each of the project's targets (docs/benchmarks.md#targets) beside the figure it is judged on:
 * a comparison of two rows round by round, with its spread over the rounds (./verdict.ts).
 */

const MB = 1024 * 1024;
const TOLERANCE = 0.05;

export interface Machine {
  cpuModel: string;
  cpus: number;
  node: string;
  nginx: string | null;
  redis: string;
  commit: string;
  pinning: string;
  loadAverageAtStart: string;
}

export function describeMachine(pinning: string): Machine {
  const run = (file: string, args: string[]) => {
    try {
      return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
    } catch {
      return 'unknown';
    }
  };
  return {
    cpuModel: /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown CPU',
    cpus: cpus().length,
    node: process.version,
    nginx: nginxVersion(),
    redis: /v=(\S+)/.exec(run('redis-server', ['--version']))?.[1] ?? 'unknown',
    commit: run('git', ['rev-parse', '--short', 'HEAD']),
    pinning,
    loadAverageAtStart: loadAverage(),
  };
}

const loadAverage = () =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');

export function markdownTable(header: string[], rows: string[][]): string {
  const widths = header.map((cell, column) => Math.max(cell.length, ...rows.map((row) => row[column]!.length)));
  const line = (cells: string[]) => `| ${cells.map((cell, column) => cell.padEnd(widths[column]!)).join(' | ')} |`;
  return [line(header), `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

const fixed = (value: number | null | undefined, digits: number) =>
  value === null || value === undefined || Number.isNaN(value) ? '-' : value.toFixed(digits);
const megabytes = (bytes: number) => `${(bytes / MB).toFixed(0)} MB`;

function rowsTable(rows: RowResult[]): string {
  return markdownTable(
    ['row', 'req/s', 'p50 ms', 'p99 ms', 'tier CPU ms / 1k req', 'tier CPU %', 'cache hits'],
    rows.map((row) => [
      row.windows > 1 ? `${row.title} (${row.windows} windows)` : row.title,
      Math.round(row.load.requestsPerSecond).toString(),
      fixed(row.load.p50Ms, 2),
      fixed(row.load.p99Ms, 2),
      fixed(row.tierCpuMsPer1k, 1),
      fixed(row.tierCpuPercent, 0),
      row.cacheHitPercent === null ? '-' : `${row.cacheHitPercent.toFixed(1)} %`,
    ]),
  );
}

/** Lowest RSS of the first and of the second half of the samples: what a leak raises is the floor RSS comes back to. */
function halves(samples: readonly number[]): [number, number] {
  const half = Math.max(1, Math.floor(samples.length / 2));
  return [Math.min(...samples.slice(0, half)), Math.min(...samples.slice(half))];
}

function memoryLines(results: Results): string[] {
  const { idleBytes, cached, soak, flood } = results.memory;
  const lines: string[] = [];
  if (idleBytes !== null) lines.push(`tokengate RSS idle (started, nothing served): ${megabytes(idleBytes)}`);
  const importFloor = results.memory.importFloorBytes;
  if (importFloor !== null)
    lines.push(`import floor RSS (fastify, undici, ioredis, pino and prom-client imported, nothing served; the same node flags): ${megabytes(importFloor)}`);
  if (cached !== null) lines.push(`tokengate RSS with ${cached.tokens} cached tokens (right after the cache-miss row): ${megabytes(cached.bytes)}`);
  const heap = results.memory.heapAndBuffers;
  if (cached !== null && heap !== null && heap.cachedBytes !== null && cached.tokens > 0)
    lines.push(
      `heap and array buffers per cached token: ${((heap.cachedBytes - heap.idleBytes) / cached.tokens).toFixed(0)} bytes (${megabytes(heap.idleBytes)} idle, ${megabytes(heap.cachedBytes)} with them)`,
    );
  const fill = results.memory.fill;
  if (fill !== null && fill.tokens > 0)
    lines.push(
      `cache filled with ${fill.tokens} tokens (a tokengate of its own): RSS ${megabytes(fill.idleBytes)} idle, ${megabytes(fill.bytes)} full (+${megabytes(fill.bytes - fill.idleBytes)}); ` +
        `heap and array buffers ${((fill.heapBytes - fill.idleHeapBytes) / fill.tokens).toFixed(0)} bytes per token` +
        (fill.spaces === null
          ? ''
          : `; V8's young generation reserved ${megabytes(fill.idleSpaces.newSpaceBytes)} idle, ${megabytes(fill.spaces.newSpaceBytes)} full, old generation in use ${megabytes(fill.idleSpaces.oldSpaceUsedBytes)} idle, ${megabytes(fill.spaces.oldSpaceUsedBytes)} full`),
    );
  if (soak !== null && soak.length >= 2) {
    const [first, second] = halves(soak);
    lines.push(
      `soak, ${soak.length} s at full load: RSS ${megabytes(Math.min(...soak))} to ${megabytes(Math.max(...soak))}; lowest ${megabytes(first)} in the first half, ${megabytes(second)} in the second`,
    );
  }
  if (flood !== null && flood.after.length > 0)
    lines.push(
      `unknown-token flood: RSS ${megabytes(flood.beforeBytes)} before, peak ${megabytes(Math.max(...flood.during, ...flood.after))}, ` +
        `settled ${megabytes(flood.after.at(-1)!)} ${flood.after.length} s after`,
    );
  const cacheHit = results.rows.find((row) => row.id === 'cache-hit');
  if (cacheHit !== undefined && cacheHit.gcPauses !== null) {
    const { collections, p99Seconds } = cacheHit.gcPauses;
    lines.push(
      `garbage collection during the cached-token row: ${collections} collections (${fixed((collections * 1000) / cacheHit.load.requests, 2)} per 1,000 requests), ` +
        `pause p99 ${p99Seconds === null ? '-' : `<= ${fixed(p99Seconds * 1000, 2)} ms (its bucket's bound in nodejs_gc_duration_seconds)`}`,
    );
  }
  const revocation = results.revocation;
  if (results.forgedStoreCalls !== null) lines.push(`Redis commands while forged tokens were refused: ${results.forgedStoreCalls}`);
  const dpop = results.dpopStoreCommands;
  if (dpop !== null && dpop.requests > 0)
    lines.push(
      `Redis commands per 1,000 DPoP requests (replay marks): ${((dpop.commands / dpop.requests) * 1000).toFixed(0)} (${dpop.commands} for ${dpop.requests})`,
    );
  if (results.rateLimitCommandsPer1k !== null)
    lines.push(`Redis commands per 1,000 requests admitted on a rate limited route under its limit: ${fixed(results.rateLimitCommandsPer1k, 1)}`);
  const over = results.rateLimitOver;
  if (over !== null && over.seconds > 0)
    lines.push(
      `rate limited route at 3x its limit: ${fixed(over.refused / over.seconds, 0)} 429s per second, ${fixed(over.commands / over.seconds, 1)} Redis commands per second`,
    );
  if (revocation !== null)
    lines.push(
      `revocation seen by a second sidecar (${revocation.samples} tokens): p50 ${fixed(revocation.p50Ms, 1)} ms, p99 ${fixed(revocation.p99Ms, 1)} ms, max ${fixed(revocation.maxMs, 1)} ms`,
    );
  return lines.map((line) => `- ${line}`);
}

/**
 * The targets of docs/benchmarks.md, in its words; each judged on this run's figures, or not
 * measured. A target that compares two rows names their ids; they must be rows of one scenario
 * (measured in turns), and are compared round by round.
 */
export function judgeTargets(results: Results): Array<[string, Judged]> {
  const row = (id: string) => results.rows.find((each) => each.id === id);
  // Each ratio is judged with the machine's drift over the run as its margin (docs/benchmarks.md#verdicts).
  const reqDrift = machineDrift(results.drift, (probe) => probe.requestsPerSecond);
  const cpuDrift = machineDrift(results.drift, (probe) => probe.tierCpuMsPer1k);
  const reqRatio = (id: string, base: string) =>
    withDrift(
      perRound(row(id), row(base), (round) => round.requestsPerSecond),
      reqDrift,
    );
  const cpuRatio = (id: string, base: string) =>
    withDrift(
      perRound(row(id), row(base), (round) => round.tierCpuMsPer1k),
      cpuDrift,
    );

  const { idleBytes, importFloorBytes, cached, soak, flood, heapAndBuffers, fill } = results.memory;
  const perCachedToken =
    cached !== null && cached.tokens > 0 && heapAndBuffers !== null && heapAndBuffers.cachedBytes !== null
      ? (heapAndBuffers.cachedBytes - heapAndBuffers.idleBytes) / cached.tokens
      : null;
  const addedP99 = perRound(
    row('cache-hit-at-rate'),
    row('direct-at-rate'),
    (round) => round.p99Ms,
    (a, b) => a - b,
  );
  const [tokengateWorkers, lruWorkers] = [row('workers-tokengate'), row('workers-nginx-lru')];
  const workersVsLru =
    tokengateWorkers === undefined || lruWorkers === undefined ? null : tokengateWorkers.load.requestsPerSecond / lruWorkers.load.requestsPerSecond;
  const workers = atLeast(reqRatio('workers-tokengate', 'workers-nginx-redis'), 1.0);
  const soakHalves = soak !== null && soak.length >= 2 ? halves(soak) : null;
  const settled = flood === null || flood.after.length === 0 ? null : flood.after.at(-1)!;
  return [
    ['cache hit, one core: CPU per request <= 1.10x the floor', atMost(cpuRatio('cache-hit', 'floor'), 1.1)],
    ['cache hit, one core: req/s >= 0.90x the floor', atLeast(reqRatio('cache-hit', 'floor'), 0.9)],
    ['cache hit, one core: req/s >= 1.2x nginx auth_request (Redis-GET check)', atLeast(reqRatio('cache-hit', 'nginx-redis'), 1.2)],
    ['cache hit, one core: CPU per request <= 0.85x nginx auth_request (Redis-GET check)', atMost(cpuRatio('cache-hit', 'nginx-redis'), 0.85)],
    ['cache miss over 100k tokens: req/s >= 0.7x cache hit', atLeast(reqRatio('cache-miss', 'cache-hit'), 0.7)],
    [
      "cached token, signed identity: CPU per request <= 1.03x the same tokengate's route without one",
      atMost(cpuRatio('cache-hit-signed', 'signed-identity-off'), 1.03),
    ],
    ['nginx auth_request + tokengate decisions: req/s >= 1.0x nginx auth_request (LRU check)', atLeast(reqRatio('nginx-decisions', 'nginx-lru'), 1.0)],
    ['nginx auth_request + tokengate decisions: CPU per request <= nginx auth_request (LRU check)', atMost(cpuRatio('nginx-decisions', 'nginx-lru'), 1.0)],
    [
      'nginx + tokengate decision cache, cached route: CPU per request <= 1.5x nginx proxying alone',
      atMost(cpuRatio('nginx-decision-cache', 'nginx-proxy'), 1.5),
    ],
    ['nginx + tokengate decision cache, cached route: req/s >= 2x nginx auth_request (LRU check)', atLeast(reqRatio('nginx-decision-cache', 'nginx-lru'), 2.0)],
    ['added p99 at 2,000 req/s <= 1 ms over direct', atMost(addedP99, 1.0, ' ms')],
    [
      '2 workers unpinned: req/s >= 1.0x nginx (2 workers) + check service (Redis-GET check)',
      workersVsLru === null || workers.verdict === '-'
        ? workers
        : { ...workers, measured: `${workers.measured} (vs the LRU check: ${workersVsLru.toFixed(2)}x)` },
    ],
    [
      'RSS idle <= 1.10x the import floor of the stack',
      idleBytes === null || importFloorBytes === null
        ? NOT_MEASURED
        : single(
            `${(idleBytes / importFloorBytes).toFixed(2)}x (${megabytes(idleBytes)} against ${megabytes(importFloorBytes)})`,
            idleBytes <= 1.1 * importFloorBytes,
          ),
    ],
    [
      'RSS with 100k cached tokens <= 125 MB',
      cached === null
        ? NOT_MEASURED
        : single(`${megabytes(cached.bytes)} with ${cached.tokens} cached`, cached.tokens >= 100_000 ? cached.bytes <= 125 * MB : null),
    ],
    ['heap and array buffers per cached token <= 100 bytes', atMostOnce(perCachedToken, 100, ' B')],
    [
      'RSS with 1,000,000 cached tokens <= idle + 150 MB',
      fill === null || fill.tokens === 0
        ? NOT_MEASURED
        : single(
            `+${megabytes(fill.bytes - fill.idleBytes)} with ${fill.tokens} cached`,
            fill.tokens >= 1_000_000 ? fill.bytes - fill.idleBytes <= 150 * MB : null,
          ),
    ],
    [
      `RSS flat over the soak (lowest of its second half within ${TOLERANCE * 100} % of its first half's)`,
      soakHalves === null ? NOT_MEASURED : atMostOnce((soakHalves[1] / soakHalves[0] - 1) * 100, TOLERANCE * 100, ' %'),
    ],
    [
      `RSS flat under the unknown-token flood (settled within ${TOLERANCE * 100} % of before)`,
      settled === null ? NOT_MEASURED : atMostOnce((settled / flood!.beforeBytes - 1) * 100, TOLERANCE * 100, ' %'),
    ],
    [
      'forged tokens: 0 store calls',
      results.forgedStoreCalls === null ? NOT_MEASURED : single(`${results.forgedStoreCalls} calls`, results.forgedStoreCalls === 0),
    ],
    [
      'client_credentials issuance, one core: >= 5,000 tokens/s',
      atLeast(
        ofRow(row('issuance'), (round) => round.requestsPerSecond),
        5_000,
        ' tokens/s',
        0,
      ),
    ],
    ['revocation seen by a second sidecar: p99 <= 50 ms', atMostOnce(results.revocation?.p99Ms ?? null, 50, ' ms')],
    [
      'rate limited route under its limit: CPU per request <= 1.05x the same route without a limit',
      atMost(cpuRatio('rate-limit-under', 'rate-limit-off'), 1.05),
    ],
    ['rate limited route under its limit: <= 20 Redis commands per 1,000 admitted', atMostOnce(results.rateLimitCommandsPer1k, 20, '')],
    ['tracing on, 0 % sampled: CPU per request <= 1.02x tracing off', atMost(cpuRatio('tracing-unsampled', 'tracing-off'), 1.02)],
    ['tracing on, 10 % sampled: CPU per request <= 1.05x tracing off', atMost(cpuRatio('tracing-10', 'tracing-off'), 1.05)],
    ['tracing on, 100 % sampled: CPU per request <= 1.20x tracing off', atMost(cpuRatio('tracing-100', 'tracing-off'), 1.2)],
  ];
}

/**
 * Rows of different scenarios that measure one configuration: a cached token on a route with no
 * limit, no tracing, no signed identity. Their figures should agree within their spreads and the
 * machine's drift; where they do not, the report says so.
 */
const SAME_CONFIGURATION: ReadonlyArray<readonly [string, string]> = [
  ['cache-hit', 'tracing-off'],
  ['cache-hit', 'rate-limit-off'],
  ['cache-hit', 'signed-identity-off'],
];

const percent = (share: number) => `${(share * 100).toFixed(1)} %`;

/** The machine's drift over the run, and whether rows measuring one configuration in different scenarios agree. */
function consistencyLines(results: Results): string[] {
  const probes = results.drift;
  const cpuDrift = machineDrift(probes, (probe) => probe.tierCpuMsPer1k);
  const reqDrift = machineDrift(probes, (probe) => probe.requestsPerSecond);
  const lines: string[] = [];
  if (cpuDrift !== null && reqDrift !== null) {
    const cpu = probes.map((probe) => probe.tierCpuMsPer1k);
    const req = probes.map((probe) => probe.requestsPerSecond);
    lines.push(
      `the machine's drift: the floor, measured again before each scenario (${probes.length} windows), read ${fixed(Math.min(...cpu), 1)}-${fixed(Math.max(...cpu), 1)} CPU ms / 1k req (±${percent(cpuDrift)}) and ` +
        `${fixed(Math.min(...req), 0)}-${fixed(Math.max(...req), 0)} req/s (±${percent(reqDrift)}); a ratio within that of its target is judged unsure`,
    );
  } else lines.push("the machine's drift: not measured (fewer than two windows of the floor); verdicts use the rounds' spread alone");
  const row = (id: string) => results.rows.find((each) => each.id === id);
  for (const [firstId, secondId] of SAME_CONFIGURATION) {
    const [first, second] = [row(firstId), row(secondId)];
    if (first === undefined || second === undefined) continue;
    const [a, b] = [
      spread({ rounds: first.rounds.map((round) => round.tierCpuMsPer1k) }),
      spread({ rounds: second.rounds.map((round) => round.tierCpuMsPer1k) }),
    ];
    const apart = Math.abs(a.median - b.median) / ((a.median + b.median) / 2);
    const allowed = (a.high - a.low) / a.median / 2 + (b.high - b.low) / b.median / 2 + 2 * (cpuDrift ?? 0);
    const figures = `${firstId} ${fixed(a.median, 1)}, ${secondId} ${fixed(b.median, 1)} CPU ms / 1k req (${percent(apart)} apart; their spreads and the drift allow ${percent(allowed)})`;
    lines.push(
      apart <= allowed
        ? `one configuration in two scenarios agrees: ${figures}`
        : `one configuration in two scenarios DISAGREES: ${figures}. They ran minutes apart in tokengates of their own: the machine moved between them more than the floor's windows caught, or the two tokengates differ in what they load. Targets compare rows of one scenario only, so their verdicts stand; absolute figures of this run do not.`,
    );
  }
  return lines.map((line) => `- ${line}`);
}

/** A figure measured once (memory, a count over the whole row): no rounds to spread over. */
const atMostOnce = (value: number | null, maximum: number, unit: string): Judged =>
  value === null ? NOT_MEASURED : single(`${value.toFixed(2)}${unit}`, value <= maximum);

function targetsTable(results: Results): string {
  return markdownTable(
    ['target', 'measured: median of the rounds (IQR, range)', 'verdict'],
    judgeTargets(results).map(([target, { measured, verdict }]) => [target, measured, verdict]),
  );
}

export function renderReport(results: Results, machine: Machine, settings: Settings, seconds: number): string {
  const heading =
    `${new Date().toISOString()}, ${machine.cpuModel}, ${machine.cpus} CPUs, Node ${machine.node}, nginx ${machine.nginx ?? 'absent'}, Redis ${machine.redis}, commit ${machine.commit}\n` +
    `${settings.short ? 'SHORT RUN (BENCH_SHORT=1): fewer, shorter windows and fewer tokens; ' : ''}${machine.pinning}; ` +
    `${settings.connections} connections, load generator ${settings.loadGenerator === 'wrk' ? `wrk ${wrkVersion()} (one thread)` : 'autocannon'}; tokengate's node flags: ${settings.nodeFlags.length === 0 ? 'none' : settings.nodeFlags.join(' ')}; ` +
    `load average ${machine.loadAverageAtStart} at start, ${loadAverage()} at end; run took ${seconds.toFixed(0)} s`;
  const sections = [heading, rowsTable(results.rows), memoryLines(results).join('\n'), consistencyLines(results).join('\n'), targetsTable(results)];
  if (results.notes.length > 0) sections.push(`Notes:\n${results.notes.map((note) => `- ${note}`).join('\n')}`);
  if (results.failures.length > 0) sections.push(`FAILED:\n${results.failures.map((failure) => `- ${failure}`).join('\n')}`);
  return `${sections.filter((section) => section !== '').join('\n\n')}\n`;
}
