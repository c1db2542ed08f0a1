import type { AutocannonRequest } from 'autocannon';
import { performance } from 'node:perf_hooks';
import type { RedisStore } from '../../src/store/redis.js';
import { runLoadWindow, summarizeLoad, type LoadWindow } from './load.js';
import { cacheLookupsBetween, scrapeCounters, type CacheLookups } from './metrics.js';
import { cpuCoreMilliseconds, cpuMilliseconds, totalCpuMilliseconds } from './proc.js';
import { logTail, type Pinning, type ProcessGroup } from './processes.js';
import { progress } from './progress.js';
import type { BenchResults, ScenarioResult } from './report.js';
import type { BenchSettings } from './settings.js';
import type { Service } from './services.js';

/**
 * Measuring one throughput scenario: one answer checked, warm-up, then a measured window with
 * the CPU of every process involved (/proc), tokengate's cache counters (/metrics) and what
 * else used the servers' CPUs (/proc/stat); windows of one scenario pool into its row.
 */

export interface Run {
  settings: BenchSettings;
  group: ProcessGroup;
  pinning: Pinning | null;
  redis: { url: string; pid: number; store: RedisStore };
  /** Servers that have had their first, longer warm-up. */
  warmed: Set<Service>;
  results: BenchResults;
  failures: string[];
}

/** How one throughput scenario is driven and accounted. */
export interface ScenarioSpec {
  id: string;
  title: string;
  target: Service;
  request: AutocannonRequest;
  expectedStatus?: number;
  /** Whose CPU counts as the gateway's; null for the direct run. */
  gateway: Service | null;
  baseline: string | null;
  durationSeconds?: number;
  amount?: number;
  /** Seconds of unmeasured load first: BENCH_WARMUP (BENCH_FIRST_WARMUP on a fresh server) by default, 0 for none. */
  warmupSeconds?: number;
  /** Called every second while the measured run lasts (memory soak). */
  everySecond?: () => void;
}

/** What one measured window of a scenario took, from every process involved. */
export interface Window {
  load: LoadWindow;
  gatewayCpuMs: number;
  redisCpuMs: number;
  loadGeneratorCpuMs: number;
  cacheLookups: CacheLookups | null;
  serverCpu: ServerCpuUse | null;
}

/** One scenario, one window: check one answer, warm up, measure. */
export async function measure(run: Run, spec: ScenarioSpec): Promise<ScenarioResult> {
  return record(run, spec, [await measureWindow(run, spec)]);
}

/**
 * Several scenarios in turn, `rounds` times, each pooled over its windows: slow drifts in what
 * else the machine does are shared out evenly between the servers compared.
 */
export async function measureInterleaved(run: Run, specs: ScenarioSpec[], rounds: number): Promise<void> {
  const windows = new Map<ScenarioSpec, Window[]>(specs.map((spec) => [spec, []]));
  for (let round = 0; round < rounds; round++) {
    for (const spec of specs) {
      try {
        const window = await measureWindow(run, round === 0 ? spec : { ...spec, warmupSeconds: 0 });
        windows.get(spec)!.push(window);
        progress(`${spec.title}, window ${round + 1} of ${rounds}: ${Math.round(window.load.requests / window.load.seconds)} req/s`);
      } catch (error) {
        windows.delete(spec);
        specs = specs.filter((other) => other !== spec);
        run.failures.push(`${spec.id}: ${(error as Error).message}`);
        progress(`${spec.id} FAILED: ${(error as Error).message}`);
      }
    }
  }
  for (const [spec, measured] of windows) record(run, spec, measured);
}

async function measureWindow(run: Run, spec: ScenarioSpec): Promise<Window> {
  const expectedStatus = spec.expectedStatus ?? 200;
  const load = (durationSeconds: number, amount?: number) =>
    runLoadWindow({
      url: spec.target.url,
      connections: run.settings.connections,
      durationSeconds,
      ...(amount !== undefined ? { amount } : {}),
      request: spec.request,
      expectedStatus,
    });
  // A fresh Node process runs its first seconds unoptimized: its first scenario warms up longer.
  const fresh = !run.warmed.has(spec.target);
  run.warmed.add(spec.target);
  const warmupSeconds = spec.warmupSeconds ?? (fresh ? run.settings.firstWarmupSeconds : run.settings.warmupSeconds);
  if (warmupSeconds > 0 || fresh) await expectAnswer(spec.target, spec.request, expectedStatus);
  if (warmupSeconds > 0) await load(warmupSeconds);

  const opsUrl = spec.gateway?.opsUrl ?? null;
  const countersBefore = opsUrl === null ? null : await scrapeCounters(opsUrl);
  const gatewayPids = spec.gateway?.pids() ?? [];
  const serverCpu = watchServerCpu(run);
  const before = { gateway: totalCpuMilliseconds(gatewayPids), redis: cpuMilliseconds(run.redis.pid), self: process.cpuUsage() };
  const ticker = spec.everySecond === undefined ? null : setInterval(spec.everySecond, 1000);
  let measured: LoadWindow;
  try {
    measured = await load(spec.durationSeconds ?? run.settings.durationSeconds, spec.amount);
  } finally {
    if (ticker !== null) clearInterval(ticker);
  }
  const self = process.cpuUsage(before.self);
  for (const service of [spec.target, spec.gateway]) {
    const exited = service?.process.exitStatus() ?? null;
    if (exited !== null) throw new Error(`${service!.process.name} ${exited} during the run:\n${logTail(service!.process.logFile)}`);
  }
  return {
    load: measured,
    serverCpu: serverCpu?.() ?? null,
    gatewayCpuMs: totalCpuMilliseconds(gatewayPids) - before.gateway,
    redisCpuMs: cpuMilliseconds(run.redis.pid) - before.redis,
    loadGeneratorCpuMs: (self.user + self.system) / 1000,
    cacheLookups: opsUrl === null || countersBefore === null ? null : cacheLookupsBetween(countersBefore, await scrapeCounters(opsUrl)),
  };
}

