import { readFileSync } from 'node:fs';
import { createTokenMinter, decodeTagKey, generateTagKey, type TokenMinter } from '../../src/token/token-value.js';
import { IMAGE_NODE_OPTIONS, startServe, tempConfigs, type ServeProcess, type TempConfigs } from './cli.js';
import { startUpstream, type Upstream } from './gateway.js';
import { registerApplication, type TestApplication } from './instance.js';
import { createUser } from './issuer.js';
import { freePort } from './ports.js';
import { uniquePrefix } from './redis.js';
import { deleteTopologyPrefix, openTopologyStore, SENTINEL_DATA_PASSWORD, SENTINEL_OWN_PASSWORD, startSentinelTopology } from './topologies.js';
import { sleep } from './wait.js';

/**
 * A deployment as production runs it, for the chaos soak: a Redis master and replica watched by
 * three sentinels, a real upstream, and two sidecars, each a real `tokengate serve` process with
 * two workers, on one key prefix. Every route kind the soak drives is in one config.
 */

export const ROUTES = {
  me: '/api/me',
  bound: '/api/bound',
  limited: '/api/limited',
  quota: '/api/quota',
  /** Asked only at the end, so its count in /metrics is exactly what the soak sent it. */
  counted: '/api/counted',
} as const;

export const LIMITED_POLICY = { requestsPerSecond: 5, burst: 5 };

export interface SoakSidecar {
  name: string;
  serve: ServeProcess;
  publicUrl: string;
  opsUrl: string;
  decisionsUrl: string;
}

export interface SoakDeployment {
  topology: Awaited<ReturnType<typeof startSentinelTopology>>;
  upstream: Upstream;
  sidecars: [SoakSidecar, SoakSidecar];
  /** Mints token values of this deployment that were never stored (unknown tokens). */
  minter: TokenMinter;
  /** The application of every grant, DPoP-bound tokens included. */
  application: TestApplication;
  /** One application per metered route, so each budget is the soak's own. */
  limitedApplication: TestApplication;
  quotaApplication: TestApplication;
  user: { email: string; password: string };
  quota: number;
  stop(): Promise<void>;
}

function sidecarConfig(options: {
  prefix: string;
  tagKey: string;
  sentinels: string[];
  port: number;
  decisionsPort: number;
  upstream: string;
  quota: number;
}): string {
  const route = (path: string, extra = '') => `  - path: ${path}\n    token: any\n    scopes: [public]\n    upstream: ${options.upstream}\n${extra}`;
  return [
    `server:\n  host: 127.0.0.1\n  port: ${options.port}\n  workers: 2`,
    'admin:\n  host: 127.0.0.1\n  port: 0',
    `decisions:\n  enabled: true\n  host: 127.0.0.1\n  port: ${options.decisionsPort}`,
    'logging:\n  level: info\n  requests: errors',
    `store:\n  driver: redis\n  keyPrefix: "${options.prefix}"\n  password: \${SOAK_REDIS_PASSWORD}\n  sentinel:\n    sentinels: [${options.sentinels.map((each) => `"${each}"`).join(', ')}]\n    masterName: tokengate-test\n    password: \${SOAK_SENTINEL_PASSWORD}`,
    `issuer:\n  issuerUrl: http://127.0.0.1:${options.port}\n  tokenTagKey: ${options.tagKey}\n  loginThrottle:\n    maxAttemptsPerAccount: 100000\n    maxAttemptsPerAddress: 100000`,
    // Caches small enough to reach their bounds while the processes warm up: memory that grows
    // after that is not a cache filling up.
    'cache:\n  maxEntries: 2000\n  negativeMaxEntries: 1000',
    'dpop:\n  tokenEndpointNonce: false\n  replayCacheEntries: 1000',
    `rateLimits:\n  limited:\n    requestsPerSecond: ${LIMITED_POLICY.requestsPerSecond}\n    burst: ${LIMITED_POLICY.burst}\n  quota:\n    requestsPerSecond: 50\n    burst: 10\n    requestsPerDay: ${options.quota}`,
    'routes:',
    route(ROUTES.me),
    route(ROUTES.bound, '    dpop: required\n'),
    route(ROUTES.limited, '    rateLimit: limited\n'),
    route(ROUTES.quota, '    rateLimit: quota\n'),
    route(ROUTES.counted),
  ].join('\n');
}

