import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { createTokenMinter, decodeTagKey, generateTagKey } from '../src/token/token-value.js';
import { seedUserTokens } from './lib/fixtures.js';
import { freePort, ProcessGroup, waitForPort, type Started } from './lib/processes.js';
import { benchStore, startRedis } from './lib/redis.js';
import { startNodeServer, startUpstream } from './lib/services.js';
import { readSettings } from './lib/settings.js';
import { ME, ME_SIGNED, tokengateConfigYaml, type BenchConfigOptions } from './lib/tokengate-config.js';

/**
 * Instructions per request, counted by callgrind: a figure the machine's load does not move,
 * for comparing variants of the request path on a shared machine (docs/benchmarks.md, "Where
 * the time goes"). Each server runs under `valgrind --tool=callgrind`; after a warm-up its
 * counters are zeroed, a fixed number of requests is sent over a few keep-alive connections,
 * and the counters are dumped: every thread's user-space instructions over exactly those
 * requests. A server with several routes measures them in turns, round after round, on the one
 * process. The traced servers export to a receiver of their own with a schedule delay longer
 * than the run, so that a batch is exported when it is full, as at a real request rate (under
 * callgrind a server answers a few hundred requests a second and the timer would send many small
 * batches); what is still queued when the counting stops is exported at shutdown, counted as
 * "with the shutdown's export" (the shutdown's own work included). V8 keeps optimizing for
 * thousands of requests (its compiler threads are counted too): 8,000 of warm-up by default. Under callgrind a window
 * lasts about a minute, so what the process does by the clock (its timers) would weigh as much
 * as a hundred requests: it is counted over an idle 20 s and taken out of each window by its
 * length.
 *
 *   npm run build && node --import tsx bench/instructions.ts [--only floor,cache-hit] [--requests 2000] [--warmup 8000] [--rounds 3]
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const KEY_PREFIX = 'bench-instructions:';

interface Server {
  id: string;
  /** What it measures, by route. */
  routes: Array<{ id: string; path: string }>;
  /** The node command line (after node's own flags) and, for tokengate, the config. */
  script: 'floor' | { config: Partial<BenchConfigOptions> };
}

const SERVERS: Server[] = [
  { id: 'floor', routes: [{ id: 'floor', path: ME }], script: 'floor' },
  { id: 'cache-hit', routes: [{ id: 'cache-hit', path: ME }], script: { config: {} } },
  {
    id: 'signed',
    routes: [
      { id: 'signed-identity-off', path: ME },
      { id: 'cache-hit-signed', path: ME_SIGNED },
    ],
    script: { config: { signedIdentity: true } },
  },
  { id: 'tracing-unsampled', routes: [{ id: 'tracing-unsampled', path: ME }], script: { config: { tracing: { endpoint: '', ratio: 0 } } } },
  { id: 'tracing-10', routes: [{ id: 'tracing-10', path: ME }], script: { config: { tracing: { endpoint: '', ratio: 0.1 } } } },
  { id: 'tracing-100', routes: [{ id: 'tracing-100', path: ME }], script: { config: { tracing: { endpoint: '', ratio: 1 } } } },
];

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    requests: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '8000' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '10' },
  },
});
const REQUESTS = Number(values.requests);
const WARMUP = Number(values.warmup);
const ROUNDS = Number(values.rounds);
const CONNECTIONS = Number(values.connections);
const IDLE_SECONDS = 20;

/** Sends `count` requests over CONNECTIONS keep-alive connections; each must be answered 200. */
async function send(pool: Pool, path: string, token: string, count: number): Promise<void> {
  let left = count;
  const one = async (): Promise<void> => {
    while (left-- > 0) {
      const { statusCode, body } = await pool.request({ path, method: 'GET', headers: { authorization: `Bearer ${token}` } });
      await body.dump();
      if (statusCode !== 200) throw new Error(`${path} answered ${statusCode}`);
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, one));
}

/** The first request of a route, asked again until answered 200: under callgrind its store read may outlast the command timeout. */
async function prime(pool: Pool, path: string, token: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const { statusCode, body } = await pool.request({ path, method: 'GET', headers: { authorization: `Bearer ${token}` } });
    await body.dump();
    if (statusCode === 200) return;
    if (attempt === 30) throw new Error(`${path} answered ${statusCode} 30 times`);
  }
}

/** Total instructions (every thread) in the newest dump callgrind wrote for `pid`. */
function dumpInstructions(dir: string, id: string, pid: number, dumps: Set<string>): number {
  const result = spawnSync('callgrind_control', ['--dump', String(pid)], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`callgrind_control --dump ${pid}: ${result.stderr}`);
  return newDumpsTotal(dir, id, dumps);
}

function newDumpsTotal(dir: string, id: string, dumps: Set<string>): number {
  let total = 0;
  for (const file of readdirSync(dir)) {
    if (!file.startsWith(`callgrind.${id}.`) || dumps.has(file)) continue;
    // The file without a dump number is created empty at start and written when the process exits.
    const match = /^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, file), 'utf8'));
    if (match === null) continue;
    dumps.add(file);
    total += Number(match[1]);
  }
  return total;
}