/** A scenario's row from its windows, pooled; stored in the results in the order measured. */
function record(run: Run, spec: ScenarioSpec, windows: Window[]): ScenarioResult {
  const load = summarizeLoad(windows.map((window) => window.load));
  const sum = (pick: (window: Window) => number) => windows.reduce((total, window) => total + pick(window), 0);
  const perThousand = (cpuMs: number) => (load.requests === 0 ? Number.NaN : (cpuMs * 1000) / load.requests);
  const lookups = windows.map((window) => window.cacheLookups);
  const serverCpu = windows.every((window) => window.serverCpu !== null) ? windows.map((window) => window.serverCpu!) : null;
  const serverCapacityMs = serverCpu?.reduce((total, use) => total + use.capacityMs, 0) ?? 0;
  const scenario: ScenarioResult = {
    id: spec.id,
    title: windows.length > 1 ? `${spec.title} (${windows.length} windows)` : spec.title,
    load,
    gatewayCpuMsPer1k: spec.gateway === null ? null : perThousand(sum((window) => window.gatewayCpuMs)),
    storeCpuMsPer1k: perThousand(sum((window) => window.redisCpuMs)),
    cacheLookups: lookups.every((each) => each !== null)
      ? { hits: lookups.reduce((total, each) => total + each!.hits, 0), misses: lookups.reduce((total, each) => total + each!.misses, 0) }
      : null,
    serverCpuElsewherePercent: serverCpu === null ? null : (serverCpu.reduce((total, use) => total + use.elsewhereMs, 0) / serverCapacityMs) * 100,
    serverCpuStealPercent: serverCpu === null ? null : (serverCpu.reduce((total, use) => total + use.stealMs, 0) / serverCapacityMs) * 100,
    baseline: spec.baseline,
    loadGeneratorCpuPercent: (sum((window) => window.loadGeneratorCpuMs) / (load.seconds * 1000)) * 100,
  };
  run.results.scenarios[spec.id] = scenario;
  progress(
    `${scenario.title}: ${Math.round(load.requestsPerSecond)} req/s, p99 ${load.p99Ms.toFixed(2)} ms, ${load.errors} errors, ${load.unexpected} unexpected statuses`,
  );
  return scenario;
}

export interface ServerCpuUse {
  /** CPU time of the server CPUs used by processes outside the benchmark, and stolen by the hypervisor. */
  elsewhereMs: number;
  stealMs: number;
  /** Wall time times the number of server CPUs. */
  capacityMs: number;
}

/**
 * Starts watching the servers' CPUs (when pinned); the function returned tells what processes
 * outside the benchmark used of them since, and what the hypervisor stole. A scenario with much
 * of either measured a busy machine, not the servers.
 */
function watchServerCpu(run: Run): (() => ServerCpuUse) | null {
  if (run.pinning === null) return null;
  const cpus = run.pinning.serverCpuList;
  const pids = run.group.pids();
  const ours = () => pids.reduce((sum, pid) => sum + tryCpuMilliseconds(pid), 0);
  const started = { at: performance.now(), core: cpuCoreMilliseconds(cpus), ours: ours() };
  return () => {
    const core = cpuCoreMilliseconds(cpus);
    return {
      elsewhereMs: Math.max(0, core.busy - started.core.busy - (ours() - started.ours)),
      stealMs: core.steal - started.core.steal,
      capacityMs: (performance.now() - started.at) * cpus.length,
    };
  };
}

/** A process that ended meanwhile counts as nothing more. */
function tryCpuMilliseconds(pid: number): number {
  try {
    return cpuMilliseconds(pid);
  } catch {
    return 0;
  }
}

/** One request before the load: a scenario that would measure error pages fails here, with the answer shown. */
export async function expectAnswer(target: Service, request: AutocannonRequest, status: number): Promise<void> {
  const concrete = request.setupRequest === undefined ? request : request.setupRequest({ ...request }, {});
  const response = await fetch(`${target.url}${concrete.path ?? '/'}`, {
    method: concrete.method ?? 'GET',
    ...(concrete.headers !== undefined ? { headers: concrete.headers } : {}),
    ...(concrete.body !== undefined ? { body: concrete.body } : {}),
  });
  const body = await response.text();
  if (response.status !== status)
    throw new Error(`${concrete.method ?? 'GET'} ${concrete.path} answered ${response.status} (expected ${status}): ${body.slice(0, 300)}`);
}
