import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { proofMarksFor } from '../src/dpop/replay.js';
import { READ_ONLY } from '../src/ratelimit/lease-protocol.js';
import { leasesFor } from '../src/ratelimit/leases.js';
import { compilePolicy } from '../src/ratelimit/policies.js';
import type { RedisStore } from '../src/store/redis.js';
import { ReplicaCounts, parseReplication } from '../src/store/redis-replicas.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';
import { eventually } from './support/wait.js';

/**
 * Which replicas a write waits for (src/store/redis-replicas.ts), against a real master and
 * replica: none on a lone master, one as soon as it is in sync, and one that left for
 * `lostReplicaWaitMs` after it left, since Redis might still promote it.
 */

const LOST_REPLICA_WAIT_MS = 2_000;
const started: ThrowawayRedis[] = [];
const stores: RedisStore[] = [];
const directories: string[] = [];

afterEach(async () => {
  for (const store of stores.splice(0)) await store.close().catch(() => {});
  for (const redis of started.splice(0)) {
    redis.resume();
    await redis.kill();
  }
  for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
});

async function master(): Promise<ThrowawayRedis> {
  const redis = await ThrowawayRedis.notStarted();
  started.push(redis);
  await redis.restart(['--repl-diskless-sync-delay', '0']);
  return redis;
}

async function replicaOf(primary: ThrowawayRedis): Promise<ThrowawayRedis> {
  const redis = await ThrowawayRedis.notStarted();
  started.push(redis);
  // Its own directory: a replica loads its first sync through a file (dump.rdb) there.
  const directory = mkdtempSync(join(tmpdir(), 'tokengate-replica-'));
  directories.push(directory);
  await redis.restart(['--replicaof', '127.0.0.1', String(primary.port), '--dir', directory]);
  await untilInSync(primary, 1);
  return redis;
}

async function untilInSync(primary: ThrowawayRedis, replicas: number): Promise<void> {
  const client = primary.client();
  try {
    await eventually(async () => parseReplication(await client.info('replication'))?.inSync.length === replicas, 10_000);
  } finally {
    client.disconnect();
  }
}

/** A store whose writes wait for one replica, answering (as `tokengate serve` starts it). */
async function storeOn(primary: ThrowawayRedis): Promise<RedisStore> {
  const store = createTestRedisStore(uniquePrefix('replica-waits'), {
    url: primary.url,
    waitForReplicas: 1,
    lostReplicaWaitMs: LOST_REPLICA_WAIT_MS,
    commandTimeoutMs: 300,
  });
  stores.push(store);
  await store.ping();
  return store;
}

const outcome = (write: Promise<unknown>) =>
  write.then(
    () => 'acknowledged' as const,
    () => 'failed' as const,
  );
const save = (store: RedisStore, name: string) => outcome(store.sessions.save(name, { userId: 'u', createdAt: Date.now() }, 60_000));