function zero(pid: number): void {
  const result = spawnSync('callgrind_control', ['--zero', String(pid)], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`callgrind_control --zero ${pid}: ${result.stderr}`);
}

async function main(): Promise<void> {
  process.chdir(ROOT);
  // Full batches only: see above.
  process.env.OTEL_BSP_SCHEDULE_DELAY = '3600000';
  const settings = readSettings(process.env);
  const only = values.only === undefined ? null : new Set(values.only.split(','));
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-instructions-'));
  const group = new ProcessGroup(dir, null);
  const stopOnSignal = () => void group.stopAll().finally(() => process.exit(130));
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  const lines: string[] = [];
  try {
    const redis = await startRedis(group);
    const store = benchStore(redis.url, KEY_PREFIX);
    const tagKey = generateTagKey();
    const [token] = await seedUserTokens(store, createTokenMinter(decodeTagKey(tagKey)), 1);
    const upstream = await startUpstream(group);
    const collector = await startNodeServer(group, 'collector', 'anywhere', 'bench/servers/collector.mjs', []);
    for (const server of SERVERS) {
      if (only !== null && !only.has(server.id) && !server.routes.some((route) => only.has(route.id))) continue;
      const port = await freePort();
      let args: string[];
      if (server.script === 'floor') args = ['bench/servers/floor.mjs', '--port', String(port), '--upstream', upstream.url];
      else {
        const configFile = join(dir, `${server.id}.yaml`);
        const tracing = server.script.config.tracing && { ...server.script.config.tracing, endpoint: collector.url };
        const config = { ...server.script.config, tracing, redisUrl: redis.url, keyPrefix: KEY_PREFIX, tokenTagKey: tagKey, upstreamUrl: upstream.url };
        writeFileSync(configFile, tokengateConfigYaml({ ...config, port, opsPort: await freePort() }));
        args = [...settings.nodeFlags, 'dist/main.js', 'serve', '--config', configFile];
      }
      const started: Started = group.spawn(server.id, 'anywhere', 'valgrind', [
        '--tool=callgrind',
        '--smc-check=all-non-file',
        `--callgrind-out-file=${join(dir, `callgrind.${server.id}.%p`)}`,
        process.execPath,
        ...args,
      ]);
      await waitForPort(started, port, 300_000);
      const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONNECTIONS, pipelining: 1 });
      const dumps = new Set<string>();
      const counts = new Map<string, Array<{ instructions: number; seconds: number }>>();
      for (const route of server.routes) {
        await prime(pool, route.path, token!);
        await send(pool, route.path, token!, WARMUP);
      }
      for (let round = 0; round < ROUNDS; round++) {
        for (const route of server.routes) {
          zero(started.pid);
          const start = performance.now();
          await send(pool, route.path, token!, REQUESTS);
          const window = { instructions: dumpInstructions(dir, server.id, started.pid, dumps), seconds: (performance.now() - start) / 1000 };
          counts.set(route.id, [...(counts.get(route.id) ?? []), window]);
          process.stderr.write(
            `${route.id} round ${round + 1}: ${Math.round(window.instructions / REQUESTS)} instructions per request in ${window.seconds.toFixed(0)} s\n`,
          );
        }
      }
      // What the process does by the clock with no request (timers: metrics, key refresh, the
      // cache's sweeps): under callgrind a window lasts a minute, so that work is taken out.
      zero(started.pid);
      await sleep(IDLE_SECONDS * 1000);
      const idlePerSecond = dumpInstructions(dir, server.id, started.pid, dumps) / IDLE_SECONDS;
      // The last window's queued spans go out at shutdown: counted with the shutdown's own work.
      zero(started.pid);
      await pool.close();
      await started.stop();
      await sleep(500);
      const shutdown = newDumpsTotal(dir, server.id, dumps);
      for (const route of server.routes) {
        const windows = counts.get(route.id)!;
        const perRequest = windows.map((window) => (window.instructions - idlePerSecond * window.seconds) / REQUESTS);
        // A window with a full collection or a recompilation counts it: the lowest is the request's own work.
        const lowest = Math.min(...perRequest);
        const figure = (value: number) => Math.round(value).toLocaleString('en');
        lines.push(
          `| ${route.id} | ${figure(lowest)} | ${perRequest.map(figure).join(' / ')} | ${windows.map((window) => figure(window.instructions / REQUESTS)).join(' / ')} | ${figure(idlePerSecond)} | ${figure(shutdown / REQUESTS)} |`,
        );
      }
    }
    await store.close();
  } finally {
    await group.stopAll();
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  process.stdout.write(
    `${new Date().toISOString()}, Node ${process.version}, node flags ${settings.nodeFlags.join(' ') || 'none'}, ${REQUESTS} requests per window after ${WARMUP} of warm-up, ${CONNECTIONS} connections, load average ${load}; dumps in ${dir}\n\n` +
      `| row | instructions per request (the lowest window) | each round, the idle rate taken out | each round as counted | idle instructions per second | shutdown (with the last export) per request of a window |\n|---|---|---|---|---|---|\n${lines.join('\n')}\n`,
  );
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
