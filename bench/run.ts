import type { AutocannonRequest } from 'autocannon';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { RedisStore } from '../src/store/redis.js';
import { createTokenMinter, decodeTagKey, generateTagKey, type TokenMinter } from '../src/token/token-value.js';
import { USER_CLIENT_ID, forgedTokens, rotation, seedAccessTokens } from './lib/fixtures.js';
import { percentile, runLoad, runLoadWindow, summarizeLoad, type LoadWindow } from './lib/load.js';
import { cacheLookupsBetween, scrapeCounters, type CacheLookups } from './lib/metrics.js';
import { cpuCoreMilliseconds, cpuMilliseconds, residentBytes, totalCpuMilliseconds } from './lib/proc.js';
import { ProcessGroup, choosePinning, logTail, pinThisProcess, type Pinning } from './lib/processes.js';
import { commandsExecuted, startRedis } from './lib/redis.js';
import { evaluateTargets, otherTable, scenarioTable, type BenchResults, type MemoryResult, type RevocationResult, type ScenarioResult } from './lib/report.js';
import { readSettings, type BenchSettings } from './lib/settings.js';
import { nginxVersion, startBareProxy, startNginxPeer, startTokengate, startUpstream, type Service, type TokengateService } from './lib/services.js';
import { ROUTES } from './lib/tokengate-config.js';

/**
 * `npm run bench`: starts an upstream, a throwaway Redis, a bare @fastify/http-proxy, nginx +
 * a token-check service, and tokengate built from this tree, each its own process on loopback;
 * drives them with autocannon from this process; prints the table and writes
 * bench/results/latest.json and latest.md. The scenarios run in the order below.
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const KEY_PREFIX = 'bench:';
const ORGANIZER_CLIENT_ID = 'bench-organizer';
const runStarted = performance.now();

interface Run {
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
interface ScenarioSpec {
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
interface Window {
  load: LoadWindow;
  gatewayCpuMs: number;
  redisCpuMs: number;
  loadGeneratorCpuMs: number;
  cacheLookups: CacheLookups | null;
  serverCpu: ServerCpuUse | null;
}

/** One scenario, one window: check one answer, warm up, measure. */
async function measure(run: Run, spec: ScenarioSpec): Promise<ScenarioResult> {
  return record(run, spec, [await measureWindow(run, spec)]);
}

/**
 * Several scenarios in turn, `rounds` times, each pooled over its windows: slow drifts in what
 * else the machine does are shared out evenly between the servers compared.
 */
async function measureInterleaved(run: Run, specs: ScenarioSpec[], rounds: number): Promise<void> {
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
    runLoadWindow({ url: spec.target.url, connections: run.settings.connections, durationSeconds, ...(amount !== undefined ? { amount } : {}), request: spec.request, expectedStatus });
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
    cacheLookups: lookups.every((each) => each !== null) ? { hits: lookups.reduce((total, each) => total + each!.hits, 0), misses: lookups.reduce((total, each) => total + each!.misses, 0) } : null,
    serverCpuElsewherePercent: serverCpu === null ? null : (serverCpu.reduce((total, use) => total + use.elsewhereMs, 0) / serverCapacityMs) * 100,
    serverCpuStealPercent: serverCpu === null ? null : (serverCpu.reduce((total, use) => total + use.stealMs, 0) / serverCapacityMs) * 100,
    baseline: spec.baseline,
    loadGeneratorCpuPercent: (sum((window) => window.loadGeneratorCpuMs) / (load.seconds * 1000)) * 100,
  };
  run.results.scenarios[spec.id] = scenario;
  progress(`${scenario.title}: ${Math.round(load.requestsPerSecond)} req/s, p99 ${load.p99Ms.toFixed(2)} ms, ${load.errors} errors, ${load.unexpected} unexpected statuses`);
  return scenario;
}

