import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { slotOf } from '../src/store/redis-feed.js';
import { lagReplicaThenFailOver, runFailover, summarize, startFailoverSidecars } from './support/failover.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import type { RunningTokengate } from './support/instance.js';
import type { RedisNode } from './support/redis-cluster.js';
import { valueOf } from './support/metrics.js';
import { uniquePrefix } from './support/redis.js';
import { openTopologyStore, startClusterTopology } from './support/topologies.js';

/**
 * A Cluster master is killed under traffic through two sidecars; its replica takes over. What
 * the clients saw is counted (test/support/failover.ts): no wrong answer, and 503s only while
 * the cluster has no master for some of its slots: the promoted master takes writes alone.
 */

/** How long the promoted master serves without a replica before the lost node is restarted. */
const ALONE_MS = 6_000;

let topology: Awaited<ReturnType<typeof startClusterTopology>>;
let upstream: Upstream;
const sidecars: RunningTokengate[] = [];

beforeAll(async () => {
  [topology, upstream] = await Promise.all([startClusterTopology(), startUpstream()]);
}, 120_000);
afterAll(async () => {
  for (const sidecar of sidecars.reverse()) await sidecar.close().catch(() => {});
  await upstream?.close();
  await topology?.stop();
});

describe('Redis Cluster: a master fails over under traffic', () => {
  it('costs 503s while its slots have no master, and no wrong answer', { timeout: 120_000 }, async () => {
    const pair = await startFailoverSidecars('failover-cluster', topology, upstream.url, sidecars);
    const { first } = pair;
    const { cluster } = topology;
    // The master that carries the revocation feed: both sidecars' subscriptions have to move.
    const victim: RedisNode = await cluster.masterOfSlot(slotOf(`${first.prefix}revocations`));
    if (process.env.TOKENGATE_FAILOVER_REPORT)
      process.stdout.write(
        `victim ${victim.port}: ${String(await victim.command('CLIENT', 'LIST'))
          .split('\n')
          .filter((line) => line.includes('revocations'))
          .join(' | ')}\n`,
      );
    const resets = () => Promise.all(sidecars.map((sidecar) => valueOf(sidecar.tokengate.context.metrics.cacheResets)));
    const resetsBefore = await resets();

    const report = await runFailover(pair, {
      fail: () => victim.kill(),
      aloneMs: ALONE_MS,
      promoted: () => cluster.waitUntilHealthy(),
      // An orchestrator restarts the lost node; it rejoins as the new master's replica, and
      // writes are confirmed again.
      replicaBack: async () => {
        await victim.start();
        await cluster.waitUntilHealthy();
      },
    });
    if (process.env.TOKENGATE_FAILOVER_REPORT) process.stdout.write(`${summarize('Redis Cluster', report)}\n`);

    expect(report.validRefused).toBe(0);
    expect(report.revokedAccepted).toBe(0);
    expect(report.codesRedeemedTwice).toBe(0);
    expect(report.refreshTokensUsedTwice).toBe(0);
    expect(report.unexpected).toEqual([]);
    expect(report.afterwards).toMatchObject({ validRefused: 0, revokedAccepted: 0 });
    expect(report.afterwards.valid).toBeGreaterThan(30);
    // Traffic went on through the failover, and the 503s stopped once the replica was back.
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
    expect(resetsBefore).toEqual([0, 0]);
    expect(await resets()).toEqual([1, 1]);
  });

  it('acknowledges no write its replica has not confirmed: one acknowledged by the master alone is lost with it', { timeout: 60_000 }, async () => {
    const { cluster } = topology;
    await cluster.waitUntilHealthy();
    const prefix = uniquePrefix('failover-cluster-wait');
    const confirmed = await openTopologyStore(topology, prefix, { waitForReplicas: 1, commandTimeoutMs: 300 });
    const unconfirmed = await openTopologyStore(topology, prefix, { waitForReplicas: 0, commandTimeoutMs: 300 });
    try {
      const master = (await cluster.masters())[0]!;
      const onMaster = async (key: (candidate: string) => string) => {
        for (;;) {
          const candidate = randomBytes(16).toString('hex');
          if ((await cluster.masterOfSlot(slotOf(key(candidate)))) === master) return candidate;
        }
      };
      const digests: [string, string] = [await onMaster((digest) => `${prefix}at:${digest}`), await onMaster((digest) => `${prefix}at:${digest}`)];
      const result = await lagReplicaThenFailOver({
        confirmed,
        unconfirmed,
        master,
        replica: await cluster.replicaOf(master),
        fillerKey: `${prefix}${await onMaster((name) => `${prefix}${name}`)}`,
        digests,
        promoted: () => cluster.waitUntilHealthy(),
      });
      expect(result).toEqual({ unconfirmedSave: 'acknowledged', confirmedSave: 'failed', afterFailover: [null, null] });
      await master.start();
      await cluster.waitUntilHealthy();
    } finally {
      await Promise.all([confirmed.close(), unconfirmed.close()]);
    }
  });
});
