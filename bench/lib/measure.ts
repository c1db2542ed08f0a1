import type { AutocannonRequest } from 'autocannon';
import { performance } from 'node:perf_hooks';
import type { RedisStore } from '../../src/store/redis.js';
import type { TokenMinter } from '../../src/token/token-value.js';
import { runLoadWindow, summarizeLoad, type LoadOptions, type LoadResult, type LoadWindow } from './load.js';
import { cacheLookupsBetween, gcPausesBetween, pauseQuantile, scrapeMetrics, type CacheLookups } from './metrics.js';
import { totalCpuMilliseconds } from './proc.js';
import { logTail, type ProcessGroup } from './processes.js';
import type { Tier } from './services.js';
import type { Settings } from './settings.js';
import { runWrkWindow } from './wrk.js';

/**
 * How a row is measured: its tier under test gets one request checked and a warm-up, then
 * measured windows, in turns with the other rows of its scenario, each window with the tier's
 * CPU from /proc and, for tokengate, its cache counters from /metrics; a row pools its windows.
 */

/** What every scenario gets: the run's shared parts, and where the figures go. */
export interface Bench {
  settings: Settings;
  group: ProcessGroup;
  redis: { url: string; store: RedisStore };
  keyPrefix: string;
  tagKey: string;
  minter: TokenMinter;
  upstream: Tier;
  /** GET /api/public/me with the run's stored user token: the cached-token request, and every warm-up. */
  me: AutocannonRequest;
  /** That token, for a row whose tokengate has a store of its own. */
  userToken: string;
  results: Results;
  /** Starts a server the first time a row asks for it and hands the same one to later rows. */
  shared(name: string, start: () => Promise<Tier | string>): Promise<Tier | string>;
  /** Something to close once the run is over, before its processes are stopped (a row's own store client). */
  onStop(close: () => Promise<void>): void;
}

export interface RowResult {
  id: string;
  title: string;
  /** The scenario whose rows it was measured in turns with: only those are compared round by round. */
  scenario: string;
  load: LoadResult;
  windows: number;
  /** CPU (user + system) of the tier's processes per 1,000 answers. */
  tierCpuMsPer1k: number;
  /** The tier's CPU time over the wall time of its windows: 100 is one core busy throughout. */
  tierCpuPercent: number;
  /** Share of tokengate's token lookups answered from its cache; null for other tiers. */
  cacheHitPercent: number | null;
  /** Each round's window alone, in order: what a target's per-round comparison pairs (./verdict.ts). */
  rounds: RoundFigures[];
  /** tokengate's garbage collections over the row's windows and the bucket bound of their pauses' p99 (from its /metrics); null for other tiers. */
  gcPauses: { collections: number; p99Seconds: number | null } | null;
}

export interface RoundFigures {
  tierCpuMsPer1k: number;
  requestsPerSecond: number;
  p99Ms: number;
}

/** One window of the reference row (the floor), measured again and again through the run: the machine's own drift. */
export interface DriftProbe {
  /** The scenario it ran before (or `end`). */
  before: string;
  atSeconds: number;
  tierCpuMsPer1k: number;
  requestsPerSecond: number;
}

export interface Results {
  rows: RowResult[];
  /** The reference row's windows through the run (./verdict.ts judges each target against their spread). */
  drift: DriftProbe[];
  memory: {
    idleBytes: number | null;
    /** RSS of the stack's modules imported and nothing served (bench/servers/import-floor.mjs), read as idleBytes is. */
    importFloorBytes: number | null;
    cached: { tokens: number; bytes: number } | null;
    /** V8 heap in use plus array buffers (where the cache keeps its entries), read from /metrics: idle, and with the cache-miss row's tokens cached. */
    heapAndBuffers: { idleBytes: number; cachedBytes: number | null } | null;
    /** The cache-fill row: its own tokengate's RSS idle and with `tokens` cached, and its heap plus buffers likewise. */
    fill: {
      tokens: number;
      idleBytes: number;
      bytes: number;
      idleHeapBytes: number;
      heapBytes: number;
      idleSpaces: HeapSpaces;
      spaces: HeapSpaces | null;
    } | null;
    /** RSS once a second. */
    soak: number[] | null;
    flood: { beforeBytes: number; during: number[]; after: number[] } | null;
  };
  revocation: { samples: number; p50Ms: number; p99Ms: number; maxMs: number } | null;
  /** Redis commands executed while the forged-token row ran. */
  forgedStoreCalls: number | null;
  /** Redis commands executed while the DPoP cached-token row ran (its replay marks), and the requests it answered. */
  dpopStoreCommands: { commands: number; requests: number } | null;
  /** Redis commands executed per 1,000 requests admitted on a rate limited route under its limit. */
  rateLimitCommandsPer1k: number | null;
  /** Redis commands executed while the over-limit row ran alone, its seconds and its 429s. */
  rateLimitOver: { commands: number; seconds: number; refused: number } | null;
  /** Rows skipped (nginx absent, a config key this build lacks) and windows cut short. */
  notes: string[];
  failures: string[];
}

