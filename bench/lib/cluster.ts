import { performance } from 'node:perf_hooks';
import { RedisStore } from '../../src/store/redis.js';
import type { TokenMinter } from '../../src/token/token-value.js';
import { LocalRedisCluster } from '../../test/support/redis-cluster.js';
import { USER_CLIENT_ID, rotation, seedAccessTokens } from './fixtures.js';
import { measure, type Run } from './measure.js';
import { totalCpuMilliseconds } from './proc.js';
import type { ProcessGroup } from './processes.js';
import { progress } from './progress.js';
import { startTokengate, type TokengateOptions } from './services.js';
import { ROUTES } from './tokengate-config.js';

/**
 * `cluster-miss`: the cache-miss scenario again, with tokengate on a local Redis Cluster (three
 * masters with a replica each, started like the tests start theirs, every node a process of the
 * run's group so it is pinned with the servers) instead of the one Redis. Its row sits beside
 * `cache-miss`, which is its baseline; the Redis CPU column sums every node of the cluster.
 */
export async function measureClusterMiss(run: Run, group: ProcessGroup, dir: string, minter: TokenMinter, tokengate: TokengateOptions): Promise<void> {
  const cluster = await LocalRedisCluster.start({
    spawner: (name, args) => {
      const started = group.spawn(name, 'redis-server', args);
      const exited = new Promise<void>((resolve) => {
        const poll = setInterval(() => {
          if (started.exitStatus() === null) return;
          clearInterval(poll);
          resolve();
        }, 20);
      });
      return { pid: started.pid, signal: (signal) => process.kill(started.pid, signal), exited };
    },
  });
  const nodePids = () => cluster.nodes.map((node) => node.pid).filter((pid): pid is number => pid !== null);
  const store = new RedisStore({
    connection: { topology: { kind: 'cluster', nodes: cluster.startupNodes, natMap: {}, scaleReads: 'master' } },
    keyPrefix: tokengate.keyPrefix,
    commandTimeoutMs: 5_000,
    connectTimeoutMs: 2_000,
    waitForReplicas: 0,
  });
  try {
    await untilAnswering(store);
    const gateway = await startTokengate(group, dir, 'tokengate-cluster', { ...tokengate, clusterNodes: cluster.startupNodes });
    const seeded = performance.now();
    const nextMiss = rotation(await seedAccessTokens(store, minter, run.settings.missTokens, 'user', USER_CLIENT_ID));
    progress(`seeded ${run.settings.missTokens} tokens in the cluster in ${((performance.now() - seeded) / 1000).toFixed(1)} s`);
    const cpuBefore = totalCpuMilliseconds(nodePids());
    const miss = await measure(run, {
      id: 'cluster-miss',
      title: `tokengate on a 3-master Redis Cluster, cache miss (${run.settings.missTokens} distinct tokens)`,
      target: gateway,
      request: { method: 'GET', path: ROUTES.me, setupRequest: (request) => ({ ...request, headers: { authorization: `Bearer ${nextMiss()}` } }) },
      gateway,
      baseline: 'cache-miss',
      amount: run.settings.missTokens - 1,
      durationSeconds: run.settings.missMaxSeconds,
      warmupSeconds: 0,
    });
    if (miss.load.requests + 1 < run.settings.missTokens)
      progress(`the cluster-miss run stopped after ${run.settings.missMaxSeconds} s, at ${miss.load.requests + 1} of ${run.settings.missTokens} tokens`);
    // measure() reads the one Redis of the run; the cluster's nodes are counted here instead.
    miss.storeCpuMsPer1k = miss.load.requests === 0 ? Number.NaN : ((totalCpuMilliseconds(nodePids()) - cpuBefore) * 1000) / miss.load.requests;
  } finally {
    await store.close();
    await cluster.stop();
  }
}

async function untilAnswering(store: RedisStore): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await store.ping();
      return;
    } catch (error) {
      if (attempt > 100) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