interface ServerCpuUse {
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
async function expectAnswer(target: Service, request: AutocannonRequest, status: number): Promise<void> {
  const concrete = request.setupRequest === undefined ? request : request.setupRequest({ ...request }, {});
  const response = await fetch(`${target.url}${concrete.path ?? '/'}`, {
    method: concrete.method ?? 'GET',
    ...(concrete.headers !== undefined ? { headers: concrete.headers } : {}),
    ...(concrete.body !== undefined ? { body: concrete.body } : {}),
  });
  const body = await response.text();
  if (response.status !== status) throw new Error(`${concrete.method ?? 'GET'} ${concrete.path} answered ${response.status} (expected ${status}): ${body.slice(0, 300)}`);
}

/** V8 heap figures from tokengate's default process metrics, when it exports them. */
function heapOf(counters: Map<string, number>): MemoryResult['filledHeap'] {
  const usedBytes = counters.get('tokengate_process_nodejs_heap_size_used_bytes');
  const totalBytes = counters.get('tokengate_process_nodejs_heap_size_total_bytes');
  return usedBytes === undefined || totalBytes === undefined ? null : { usedBytes, totalBytes };
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function main(): Promise<number> {
  process.chdir(ROOT);
  const settings = readSettings(process.env);
  const pinning = choosePinning();
  if (pinning !== null) pinThisProcess(pinning);
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-bench-'));
  const group = new ProcessGroup(dir, pinning);
  const stopOnSignal = () => void group.stopAll().finally(() => process.exit(130));
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);

  const machine = describeMachine(pinning === null ? 'not pinned' : `load generator on CPU ${pinning.loadGeneratorCpus}, servers on CPU ${pinning.serverCpus} (taskset)`);
  progress(`${machine.cpuModel}, ${machine.cpus} CPUs, Node ${machine.node}, load average ${machine.loadAverageAtStart.join(' ')}; ${machine.pinning}; logs in ${dir}`);
  const results: BenchResults = { scenarios: {}, forgedStoreCommands: null, fixedRate: null, revocation: null, memory: null };
  const failures: string[] = [];
  try {
    const redis = await startRedis(group);
    const store = new RedisStore({ url: redis.url, keyPrefix: KEY_PREFIX, commandTimeoutMs: 5_000, connectTimeoutMs: 2_000 });
    const run: Run = { settings, group, pinning, redis: { url: redis.url, pid: redis.process.pid, store }, warmed: new Set(), results, failures };
    try {
      await runScenarios(run, group, dir);
    } finally {
      await store.close();
    }
  } catch (error) {
    failures.push(`setup: ${(error as Error).message}`);
  } finally {
    await group.stopAll();
  }
  return report(results, failures, machine, settings, (performance.now() - runStarted) / 1000);
}

async function runScenarios(run: Run, group: ProcessGroup, dir: string): Promise<void> {
  const { settings, results } = run;
  const wanted = (id: string) => settings.only === null || settings.only.has(id);
  const attempt = async (id: string, body: () => Promise<unknown>) => {
    if (!wanted(id)) return;
    try {
      await body();
    } catch (error) {
      run.failures.push(`${id}: ${(error as Error).message}`);
      progress(`${id} FAILED: ${(error as Error).message}`);
    }
  };

  const upstream = await startUpstream(group);
  const profileDir = settings.cpuProfileDir === null ? null : resolve(settings.cpuProfileDir);
  const bare = await startBareProxy(group, upstream.url, profileDir);
  const nginx = nginxVersion();
  const peer = nginx === null ? null : await startNginxPeer(group, dir, upstream.port, run.redis.url, KEY_PREFIX);
  if (peer === null) progress('nginx is not installed (apt-get install -y nginx): skipping the nginx auth_request peer');

  const tagKey = generateTagKey();
  const minter = createTokenMinter(decodeTagKey(tagKey));
  const tokengateOptions = {
    redisUrl: run.redis.url,
    keyPrefix: KEY_PREFIX,
    tokenTagKey: tagKey,
    upstreamUrl: upstream.url,
    nodeFlags: settings.gatewayNodeFlags,
  };
  const [userToken] = await seedAccessTokens(run.redis.store, minter, 1, 'user', USER_CLIENT_ID);
  const [applicationToken] = await seedAccessTokens(run.redis.store, minter, 1, 'application', ORGANIZER_CLIENT_ID);
  const me = { method: 'GET', path: ROUTES.me, headers: bearer(userToken!) };

  // The limit.
  await attempt('direct', () => measure(run, { id: 'direct', title: 'direct to upstream', target: upstream, request: me, gateway: null, baseline: null }));

  const gateway = await startTokengate(group, dir, 'tokengate', tokengateOptions, profileDir);
  const idleBytes = residentBytes(gateway.process.pid);

  // The headline: tokengate's cache-hit path against the two things a user would run instead,
  // in turns, each server after the same warm-up for the same windows.
  const headline: ScenarioSpec[] = [
    { id: 'bare-proxy', title: 'bare @fastify/http-proxy, no auth', target: bare, request: me, gateway: bare, baseline: 'direct' },
    ...(peer === null ? [] : [{ id: 'nginx-peer', title: `nginx ${nginx} auth_request + Node check`, target: peer, request: me, gateway: peer, baseline: 'direct' }]),
    { id: 'cache-hit', title: 'tokengate, cached token in header', target: gateway, request: me, gateway, baseline: 'bare-proxy' },
  ];
  await measureInterleaved(
    run,
    headline.filter((spec) => wanted(spec.id)).map((spec) => ({ ...spec, durationSeconds: settings.roundSeconds })),
    settings.rounds,
  );

  await attempt('query-token', () =>
    measure(run, { id: 'query-token', title: 'tokengate, access_token in query', target: gateway, request: { method: 'GET', path: `${ROUTES.me}?access_token=${userToken}` }, gateway, baseline: 'cache-hit' }),
  );
  await attempt('form-token', () =>
    measure(run, {
      id: 'form-token',
      title: 'tokengate, POST form access_token',
      target: gateway,
      request: { method: 'POST', path: ROUTES.tickets, headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `access_token=${userToken}&event=42&quantity=2` },
      gateway,
      baseline: 'cache-hit',
    }),
  );
  await attempt('app-token', () =>
    measure(run, { id: 'app-token', title: 'tokengate, application token on /events', target: gateway, request: { method: 'GET', path: ROUTES.events, headers: bearer(applicationToken!) }, gateway, baseline: 'cache-hit' }),
  );
  await attempt('forged', async () => {
    const nextForged = rotation(forgedTokens(minter, 10_000));
    const commandsBefore = await commandsExecuted(run.redis.store.client);
    await measure(run, {
      id: 'forged',
      title: 'tokengate, forged-token flood (401)',
      target: gateway,
      request: { method: 'GET', path: ROUTES.me, setupRequest: (request) => ({ ...request, headers: bearer(nextForged()) }) },
      expectedStatus: 401,
      gateway,
      baseline: 'cache-hit',
    });
    results.forgedStoreCommands = (await commandsExecuted(run.redis.store.client)) - commandsBefore;
  });

  // The memory soak: the cache-hit request at full load for a minute, RSS every second. Its
  // req/s include the old-generation collections a few seconds of load never reach.
  const soak: number[] = [];
  await attempt('soak', () =>
    measure(run, {
      id: 'soak',
      title: `tokengate, cached token in header, ${settings.soakSeconds} s soak`,
      target: gateway,
      request: me,
      gateway,
      baseline: 'cache-hit',
      durationSeconds: settings.soakSeconds,
      everySecond: () => soak.push(residentBytes(gateway.process.pid)),
    }),
  );

  await attempt('cache-miss', async () => {
    const seeded = performance.now();
    const nextMiss = rotation(await seedAccessTokens(run.redis.store, minter, settings.missTokens, 'user', USER_CLIENT_ID));
    progress(`seeded ${settings.missTokens} tokens in ${((performance.now() - seeded) / 1000).toFixed(1)} s`);
    const beforeFillBytes = residentBytes(gateway.process.pid);
    // Exactly one request per token, no warm-up: every request is the first sight of its token.
    const miss = await measure(run, {
      id: 'cache-miss',
      title: `tokengate, cache miss (${settings.missTokens} distinct tokens)`,
      target: gateway,
      request: { method: 'GET', path: ROUTES.me, setupRequest: (request) => ({ ...request, headers: bearer(nextMiss()) }) },
      gateway,
      baseline: 'cache-hit',
      amount: settings.missTokens - 1,
      // The run's time budget holds on a slow machine too; the entries actually cached are counted.
      durationSeconds: settings.missMaxSeconds,
      warmupSeconds: 0,
    });
    if (miss.load.requests + 1 < settings.missTokens) progress(`the cache-miss run stopped after ${settings.missMaxSeconds} s, at ${miss.load.requests + 1} of ${settings.missTokens} tokens`);
    if (soak.length >= 2) {
      results.memory = {
        idleBytes,
        beforeFillBytes,
        filledBytes: residentBytes(gateway.process.pid),
        filledHeap: heapOf(await scrapeCounters(gateway.opsUrl)),
        cachedEntries: miss.load.requests + 1,
        soak: { seconds: settings.soakSeconds, samples: soak },
      } satisfies MemoryResult;
    }
  });

  await attempt('issuance', async () => {
    const organizer = await createApplication(gateway, 'bench organizer');
    await measure(run, {
      id: 'issuance',
      title: 'tokengate, client_credentials issuance (tokens/s)',
      target: gateway,
      request: { method: 'POST', path: '/oauth/token', headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(organizer) }, body: 'grant_type=client_credentials' },
      gateway,
      baseline: null,
    });
  });

