import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisStore } from '../src/store/redis.js';
import { lagReplicaThenFailOver, runFailover, summarize, startFailoverSidecars } from './support/failover.js';
import { startUpstream, USER_TOKEN, type Upstream } from './support/gateway.js';
import type { RunningTokengate } from './support/instance.js';
import { valueOf } from './support/metrics.js';
import { uniquePrefix } from './support/redis.js';
import type { RedisNode } from './support/redis-cluster.js';
import { deleteTopologyPrefix, openTopologyStore, startSentinelTopology } from './support/topologies.js';
import { eventually, sleep } from './support/wait.js';

/**
 * The Sentinel master is killed under traffic through two sidecars; the sentinels promote the
 * replica. What the clients saw is counted (test/support/failover.ts): no wrong answer, and 503s
 * only while there is no master: the promoted master takes writes alone.
 */

/** How long the promoted master serves without a replica before the lost node is restarted. */
const ALONE_MS = 6_000;

let topology: Awaited<ReturnType<typeof startSentinelTopology>>;
let upstream: Upstream;
const sidecars: RunningTokengate[] = [];

beforeAll(async () => {
  [topology, upstream] = await Promise.all([startSentinelTopology(), startUpstream()]);
}, 60_000);
afterAll(async () => {
  for (const sidecar of sidecars.reverse()) await sidecar.close().catch(() => {});
  await upstream?.close();
  await topology?.stop();
});

