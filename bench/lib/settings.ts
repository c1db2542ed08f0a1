import { readFileSync } from 'node:fs';
import { wrkVersion } from './wrk.js';

/**
 * What a run does, from six environment variables (docs/benchmarks.md#settings). The full run
 * is the one the targets are judged on; BENCH_SHORT=1 is a quick look at every row.
 */
export interface Settings {
  short: boolean;
  /** Windows of each row in a side-by-side comparison, in turns with the other rows (BENCH_ROUNDS): a target is judged on the spread of its per-round figures. */
  rounds: number;
  windowSeconds: number;
  /** Warm-up before a server's first window (its JIT catching up), and before every other row's first window. */
  firstWarmupSeconds: number;
  warmupSeconds: number;
  connections: number;
  /** Distinct stored tokens of the cache-miss row, each sent once. */
  missTokens: number;
  /** Distinct tagged but never stored tokens of the unknown-token flood, each sent once. */
  floodTokens: number;
  /** Tokens the cache-fill row reads into a cache of that size (a tokengate of its own). */
  fillTokens: number;
  /** RSS is sampled this long after the flood. */
  settleSeconds: number;
  soakSeconds: number;
  revocations: number;
  /** A window that sends a fixed number of requests stops here on a slow machine (and the report says so). */
  maxWindowSeconds: number;
  /** Row or scenario ids to run (BENCH_ONLY); null: all. */
  only: Set<string> | null;
  /** Directory for `node --cpu-prof` profiles of the one-core Node tiers (BENCH_CPU_PROF). */
  cpuProfileDir: string | null;
  /** Node flags for tokengate alone: BENCH_NODE_FLAGS when set (empty: none), else the image's NODE_OPTIONS, so the figures are those of what ships. */
  nodeFlags: string[];
  /** BENCH_LOAD: wrk (a C program; the default where installed) or autocannon (in the harness's process; the default elsewhere) for the rows that send one fixed request. */
  loadGenerator: 'autocannon' | 'wrk';
}

/** The NODE_OPTIONS the Dockerfile sets for tokengate. */
function imageNodeOptions(dockerfile = readFileSync(new URL('../../Dockerfile', import.meta.url), 'utf8')): string {
  const options = /^\s*(?:ENV\s+)?NODE_OPTIONS="([^"]*)"/m.exec(dockerfile);
  if (options === null) throw new Error('the Dockerfile sets no NODE_OPTIONS="..."');
  return options[1]!;
}

export function readSettings(env: NodeJS.ProcessEnv): Settings {
  const short = env.BENCH_SHORT === '1';
  const only = (env.BENCH_ONLY ?? '')
    .split(',')
    .map((id) => id.trim())
    .filter((id) => id !== '');
  return {
    short,
    rounds: rounds(env.BENCH_ROUNDS, short ? 1 : 5),
    windowSeconds: short ? 2 : 3,
    firstWarmupSeconds: 2,
    warmupSeconds: 1,
    connections: 50,
    missTokens: short ? 20_000 : 100_000,
    floodTokens: short ? 20_000 : 200_000,
    fillTokens: short ? 100_000 : 1_000_000,
    settleSeconds: short ? 5 : 15,
    soakSeconds: short ? 10 : 60,
    revocations: short ? 10 : 50,
    maxWindowSeconds: 20,
    only: only.length === 0 ? null : new Set(only),
    cpuProfileDir: env.BENCH_CPU_PROF === undefined || env.BENCH_CPU_PROF === '' ? null : env.BENCH_CPU_PROF,
    nodeFlags: (env.BENCH_NODE_FLAGS ?? imageNodeOptions()).split(' ').filter((flag) => flag !== ''),
    loadGenerator: loadGenerator(env.BENCH_LOAD),
  };
}

function rounds(value: string | undefined, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const count = Number(value);
  if (!Number.isInteger(count) || count < 1) throw new Error(`BENCH_ROUNDS is a whole number of rounds, at least 1, not ${JSON.stringify(value)}`);
  return count;
}

function loadGenerator(value: string | undefined): Settings['loadGenerator'] {
  if (value === 'autocannon') return 'autocannon';
  if (value === undefined || value === '') return wrkVersion() === null ? 'autocannon' : 'wrk';
  if (value !== 'wrk') throw new Error(`BENCH_LOAD is autocannon or wrk, not ${JSON.stringify(value)}`);
  if (wrkVersion() === null) throw new Error('BENCH_LOAD=wrk, but wrk is not installed (apt-get install -y wrk)');
  return 'wrk';
}