describe('replica waits', () => {
  it('a master without a replica takes writes; one that attaches is waited for once in sync', { timeout: 30_000 }, async () => {
    const primary = await master();
    const store = await storeOn(primary);
    expect(await save(store, 'alone')).toBe('acknowledged');

    const replica = await replicaOf(primary);
    // In sync and frozen: it is waited for, so the write is not confirmed.
    replica.pause();
    expect(await save(store, 'frozen-replica')).toBe('failed');
    replica.resume();
    await eventually(async () => (await save(store, 'replica-back')) === 'acknowledged', 5_000);
  });

  it(
    "every room's writes wait alike: a rate limit lease and a DPoP replay mark are not confirmed while the replica is frozen",
    { timeout: 30_000 },
    async () => {
      const primary = await master();
      await replicaOf(primary);
      const store = await storeOn(primary);
      await eventually(async () => (await save(store, 'with-replica')) === 'acknowledged', 5_000);
      const leases = leasesFor(store.backend);
      const marks = proofMarksFor(store.backend);
      const policy = compilePolicy('frozen', { by: 'application', requestsPerSecond: 10, burst: 10 });
      const lease = () => outcome(leases.lease('ratelimit:frozen:app', policy, { ...READ_ONLY, want: 1 }));
      const mark = (jti: string) => outcome(marks.markFirstUse(jti, 60_000));

      started[1]!.pause();
      expect(await lease()).toBe('failed');
      expect(await mark('while-frozen')).toBe('failed');
      started[1]!.resume();
      await eventually(async () => (await lease()) === 'acknowledged', 5_000);
      await eventually(async () => (await mark('replica-back')) === 'acknowledged', 5_000);
    },
  );

  it('a replica that left is waited for during lostReplicaWaitMs, then no longer', { timeout: 30_000 }, async () => {
    const primary = await master();
    await replicaOf(primary);
    const store = await storeOn(primary);
    // Eventually: on a loaded machine the replica's first acknowledgement can take longer than
    // the store's 300 ms command timeout; what is proven is that a replica in sync confirms writes.
    await eventually(async () => (await save(store, 'with-replica')) === 'acknowledged', 5_000);

    const lostAt = Date.now();
    await started[1]!.kill();
    expect(await save(store, 'replica-just-lost')).toBe('failed');
    await eventually(async () => (await save(store, 'replica-long-gone')) === 'acknowledged', LOST_REPLICA_WAIT_MS + 10_000);
    // Never before the replica could have been promoted no more.
    expect(Date.now() - lostAt).toBeGreaterThanOrEqual(LOST_REPLICA_WAIT_MS);
  });

  it('reads INFO replication: the replicas in sync, by address, and the replication ID', () => {
    const info = [
      '# Replication',
      'role:master',
      'connected_slaves:2',
      'slave0:ip=10.0.0.2,port=6379,state=online,offset=1234,lag=0',
      'slave1:ip=10.0.0.3,port=6379,state=wait_bgsave,offset=0,lag=0',
      'master_replid:4c1f0aa0b2a7d7b3d1d5f2e0c3b9e8a7f6d5c4b3',
      'master_repl_offset:1234',
    ].join('\r\n');
    expect(parseReplication(info)).toEqual({ replid: '4c1f0aa0b2a7d7b3d1d5f2e0c3b9e8a7f6d5c4b3', inSync: ['10.0.0.2:6379'] });
    expect(parseReplication(info.replace('role:master', 'role:slave'))).toBeNull();
  });

  it('counts per replication ID: a promoted or restarted master starts from none, a replica gone too long is no longer waited for', () => {
    const counts = new ReplicaCounts(1, 1_000);
    const info = (replid: string, ...replicas: string[]) =>
      [
        'role:master',
        ...replicas.map((address, index) => `slave${index}:ip=${address.split(':')[0]},port=${address.split(':')[1]},state=online,offset=1,lag=0`),
        `master_replid:${replid}`,
      ].join('\r\n');
    expect(counts.required('10.0.0.1:6379')).toBeUndefined();
    expect(counts.observe('10.0.0.1:6379', info('a'.repeat(40), '10.0.0.2:6379'), 0)).toBe(1);
    // Its replica gone: still waited for until 1 s has passed since it was last seen in sync.
    expect(counts.observe('10.0.0.1:6379', info('a'.repeat(40)), 900)).toBe(1);
    expect(counts.required('10.0.0.1:6379', 1_000)).toBe(1);
    expect(counts.required('10.0.0.1:6379', 1_001)).toBe(0);
    // The same address under a new replication ID (promoted, restarted): none to wait for.
    expect(counts.observe('10.0.0.1:6379', info('a'.repeat(40), '10.0.0.2:6379'), 2_000)).toBe(1);
    expect(counts.observe('10.0.0.1:6379', info('b'.repeat(40)), 2_100)).toBe(0);
    // Never more than store.waitForReplicas.
    expect(counts.observe('10.0.0.1:6379', info('b'.repeat(40), '10.0.0.2:6379', '10.0.0.3:6379'), 2_200)).toBe(1);
  });
});