/** V8's young generation (what it has reserved) and old generation (in use), from tokengate's /metrics. */
export interface HeapSpaces {
  newSpaceBytes: number;
  oldSpaceUsedBytes: number;
}

/** What a row's windows send. */
export interface Traffic {
  request: AutocannonRequest;
  expectedStatus?: number | readonly number[];
  /** Each window sends exactly this many requests (one token each) instead of running for its seconds. */
  requestsPerWindow?: number;
  /** Called every second of each measured window. */
  everySecond?: () => void;
  /** The first window's warm-up also sends this row's own request, after the cached-token one: for a row whose code path the cached token does not reach, and whose request may be repeated. */
  warmsUp?: boolean;
}

/** One row of the table. */
export interface Row {
  id: string;
  title: string;
  /** The tier under test, started where it belongs (or reused); a string says why it cannot run here. */
  tier(bench: Bench): Promise<Tier | string>;
  /** Prepared once, before the first window; by default the cached-token request. */
  traffic?(bench: Bench, tier: Tier, windows: number): Promise<Traffic>;
  /** After the last window (the cache-miss row records the memory it filled). */
  finish?(bench: Bench, tier: Tier, result: RowResult): Promise<void>;
  /** Connections and overall requests per second; by default 50 connections, as fast as answered. */
  connections?: number;
  rate?: number;
  /** The rate sent at a steady pace rather than as autocannon's per-second rushes (the load's `steady`). */
  steady?: boolean;
}

/** An entry of the run: BENCH_ONLY names its id or any of its rows'. */
export interface Scenario {
  id: string;
  rowIds: readonly string[];
  run(bench: Bench, wanted: (rowId: string) => boolean): Promise<void>;
}

export interface Shape {
  rounds: number;
  seconds: number;
}

/**
 * Rows measured side by side: each takes a window in turn, `rounds` times, so a drift in the
 * machine's load is shared evenly, and a target comparing two of them is judged round by round
 * (./verdict.ts). A row compared with another belongs in the same list.
 */
export function rowsInTurns(id: string, rows: Row[], shape: (settings: Settings) => Shape = (s) => ({ rounds: s.rounds, seconds: s.windowSeconds })): Scenario {
  return {
    id,
    rowIds: rows.map((row) => row.id),
    run: (bench, wanted) =>
      measureRows(
        bench,
        id,
        rows.filter((row) => wanted(row.id)),
        shape(bench.settings),
      ),
  };
}

interface Contender {
  row: Row;
  tier: Tier;
  traffic: Traffic;
  windows: Window[];
}

interface Window {
  load: LoadWindow;
  cpuMs: number;
  lookups: CacheLookups | null;
  /** Collections during the window, cumulative by pause bucket bound (seconds). */
  gcPauses: Map<number, number> | null;
}