  await attempt('fixed-rate', async () => {
    const atRate = async (target: Service) => {
      await expectAnswer(target, me, 200);
      const options = { url: target.url, connections: settings.fixedRateConnections, overallRate: settings.fixedRate, request: me, expectedStatus: 200 };
      if (settings.warmupSeconds > 0) await runLoad({ ...options, durationSeconds: settings.warmupSeconds });
      return runLoad({ ...options, durationSeconds: settings.durationSeconds });
    };
    const direct = await atRate(upstream);
    const tokengate = await atRate(gateway);
    results.fixedRate = { rate: settings.fixedRate, direct, tokengate };
    progress(`at ${settings.fixedRate} req/s: direct p99 ${direct.p99Ms.toFixed(2)} ms, tokengate p99 ${tokengate.p99Ms.toFixed(2)} ms`);
  });

  await attempt('revocation', async () => {
    const second = await startTokengate(group, dir, 'tokengate-2', tokengateOptions);
    results.revocation = await measureRevocations(run, minter, gateway, second);
    progress(`revocation: p50 ${results.revocation.p50Ms.toFixed(1)} ms, p99 ${results.revocation.p99Ms.toFixed(1)} ms`);
  });
}

/**
 * Revoke, through the first sidecar's /oauth/revoke, a token the second sidecar has cached,
 * then ask the second sidecar until it answers 401. The delay runs from the moment the
 * revocation request is sent, so it includes the first sidecar's work, Redis and pub/sub.
 */
