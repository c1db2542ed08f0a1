import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisStore } from '../../src/store/redis.js';
import type { RedisConnection } from '../../src/store/redis-topology.js';

export const REDIS_URL = process.env.TOKENGATE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A key prefix no other test file or run uses. */
export function uniquePrefix(label: string): string {
  return `tokengate-test:${label}:${randomBytes(6).toString('hex')}:`;
}

export interface TestStoreOptions {
  commandTimeoutMs: number;
  /** A standalone Redis (default: the shared one). */
  url: string;
  /** Another topology instead of `url` (a local Cluster or Sentinel set-up). */
  connection: RedisConnection;
  waitForReplicas: number;
  lostReplicaWaitMs: number;
}

export function createTestRedisStore(prefix: string, overrides: Partial<TestStoreOptions> = {}): RedisStore {
  return new RedisStore({
    connection: overrides.connection ?? { topology: { kind: 'standalone', url: overrides.url ?? REDIS_URL } },
    keyPrefix: prefix,
    commandTimeoutMs: overrides.commandTimeoutMs ?? 1_000,
    connectTimeoutMs: 2_000,
    waitForReplicas: overrides.waitForReplicas ?? 0,
    lostReplicaWaitMs: overrides.lostReplicaWaitMs ?? 300_000,
  });
}

/** Deletes every key under `prefix` (tests clean up after themselves). */
export async function deletePrefix(prefix: string, url = REDIS_URL): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      if (keys.length > 0) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

/** A raw client for assertions about what Redis holds. */
export function rawRedis(url = REDIS_URL): Redis {
  return new Redis(url, { maxRetriesPerRequest: 1 });
}