async function measureRows(bench: Bench, scenario: string, rows: Row[], shape: Shape): Promise<void> {
  const contenders: Contender[] = [];
  for (const row of rows) {
    await attempt(bench, row.id, async () => {
      const tier = await row.tier(bench);
      if (typeof tier === 'string') {
        bench.results.notes.push(`${row.id} skipped: ${tier}`);
        progress(`${row.id} skipped: ${tier}`);
        return;
      }
      const traffic = row.traffic === undefined ? { request: bench.me } : await row.traffic(bench, tier, shape.rounds);
      contenders.push({ row, tier, traffic, windows: [] });
      const load = { request: traffic.request, overallRate: row.rate, amount: traffic.requestsPerWindow, expectedStatus: traffic.expectedStatus ?? 200 };
      if (bench.settings.loadGenerator === 'wrk' && !isWrkLoad(load))
        bench.results.notes.push(`${row.id}: measured with autocannon (its requests are paced, counted, made per request or refused)`);
    });
  }
  for (let round = 0; round < shape.rounds; round++) {
    for (const contender of [...contenders]) {
      const ok = await attempt(bench, contender.row.id, async () => {
        const window = await measureWindow(bench, contender, shape.seconds, round === 0);
        contender.windows.push(window);
        progress(`${contender.row.title}, window ${round + 1} of ${shape.rounds}: ${Math.round(window.load.requests / window.load.seconds)} req/s`);
      });
      if (!ok) contenders.splice(contenders.indexOf(contender), 1);
    }
  }
  for (const { row, tier, traffic, windows } of contenders) {
    const result = pool(scenario, row, windows);
    bench.results.rows.push(result);
    const { errors, unexpected, statuses } = result.load;
    if (errors + unexpected > 0)
      bench.results.failures.push(
        `${row.id}: ${errors} connection errors, ${unexpected} answers other than ${traffic.expectedStatus ?? 200} ${JSON.stringify(statuses)}`,
      );
    if (row.finish !== undefined) await attempt(bench, row.id, () => row.finish!(bench, tier, result));
  }
}

/** Servers that have had their first, longer warm-up. */
const warmed = new WeakSet<Tier>();

async function measureWindow(bench: Bench, { row, tier, traffic }: Contender, seconds: number, first: boolean): Promise<Window> {
  const { settings } = bench;
  const shape = {
    url: tier.url,
    connections: row.connections ?? settings.connections,
    ...(row.rate === undefined ? {} : { overallRate: row.rate, steady: row.steady === true }),
  };
  if (first) {
    // A fresh Node process runs its first seconds unoptimized: its first row warms up longer.
    const fresh = !warmed.has(tier);
    warmed.add(tier);
    if (fresh) await expectAnswer(tier, bench.me);
    const warmupSeconds = fresh ? settings.firstWarmupSeconds : settings.warmupSeconds;
    await loadWindow(bench, { ...shape, durationSeconds: warmupSeconds, request: bench.me, expectedStatus: 200 });
    if (traffic.warmsUp === true) {
      await loadWindow(bench, { ...shape, durationSeconds: warmupSeconds, request: traffic.request, expectedStatus: traffic.expectedStatus ?? 200 });
    }
  }
  const pids = tier.pids();
  const cpuBefore = totalCpuMilliseconds(pids);
  const metricsBefore = tier.opsUrl === undefined ? null : await scrapeMetrics(tier.opsUrl);
  const ticker = traffic.everySecond === undefined ? null : setInterval(traffic.everySecond, 1000);
  const amount = traffic.requestsPerWindow;
  let load: LoadWindow;
  try {
    load = await loadWindow(bench, {
      ...shape,
      request: traffic.request,
      expectedStatus: traffic.expectedStatus ?? 200,
      ...(amount === undefined ? { durationSeconds: seconds } : { amount, durationSeconds: settings.maxWindowSeconds }),
    });
  } finally {
    if (ticker !== null) clearInterval(ticker);
  }
  const cpuMs = totalCpuMilliseconds(pids) - cpuBefore;
  for (const started of tier.processes) {
    const exited = started.exitStatus();
    if (exited !== null) throw new Error(`${started.name} ${exited} during the window:\n${logTail(started.logFile)}`);
  }
  if (amount !== undefined && load.requests < amount)
    bench.results.notes.push(`${row.id}: a window stopped after ${settings.maxWindowSeconds} s, at ${load.requests} of ${amount} requests`);
  const metricsAfter = metricsBefore === null ? null : await scrapeMetrics(tier.opsUrl!);
  const lookups = metricsAfter === null ? null : cacheLookupsBetween(metricsBefore!, metricsAfter);
  return { load, cpuMs, lookups, gcPauses: metricsAfter === null ? null : gcPausesBetween(metricsBefore!, metricsAfter) };
}

/**
 * One window of load from the run's load generator. wrk sends one fixed request as fast as it is
 * answered; a window that paces its requests, counts them, changes them per request or expects a
 * refusal is autocannon's under either setting.
 */
function loadWindow(bench: Bench, options: LoadOptions): Promise<LoadWindow> {
  if (bench.settings.loadGenerator === 'wrk' && isWrkLoad(options)) {
    return runWrkWindow({
      url: options.url,
      connections: options.connections,
      durationSeconds: options.durationSeconds!,
      request: options.request,
      scriptDir: bench.group.logDir,
    });
  }
  return runLoadWindow(options);
}