describe('Redis Sentinel: the master fails over under traffic', () => {
  it('costs 503s while there is no master, and no wrong answer', { timeout: 120_000 }, async () => {
    const pair = await startFailoverSidecars('failover-sentinel', topology, upstream.url, sidecars);
    const { sentinel } = topology;
    const victim = await sentinel.currentMaster();
    const successor = sentinel.servers.find((server) => server !== victim)!;
    const resets = () => Promise.all(sidecars.map((sidecar) => valueOf(sidecar.tokengate.context.metrics.cacheResets)));
    expect(await resets()).toEqual([0, 0]);

    const report = await runFailover(pair, {
      fail: () => victim.kill(),
      aloneMs: ALONE_MS,
      promoted: () => sentinel.waitUntilHealthy(successor),
      // An orchestrator restarts the lost server as a replica of the master the sentinels name.
      replicaBack: async () => {
        await victim.start(['--replicaof', '127.0.0.1', String(successor.port)]);
        await sentinel.waitUntilHealthy(successor);
      },
    });
    if (process.env.TOKENGATE_FAILOVER_REPORT) process.stdout.write(`${summarize('Redis Sentinel', report)}\n`);

    expect(report.validRefused).toBe(0);
    expect(report.revokedAccepted).toBe(0);
    expect(report.codesRedeemedTwice).toBe(0);
    expect(report.refreshTokensUsedTwice).toBe(0);
    expect(report.unexpected).toEqual([]);
    expect(report.afterwards).toMatchObject({ validRefused: 0, revokedAccepted: 0 });
    expect(report.afterwards.valid).toBeGreaterThan(30);
    // Cached valid tokens were answered while the master was gone.
    expect(report.gatewayWhileFailing.valid[200]).toBeGreaterThan(0);
    // The promoted master took writes alone, within 5 s of its promotion, and no write failed
    // from then on, not even when the lost node came back as its replica.
    expect(report.lastUnavailableMs ?? 0).toBeLessThanOrEqual(report.timeline.promotedMs + 5_000);
    // Both times are rounded to the millisecond, and a timer may fire a millisecond early.
    expect(report.timeline.restartedMs - report.timeline.promotedMs).toBeGreaterThanOrEqual(ALONE_MS - 2);
    const alone = report.writesWhileAlone;
    expect([alone.issuance[200], alone.revocations[200], alone.redemptions[200], alone.refreshes[200], alone.signIns[303]]).toEqual(
      Array(5).fill(expect.any(Number)),
    );
    // Both sidecars lost their subscription with the master and cleared their caches once subscribed again.
    expect(await resets()).toEqual([1, 1]);
  });

  it('takes writes at once on a server promoted again, though it had a replica when it was master before', { timeout: 120_000 }, async () => {
    const { sentinel } = topology;
    await sentinel.waitUntilHealthy();
    const prefix = uniquePrefix('failover-sentinel-back');
    const store = await openTopologyStore(topology, prefix, { waitForReplicas: 1, commandTimeoutMs: 500 });
    const now = Date.now();
    const record = { ...USER_TOKEN, scopes: ['public'], issuedAt: now, expiresAt: now + 600_000 };
    // Eight at once, as a sidecar's clients send them: they share one connection, where each
    // replica wait that runs out holds up the ones behind it.
    const save = () => Promise.all(Array.from({ length: 8 }, () => store.tokens.saveAccessToken(randomBytes(32).toString('hex'), record)));
    /** How long after the promotion the first eight writes were all taken; the first are sent when every sentinel names the new master. */
    const failOverTo = async (successor: RedisNode) => {
      await sentinel.failOver();
      await sentinel.waitForMaster(successor);
      let failed = 0;
      const promoted = Date.now();
      let lastError: unknown;
      while (
        !(await save().then(
          () => true,
          (error: unknown) => ((lastError = error), false),
        ))
      ) {
        failed += 1;
        if (Date.now() - promoted > 30_000) throw new Error(`no write taken in 30 s after the promotion: ${String(lastError)}`);
        await sleep(20);
      }
      const firstWriteAfterMs = Date.now() - promoted;
      await sentinel.waitUntilHealthy(successor);
      return { failed, firstWriteAfterMs };
    };
    try {
      const first = await sentinel.currentMaster();
      const second = sentinel.servers.find((server) => server !== first)!;
      // The store learns `first` as a master with a replica in sync.
      await save();
      await failOverTo(second);
      await save();
      // Back to `first`: a new replication ID, and no replica until the sentinels turn `second`
      // into one (up to 10 s later). Its writes go on at once, as on any promoted server.
      const back = await failOverTo(first);
      expect(back.firstWriteAfterMs).toBeLessThan(3_000);
    } finally {
      await store.close();
      await deleteTopologyPrefix(topology, prefix);
    }
  });

  it('connects again when a failover is announced while it is asking the sentinels where the master is', { timeout: 120_000 }, async () => {
    const { sentinel } = topology;
    await sentinel.waitUntilHealthy();
    const prefix = uniquePrefix('failover-sentinel-asking');
    // A command timeout (the sentinels' too) longer than the whole failover: the store is still
    // asking the frozen sentinel when the others announce it.
    const store = await openTopologyStore(topology, prefix, { commandTimeoutMs: 20_000 });
    const victim = await sentinel.currentMaster();
    const successor = sentinel.servers.find((server) => server !== victim)!;
    // The sentinel the store asks first (the first listed) answers nothing for now: every new
    // connection is stuck asking it while the other two fail the master over and announce it.
    const asked = sentinel.sentinels[0]!;
    asked.pause();
    try {
      await killAndAwaitPromotion(victim, successor);
      // The announcement has reached the store's failover detector on the other two sentinels.
      await sleep(1_000);
    } finally {
      asked.resume();
    }
    try {
      await answersAgain(store);
    } finally {
      await store.close();
      await restoreAsReplica(victim, successor, prefix);
    }
  });

  it('finds the new master through the other sentinels while the one it asks first stays frozen', { timeout: 120_000 }, async () => {
    const { sentinel } = topology;
    await sentinel.waitUntilHealthy();
    const prefix = uniquePrefix('failover-sentinel-frozen');
    const store = await openTopologyStore(topology, prefix, { commandTimeoutMs: 500 });
    const victim = await sentinel.currentMaster();
    const successor = sentinel.servers.find((server) => server !== victim)!;
    const frozen = sentinel.sentinels[0]!;
    frozen.pause();
    try {
      await killAndAwaitPromotion(victim, successor);
      await answersAgain(store);
    } finally {
      frozen.resume();
      await store.close();
      await restoreAsReplica(victim, successor, prefix);
    }
  });

  it('acknowledges no write its replica has not confirmed: one acknowledged by the master alone is lost with it', { timeout: 60_000 }, async () => {
    const { sentinel } = topology;
    await sentinel.waitUntilHealthy();
    const prefix = uniquePrefix('failover-sentinel-wait');
    const confirmed = await openTopologyStore(topology, prefix, { waitForReplicas: 1, commandTimeoutMs: 300 });
    const unconfirmed = await openTopologyStore(topology, prefix, { waitForReplicas: 0, commandTimeoutMs: 300 });
    try {
      const master = await sentinel.currentMaster();
      const replica = sentinel.servers.find((server) => server !== master)!;
      const result = await lagReplicaThenFailOver({
        confirmed,
        unconfirmed,
        master,
        replica,
        fillerKey: `${prefix}filler`,
        digests: [randomBytes(32).toString('hex'), randomBytes(32).toString('hex')],
        promoted: async () => {
          await sentinel.waitUntilHealthy(replica);
          // The stores follow the sentinels to the new master.
          await eventually(
            () =>
              confirmed.ping().then(
                () => true,
                () => false,
              ),
            10_000,
          );
        },
      });
      expect(result).toEqual({ unconfirmedSave: 'acknowledged', confirmedSave: 'failed', afterFailover: [null, null] });
      await master.start(['--replicaof', '127.0.0.1', String(replica.port)]);
      await sentinel.waitUntilHealthy(replica);
    } finally {
      await Promise.all([confirmed.close(), unconfirmed.close()]);
    }
  });
});

/** Kills the master and waits until the sentinels have promoted `successor`. */
async function killAndAwaitPromotion(victim: RedisNode, successor: RedisNode): Promise<void> {
  await victim.kill();
  await eventually(async () => String(await successor.command('INFO', 'replication')).includes('role:master'), 30_000);
}

/** The store answers a ping again within 15 s. */
async function answersAgain(store: RedisStore): Promise<void> {
  const answering = () =>
    store.ping().then(
      () => true,
      () => false,
    );
  await eventually(answering, 15_000);
}

/** The killed master back as a replica of its successor, the set-up healthy, the test's keys gone. */
async function restoreAsReplica(victim: RedisNode, successor: RedisNode, prefix: string): Promise<void> {
  await victim.start(['--replicaof', '127.0.0.1', String(successor.port)]);
  await topology.sentinel.waitUntilHealthy(successor);
  await deleteTopologyPrefix(topology, prefix);
}
