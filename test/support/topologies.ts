import type { RedisStore } from '../../src/store/redis.js';
import type { RedisConnection } from '../../src/store/redis-topology.js';
import { LocalRedisCluster, type RedisNode } from './redis-cluster.js';
import { LocalRedisSentinel } from './redis-sentinel.js';
import { createTestRedisStore, type TestStoreOptions } from './redis.js';

/** The passwords of the local Sentinel set-up: it runs with both, so the store's options for them are exercised. */
export const SENTINEL_DATA_PASSWORD = 'sentinel-set-up-data-password';
export const SENTINEL_OWN_PASSWORD = 'sentinel-set-up-sentinel-password';

/** A local Redis set-up other than the shared standalone server, with what a test needs to use it. */
export interface TestTopology {
  readonly name: 'cluster' | 'sentinel';
  readonly connection: RedisConnection;
  /** The data nodes whose keys a test may inspect or delete: the masters. */
  masters(): Promise<RedisNode[]>;
  stop(): Promise<void>;
}

export async function startClusterTopology(): Promise<TestTopology & { cluster: LocalRedisCluster }> {
  const cluster = await LocalRedisCluster.start();
  return {
    name: 'cluster',
    cluster,
    connection: { topology: { kind: 'cluster', nodes: cluster.startupNodes, natMap: {}, scaleReads: 'master' } },
    masters: () => cluster.masters(),
    stop: () => cluster.stop(),
  };
}

export async function startSentinelTopology(): Promise<TestTopology & { sentinel: LocalRedisSentinel }> {
  const sentinel = await LocalRedisSentinel.start({ password: SENTINEL_DATA_PASSWORD, sentinelPassword: SENTINEL_OWN_PASSWORD });
  return {
    name: 'sentinel',
    sentinel,
    connection: {
      topology: { kind: 'sentinel', sentinels: sentinel.sentinelAddresses, masterName: sentinel.masterName, sentinelPassword: SENTINEL_OWN_PASSWORD },
      password: SENTINEL_DATA_PASSWORD,
    },
    masters: async () => [await sentinel.currentMaster()],
    stop: () => sentinel.stop(),
  };
}

/**
 * A store on the set-up, each write confirmed by one replica as in production, resolved once
 * it answers (a Cluster client refuses commands until it has read the slot map).
 */
export async function openTopologyStore(topology: TestTopology, prefix: string, overrides: Partial<TestStoreOptions> = {}): Promise<RedisStore> {
  const store = createTestRedisStore(prefix, { connection: topology.connection, waitForReplicas: 1, ...overrides });
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await store.ping();
      return store;
    } catch (error) {
      if (Date.now() > deadline) {
        await store.close();
        throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/** Deletes every key under `prefix` on every master (a Cluster's keys are spread over them). */
export async function deleteTopologyPrefix(topology: TestTopology, prefix: string): Promise<void> {
  for (const master of await topology.masters()) {
    const client = master.client();
    try {
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
        // One key per DEL: on a Cluster, keys of one node may still hash to different slots.
        await Promise.all(keys.map((key) => client.del(key)));
        cursor = next;
      } while (cursor !== '0');
    } finally {
      client.disconnect();
    }
  }
}