export function isWrkLoad(options: Pick<LoadOptions, 'request' | 'overallRate' | 'amount' | 'expectedStatus'>): boolean {
  return (
    options.request.setupRequest === undefined &&
    options.overallRate === undefined &&
    options.amount === undefined &&
    [options.expectedStatus].flat().every((status) => status === 200)
  );
}

function pool(scenario: string, row: Row, windows: Window[]): RowResult {
  const load = summarizeLoad(windows.map((window) => window.load));
  const cpuMs = windows.reduce((total, window) => total + window.cpuMs, 0);
  const lookups = windows.every((window) => window.lookups !== null)
    ? windows.reduce((total, window) => ({ hits: total.hits + window.lookups!.hits, lookups: total.lookups + window.lookups!.lookups }), {
        hits: 0,
        lookups: 0,
      })
    : null;
  let gcPauses: RowResult['gcPauses'] = null;
  if (windows.length > 0 && windows.every((window) => window.gcPauses !== null)) {
    const pooled = new Map<number, number>();
    for (const window of windows) for (const [bound, count] of window.gcPauses!) pooled.set(bound, (pooled.get(bound) ?? 0) + count);
    gcPauses = { collections: pooled.get(Infinity) ?? 0, p99Seconds: pauseQuantile(pooled, 0.99) };
  }
  return {
    id: row.id,
    title: row.title,
    scenario,
    gcPauses,
    load,
    windows: windows.length,
    tierCpuMsPer1k: (cpuMs * 1000) / load.requests,
    tierCpuPercent: (cpuMs / (load.seconds * 1000)) * 100,
    cacheHitPercent: lookups === null || lookups.lookups === 0 ? null : (lookups.hits / lookups.lookups) * 100,
    rounds: windows.map(({ load: window, cpuMs: windowCpuMs }) => ({
      tierCpuMsPer1k: (windowCpuMs * 1000) / window.requests,
      requestsPerSecond: window.requests / window.seconds,
      p99Ms: summarizeLoad([window]).p99Ms,
    })),
  };
}

/**
 * One window of `reference` (the floor) before scenario `before`: what the machine gives the same
 * work as the run goes on. The first probe warms its server up first, as every row's first window.
 */
export async function probeDrift(bench: Bench, reference: Row, before: string): Promise<void> {
  await attempt(bench, `drift probe before ${before}`, async () => {
    const tier = await reference.tier(bench);
    if (typeof tier === 'string') return;
    const contender = { row: reference, tier, traffic: { request: bench.me }, windows: [] };
    const window = await measureWindow(bench, contender, bench.settings.windowSeconds, !warmed.has(tier));
    bench.results.drift.push({
      before,
      atSeconds: elapsedSeconds(),
      tierCpuMsPer1k: (window.cpuMs * 1000) / window.load.requests,
      requestsPerSecond: window.load.requests / window.load.seconds,
    });
  });
}

/** Runs a part of the benchmark; a failure is recorded and the run goes on. */
export async function attempt(bench: Bench, id: string, body: () => Promise<void>): Promise<boolean> {
  try {
    await body();
    return true;
  } catch (error) {
    bench.results.failures.push(`${id}: ${(error as Error).message}`);
    progress(`${id} FAILED: ${(error as Error).message}`);
    return false;
  }
}

/** One request before the load: a row that would measure error pages fails here, with the answer shown. */
async function expectAnswer(tier: Tier, request: AutocannonRequest): Promise<void> {
  const response = await fetch(`${tier.url}${request.path ?? '/'}`, {
    method: request.method ?? 'GET',
    ...(request.headers === undefined ? {} : { headers: request.headers }),
  });
  const body = await response.text();
  if (response.status !== 200)
    throw new Error(`${tier.name} answered ${request.method ?? 'GET'} ${request.path} with ${response.status}: ${body.slice(0, 300)}`);
}

const started = performance.now();

/** A line on stderr, stamped with the seconds since the run began. */
export function progress(message: string): void {
  process.stderr.write(`[bench ${((performance.now() - started) / 1000).toFixed(0).padStart(3)} s] ${message}\n`);
}

export const elapsedSeconds = () => (performance.now() - started) / 1000;
