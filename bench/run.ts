import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTokenMinter, decodeTagKey, generateTagKey } from '../src/token/token-value.js';
import { clusterMiss } from './lib/cluster.js';
import { cacheHitDpop } from './lib/dpop.js';
import { seedUserTokens } from './lib/fixtures.js';
import { attempt, elapsedSeconds, probeDrift, progress, rowsInTurns, type Bench, type Results, type Scenario } from './lib/measure.js';
import { ProcessGroup, choosePinning, pinThisProcess } from './lib/processes.js';
import { benchStore, startRedis } from './lib/redis.js';
import { describeMachine, renderReport } from './lib/report.js';
import {
  bareProxy,
  cacheFill,
  cacheHit,
  cacheHitAtRate,
  cacheHitSigned,
  cacheMiss,
  cacheMissSigned,
  direct,
  directAtRate,
  floor,
  forgedFlood,
  issuance,
  nginxDecisionCache,
  nginxDecisionCacheRevoking,
  nginxDecisions,
  nginxProxy,
  rateLimitCommands,
  rateLimitOff,
  rateLimitOver,
  rateLimitOverCommands,
  rateLimitUnder,
  nginxLru,
  nginxRedis,
  revocation,
  signedIdentityOff,
  soak,
  tracingAll,
  tracingOff,
  tracingTenth,
  tracingUnsampled,
  unknownTokenFlood,
  workersNginxLru,
  workersNginxRedis,
  workersTokengate,
} from './lib/scenarios.js';
import { startUpstream, type Tier } from './lib/services.js';
import { readSettings } from './lib/settings.js';
import { ME } from './lib/tokengate-config.js';

/**
 * `npm run bench` (docs/benchmarks.md): the scenarios below, in this order. The rows of one
 * scenario are measured in turns; a row added to a list is measured in turns with the others.
 */
const SCENARIOS: Scenario[] = [
  rowsInTurns('one-core', [
    direct,
    floor,
    bareProxy,
    nginxProxy,
    nginxRedis,
    nginxLru,
    nginxDecisions,
    nginxDecisionCache,
    nginxDecisionCacheRevoking,
    cacheHit,
    cacheMiss,
    clusterMiss,
  ]),
  // Right after the cached-token row, on the same tokengate; alone, so that its Redis commands are its own.
  rowsInTurns('dpop', [cacheHitDpop(cacheHit.tier)]),
  // The signed identity, on a tokengate of its own: the cached token on a route without one and on one with it (the
  // two compared, in turns on one process), and a cache miss, signed.
  rowsInTurns('signed-identity', [signedIdentityOff, cacheHitSigned, cacheMissSigned]),
  rowsInTurns('added-latency', [directAtRate, cacheHitAtRate]),
  rowsInTurns('forged', [forgedFlood]),
  rowsInTurns('issuance', [issuance]),
  rowsInTurns('soak', [soak], (settings) => ({ rounds: 1, seconds: settings.soakSeconds })),
  rowsInTurns('unknown-flood', [unknownTokenFlood], () => ({ rounds: 1, seconds: 0 })),
  // A tokengate of its own, a cache of BENCH fillTokens (1,000,000) entries filled once: alone, its memory its own.
  rowsInTurns('cache-fill', [cacheFill], () => ({ rounds: 20, seconds: 0 })),
  revocation,
  rowsInTurns('workers', [workersTokengate, workersNginxRedis, workersNginxLru]),
  rowsInTurns('rate-limit', [rateLimitOff, rateLimitUnder, rateLimitOver]),
  rowsInTurns('rate-limit-commands', [rateLimitCommands]),
  rowsInTurns('rate-limit-over-commands', [rateLimitOverCommands]),
  rowsInTurns('tracing', [tracingOff, tracingUnsampled, tracingTenth, tracingAll]),
];

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const KEY_PREFIX = 'bench:';

async function main(): Promise<number> {
  process.chdir(ROOT);
  const settings = readSettings(process.env);
  const known = SCENARIOS.flatMap((scenario) => [scenario.id, ...scenario.rowIds]);
  const unknown = [...(settings.only ?? [])].filter((id) => !known.includes(id));
  if (unknown.length > 0) throw new Error(`BENCH_ONLY names no scenario or row: ${unknown.join(', ')}; they are ${[...new Set(known)].join(', ')}`);
  const pinning = choosePinning();
  if (pinning !== null) pinThisProcess(pinning);
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-bench-'));
  const group = new ProcessGroup(dir, pinning);
  const stopOnSignal = () => void group.stopAll().finally(() => process.exit(130));
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);

  const machine = describeMachine(
    pinning === null
      ? 'NOT PINNED (needs 2 CPUs and taskset): every process shares every CPU'
      : `load generator, upstream and Redis on CPU ${pinning.loadCpu}, the one-core tiers on CPU ${pinning.tierCpu}, the workers tiers unpinned`,
  );
  progress(`${machine.cpuModel}, ${machine.cpus} CPUs, Node ${machine.node}, load average ${machine.loadAverageAtStart}; ${machine.pinning}; logs in ${dir}`);
  const results: Results = {
    rows: [],
    drift: [],
    memory: { idleBytes: null, importFloorBytes: null, cached: null, heapAndBuffers: null, fill: null, soak: null, flood: null },
    revocation: null,
    forgedStoreCalls: null,
    dpopStoreCommands: null,
    rateLimitCommandsPer1k: null,
    rateLimitOver: null,
    notes: [],
    failures: [],
  };
  try {
    const redis = await startRedis(group);
    const store = benchStore(redis.url, KEY_PREFIX);
    try {
      const tagKey = generateTagKey();
      const minter = createTokenMinter(decodeTagKey(tagKey));
      const [userToken] = await seedUserTokens(store, minter, 1);
      const started = new Map<string, Promise<Tier | string>>();
      const closers: Array<() => Promise<void>> = [];
      const bench: Bench = {
        settings,
        group,
        redis: { url: redis.url, store },
        keyPrefix: KEY_PREFIX,
        tagKey,
        minter,
        upstream: await startUpstream(group),
        me: { method: 'GET', path: ME, headers: { authorization: `Bearer ${userToken}` } },
        userToken: userToken!,
        results,
        shared(name, start) {
          if (!started.has(name)) started.set(name, start());
          return started.get(name)!;
        },
        onStop: (close) => void closers.push(close),
      };
      for (const scenario of SCENARIOS) {
        const only = settings.only;
        const wanted = (rowId: string) => only === null || only.has(scenario.id) || only.has(rowId);
        if (!scenario.rowIds.some(wanted)) continue;
        // The reference row again before every scenario: how far the machine itself moved over the run.
        await probeDrift(bench, floor, scenario.id);
        await attempt(bench, scenario.id, () => scenario.run(bench, wanted));
      }
      await probeDrift(bench, floor, 'end');
      await Promise.all(closers.map((close) => close()));
    } finally {
      await store.close();
    }
  } catch (error) {
    results.failures.push(`setup: ${(error as Error).message}`);
  } finally {
    await group.stopAll();
  }

  const report = renderReport(results, machine, settings, elapsedSeconds());
  process.stdout.write(`\n${report}`);
  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(
    join(resultsDir, 'latest.json'),
    `${JSON.stringify({ date: new Date().toISOString(), machine, settings: { ...settings, only: settings.only && [...settings.only] }, results }, null, 2)}\n`,
  );
  writeFileSync(join(resultsDir, 'latest.md'), report);
  process.stdout.write(`\nwrote bench/results/latest.json and latest.md\n`);
  return results.failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
