/**
 * Run settings from the environment. The defaults are the documented full run (under 3
 * minutes on 2 cores); the variables shorten it for a quick look, e.g.
 * `BENCH_DURATION=2 BENCH_SOAK=5 BENCH_MISS_TOKENS=20000 npm run bench`.
 */
export interface BenchSettings {
  /** Seconds each throughput scenario is measured (BENCH_DURATION). */
  durationSeconds: number;
  /** Seconds of warm-up load before each measurement (BENCH_WARMUP). */
  warmupSeconds: number;
  /** Turns of the headline comparison (bare proxy, nginx, tokengate cache hit) (BENCH_ROUNDS). */
  rounds: number;
  /** Seconds each server is measured per turn (BENCH_ROUND_SECONDS). */
  roundSeconds: number;
  /** Seconds of warm-up before a server's first scenario, while its JIT catches up (BENCH_FIRST_WARMUP). */
  firstWarmupSeconds: number;
  /** Seconds of the cache-hit run that doubles as the memory soak (BENCH_SOAK). */
  soakSeconds: number;
  /** Concurrent connections of the load generator (BENCH_CONNECTIONS). */
  connections: number;
  /** Distinct valid tokens of the cache-miss run (BENCH_MISS_TOKENS). */
  missTokens: number;
  /** Longest the cache-miss run may take (BENCH_MISS_MAX_SECONDS); it stops early on a slow machine. */
  missMaxSeconds: number;
  /** Revocations timed across two sidecars (BENCH_REVOCATIONS). */
  revocations: number;
  /** Requests per second of the added-latency comparison (BENCH_RATE), over BENCH_RATE_CONNECTIONS connections. */
  fixedRate: number;
  fixedRateConnections: number;
  /** Directory for `node --cpu-prof` profiles of tokengate and the bare proxy (BENCH_CPU_PROF); null: no profile. */
  cpuProfileDir: string | null;
  /** Extra node flags for tokengate alone (BENCH_GATEWAY_NODE_FLAGS, space separated), e.g. V8 heap sizing to try. */
  gatewayNodeFlags: string[];
  /** Scenario ids to run (BENCH_ONLY, comma separated); null: all. */
  only: Set<string> | null;
}

export function readSettings(env: NodeJS.ProcessEnv): BenchSettings {
  const number = (name: string, fallback: number, minimum: number) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value < minimum) throw new Error(`${name} must be a number >= ${minimum}, got "${raw}"`);
    return value;
  };
  const only = env.BENCH_ONLY?.split(',')
    .map((id) => id.trim())
    .filter((id) => id !== '');
  return {
    durationSeconds: number('BENCH_DURATION', 4, 1),
    warmupSeconds: number('BENCH_WARMUP', 1, 0),
    firstWarmupSeconds: number('BENCH_FIRST_WARMUP', 3, 0),
    rounds: Math.round(number('BENCH_ROUNDS', 2, 1)),
    roundSeconds: number('BENCH_ROUND_SECONDS', 3, 1),
    soakSeconds: number('BENCH_SOAK', 60, 1),
    connections: Math.round(number('BENCH_CONNECTIONS', 50, 1)),
    missTokens: Math.round(number('BENCH_MISS_TOKENS', 100_000, 1)),
    missMaxSeconds: number('BENCH_MISS_MAX_SECONDS', 30, 1),
    revocations: Math.round(number('BENCH_REVOCATIONS', 50, 1)),
    fixedRate: Math.round(number('BENCH_RATE', 2_000, 1)),
    fixedRateConnections: Math.round(number('BENCH_RATE_CONNECTIONS', 2, 1)),
    cpuProfileDir: env.BENCH_CPU_PROF === undefined || env.BENCH_CPU_PROF === '' ? null : env.BENCH_CPU_PROF,
    gatewayNodeFlags: (env.BENCH_GATEWAY_NODE_FLAGS ?? '').split(' ').filter((flag) => flag !== ''),
    only: only === undefined || only.length === 0 ? null : new Set(only),
  };
}