async function measureRevocations(run: Run, minter: TokenMinter, first: TokengateService, second: TokengateService): Promise<RevocationResult> {
  const client = await createApplication(first, 'bench web');
  const delays: number[] = [];
  const ask = async (token: string) => {
    const response = await fetch(`${second.url}${ROUTES.me}`, { headers: bearer(token) });
    await response.arrayBuffer();
    return response.status;
  };
  for (let i = 0; i < run.settings.revocations; i++) {
    const [token] = await seedAccessTokens(run.redis.store, minter, 1, 'user', client.clientId);
    if ((await ask(token!)) !== 200 || (await ask(token!)) !== 200) throw new Error('the second sidecar refused a fresh token');
    const sent = performance.now();
    const revoked = fetch(`${first.url}/oauth/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(client) },
      body: `token=${token}&token_type_hint=access_token`,
    });
    while ((await ask(token!)) !== 401) {
      if (performance.now() - sent > 5_000) throw new Error('the second sidecar still accepts a token revoked 5 s ago');
    }
    delays.push(performance.now() - sent);
    const answer = await revoked;
    if (answer.status !== 200) throw new Error(`/oauth/revoke answered ${answer.status}: ${await answer.text()}`);
  }
  const sorted = Float64Array.from(delays).sort();
  return { samples: delays.length, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted.at(-1)! };
}

interface ClientCredentials {
  clientId: string;
  secret: string;
}

/** A confidential application, created the way an operator does it: the admin API on the ops listener. */
async function createApplication(gateway: TokengateService, name: string): Promise<ClientCredentials> {
  const response = await fetch(`${gateway.opsUrl}/admin/applications`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, redirect_uris: ['http://127.0.0.1/callback'], confidential: true }),
  });
  const body = (await response.json()) as { client_id?: string; client_secret?: string };
  if (response.status !== 201 || body.client_id === undefined || body.client_secret === undefined) {
    throw new Error(`the admin API answered ${response.status} to creating an application: ${JSON.stringify(body)}`);
  }
  return { clientId: body.client_id, secret: body.client_secret };
}

const basic = (client: ClientCredentials) => `Basic ${Buffer.from(`${encodeURIComponent(client.clientId)}:${encodeURIComponent(client.secret)}`).toString('base64')}`;

interface Machine {
  cpus: number;
  cpuModel: string;
  node: string;
  nginx: string | null;
  redis: string;
  commit: string;
  pinning: string;
  loadAverageAtStart: string[];
}

function describeMachine(pinning: string): Machine {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const run = (file: string, args: string[]) => {
    try {
      return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
    } catch {
      return 'unknown';
    }
  };
  return {
    cpus: cpus().length,
    cpuModel: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1] ?? 'unknown CPU',
    node: process.version,
    nginx: nginxVersion(),
    redis: /v=(\S+)/.exec(run('redis-server', ['--version']))?.[1] ?? 'unknown',
    commit: run('git', ['rev-parse', '--short', 'HEAD']),
    pinning,
    loadAverageAtStart: loadavg().map((value) => value.toFixed(2)),
  };
}

function report(results: BenchResults, failures: string[], machine: Machine, settings: BenchSettings, seconds: number): number {
  const checks = evaluateTargets(results);
  const date = new Date().toISOString();
  const loadAtEnd = loadavg().map((value) => value.toFixed(2));
  const heading =
    `${date}, ${machine.cpuModel}, ${machine.cpus} CPUs, Node ${machine.node}, nginx ${machine.nginx ?? 'absent'}, Redis ${machine.redis}, commit ${machine.commit}\n` +
    `${machine.pinning}; ${settings.connections} connections;${settings.gatewayNodeFlags.length > 0 ? ` tokengate node flags: ${settings.gatewayNodeFlags.join(' ')};` : ''} load average ${machine.loadAverageAtStart.join(' ')} at start, ${loadAtEnd.join(' ')} at end; run took ${seconds.toFixed(0)} s`;
  const text = `${heading}\n\n${scenarioTable(results, checks)}\n\n${otherTable(results, checks)}\n`;
  process.stdout.write(`\n${text}`);
  if (failures.length > 0) process.stdout.write(`\nFailed:\n${failures.map((failure) => `  - ${failure}`).join('\n')}\n`);

  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  const { only, ...recordedSettings } = settings;
  writeFileSync(
    join(resultsDir, 'latest.json'),
    `${JSON.stringify({ date, machine: { ...machine, loadAverageAtEnd: loadAtEnd }, settings: { ...recordedSettings, only: only === null ? null : [...only] }, seconds, results, targets: checks, failures }, null, 2)}\n`,
  );
  writeFileSync(join(resultsDir, 'latest.md'), text);
  process.stdout.write(`\nwrote bench/results/latest.json and latest.md\n`);
  return failures.length === 0 ? 0 : 1;
}

function progress(message: string): void {
  process.stderr.write(`[bench ${((performance.now() - runStarted) / 1000).toFixed(0).padStart(3)} s] ${message}\n`);
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
