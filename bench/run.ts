import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { RedisStore } from '../src/store/redis.js';
import { createTokenMinter, decodeTagKey, generateTagKey, type TokenMinter } from '../src/token/token-value.js';
import { measureClusterMiss } from './lib/cluster.js';
import { USER_CLIENT_ID, forgedTokens, rotation, seedAccessTokens } from './lib/fixtures.js';
import { percentile, runLoad } from './lib/load.js';
import { describeMachine, type Machine } from './lib/machine.js';
import { expectAnswer, measure, measureInterleaved, type Run, type ScenarioSpec } from './lib/measure.js';
import { scrapeCounters } from './lib/metrics.js';
import { residentBytes } from './lib/proc.js';
import { ProcessGroup, choosePinning, pinThisProcess } from './lib/processes.js';
import { elapsedSeconds, progress } from './lib/progress.js';
import { commandsExecuted, startRedis } from './lib/redis.js';
import { evaluateTargets, renderRun, type BenchResults, type MemoryResult, type RecordedRun, type RevocationResult } from './lib/report.js';
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

/** V8 heap figures from tokengate's default process metrics, when it exports them. */
function heapOf(counters: Map<string, number>): MemoryResult['filledHeap'] {
  const usedBytes = counters.get('nodejs_heap_size_used_bytes');
  const totalBytes = counters.get('nodejs_heap_size_total_bytes');
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

  const machine = describeMachine(
    pinning === null ? 'not pinned' : `load generator on CPU ${pinning.loadGeneratorCpus}, servers on CPU ${pinning.serverCpus} (taskset)`,
  );
  progress(
    `${machine.cpuModel}, ${machine.cpus} CPUs, Node ${machine.node}, load average ${machine.loadAverageAtStart.join(' ')}; ${machine.pinning}; logs in ${dir}`,
  );
  const results: BenchResults = { scenarios: {}, forgedStoreCommands: null, fixedRate: null, revocation: null, memory: null };
  const failures: string[] = [];
  try {
    const redis = await startRedis(group);
    const store = new RedisStore({
      connection: { topology: { kind: 'standalone', url: redis.url } },
      keyPrefix: KEY_PREFIX,
      commandTimeoutMs: 5_000,
      connectTimeoutMs: 2_000,
      waitForReplicas: 0,
    });
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
  return report(results, failures, machine, settings, elapsedSeconds());
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
    ...(peer === null
      ? []
      : [{ id: 'nginx-peer', title: `nginx ${nginx} auth_request + Node check`, target: peer, request: me, gateway: peer, baseline: 'direct' }]),
    { id: 'cache-hit', title: 'tokengate, cached token in header', target: gateway, request: me, gateway, baseline: 'bare-proxy' },
  ];
  await measureInterleaved(
    run,
    headline.filter((spec) => wanted(spec.id)).map((spec) => ({ ...spec, durationSeconds: settings.roundSeconds })),
    settings.rounds,
  );

  await attempt('query-token', () =>
    measure(run, {
      id: 'query-token',
      title: 'tokengate, access_token in query',
      target: gateway,
      request: { method: 'GET', path: `${ROUTES.me}?access_token=${userToken}` },
      gateway,
      baseline: 'cache-hit',
    }),
  );
  await attempt('form-token', () =>
    measure(run, {
      id: 'form-token',
      title: 'tokengate, POST form access_token',
      target: gateway,
      request: {
        method: 'POST',
        path: ROUTES.tickets,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: `access_token=${userToken}&event=42&quantity=2`,
      },
      gateway,
      baseline: 'cache-hit',
    }),
  );
  await attempt('app-token', () =>
    measure(run, {
      id: 'app-token',
      title: 'tokengate, application token on /events',
      target: gateway,
      request: { method: 'GET', path: ROUTES.events, headers: bearer(applicationToken!) },
      gateway,
      baseline: 'cache-hit',
    }),
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
    if (miss.load.requests + 1 < settings.missTokens)
      progress(`the cache-miss run stopped after ${settings.missMaxSeconds} s, at ${miss.load.requests + 1} of ${settings.missTokens} tokens`);
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

  await attempt('cluster-miss', () => measureClusterMiss(run, group, dir, minter, tokengateOptions));

  await attempt('issuance', async () => {
    const organizer = await createApplication(gateway, 'bench organizer');
    await measure(run, {
      id: 'issuance',
      title: 'tokengate, client_credentials issuance (tokens/s)',
      target: gateway,
      request: {
        method: 'POST',
        path: '/oauth/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(organizer) },
        body: 'grant_type=client_credentials',
      },
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

const basic = (client: ClientCredentials) =>
  `Basic ${Buffer.from(`${encodeURIComponent(client.clientId)}:${encodeURIComponent(client.secret)}`).toString('base64')}`;

function report(results: BenchResults, failures: string[], machine: Machine, settings: BenchSettings, seconds: number): number {
  const { only, ...recordedSettings } = settings;
  const run: RecordedRun = {
    date: new Date().toISOString(),
    machine: { ...machine, loadAverageAtEnd: loadavg().map((value) => value.toFixed(2)) },
    settings: { ...recordedSettings, only: only === null ? null : [...only] },
    seconds,
    results,
    targets: evaluateTargets(results),
    failures,
  };
  const text = renderRun(run);
  process.stdout.write(`\n${text}`);
  if (failures.length > 0) process.stdout.write(`\nFailed:\n${failures.map((failure) => `  - ${failure}`).join('\n')}\n`);
  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, 'latest.json'), `${JSON.stringify(run, null, 2)}\n`);
  writeFileSync(join(resultsDir, 'latest.md'), text);
  process.stdout.write(`\nwrote bench/results/latest.json and latest.md\n`);
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