async function startSidecar(
  name: string,
  configs: TempConfigs,
  options: Omit<Parameters<typeof sidecarConfig>[0], 'port' | 'decisionsPort'>,
): Promise<SoakSidecar> {
  const [port, decisionsPort] = [await freePort(), await freePort()];
  const serve = await startServe(configs.write(sidecarConfig({ ...options, port, decisionsPort })), {
    SOAK_REDIS_PASSWORD: SENTINEL_DATA_PASSWORD,
    SOAK_SENTINEL_PASSWORD: SENTINEL_OWN_PASSWORD,
    NODE_OPTIONS: IMAGE_NODE_OPTIONS,
  });
  return { name, serve, publicUrl: serve.publicUrl, opsUrl: serve.opsUrl, decisionsUrl: `http://127.0.0.1:${decisionsPort}` };
}

/** Starts everything; `quota` is the daily quota of the quota route's policy. */
export async function startSoakDeployment(quota: number): Promise<SoakDeployment> {
  const configs = tempConfigs();
  const prefix = uniquePrefix('chaos-soak');
  const tagKey = generateTagKey();
  const [topology, upstream] = await Promise.all([startSentinelTopology(), startUpstream((_request, response) => response.end('ok'))]);
  const started: SoakSidecar[] = [];
  const stop = async () => {
    for (const sidecar of started) {
      sidecar.serve.child.kill('SIGKILL');
      await sidecar.serve.exited;
    }
    await deleteTopologyPrefix(topology, prefix).catch(() => {});
    await upstream.close();
    await topology.stop();
    configs.remove();
  };
  try {
    const store = await openTopologyStore(topology, prefix);
    const [application, limitedApplication, quotaApplication] = [
      await registerApplication(store),
      await registerApplication(store),
      await registerApplication(store),
    ];
    const user = { email: 'soak-user@example.com', password: 'soak horse battery staple' };
    await createUser(store, 'soak-user', user.email, user.password);
    await store.close();
    const options = { prefix, tagKey, sentinels: topology.sentinel.sentinelAddresses, upstream: upstream.url, quota };
    // One after the other: six processes loading the sources at once would starve a small machine.
    started.push(await startSidecar('first', configs, options));
    started.push(await startSidecar('second', configs, options));
    const minter = createTokenMinter(decodeTagKey(tagKey));
    return { topology, upstream, sidecars: [started[0]!, started[1]!], minter, application, limitedApplication, quotaApplication, user, quota, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Pids of a sidecar's workers that are alive now, from the lines they logged. */
export function liveWorkers(sidecar: SoakSidecar): number[] {
  const pids = sidecar.serve
    .output()
    .split('\n')
    .filter((line) => line.includes('"worker":'))
    .map((line) => (JSON.parse(line) as { pid: number }).pid);
  return [...new Set(pids)].filter(isAlive);
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Resident memory of a process in bytes (VmRSS in /proc), null once it is gone. */
export function residentBytes(pid: number): number | null {
  try {
    const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match === null ? null : Number(match[1]) * 1024;
  } catch {
    return null;
  }
}

/** Until the sidecar's primary reports every worker ready (its own store answering). */
export async function untilReady(sidecar: SoakSidecar, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ready = await fetch(`${sidecar.opsUrl}/readyz`, { signal: AbortSignal.timeout(3_000) })
      .then((response) => response.json() as Promise<{ status: string }>)
      .then(
        (body) => body.status === 'ready',
        () => false,
      );
    if (ready) return;
    if (Date.now() > deadline) throw new Error(`sidecar ${sidecar.name} not ready in time:\n${sidecar.serve.output().slice(-3_000)}`);
    await sleep(200);
  }
}
