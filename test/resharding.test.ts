import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { slotOf } from '../src/store/redis-feed.js';
import { answers, runFailover, startFailoverSidecars } from './support/failover.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import type { RunningTokengate } from './support/instance.js';
import { startClusterTopology } from './support/topologies.js';

/**
 * A third of the Cluster's slots move from one master to another (`redis-cli --cluster
 * reshard`, keys migrated with MIGRATE) under traffic through two sidecars: the same traffic and
 * counts as the failover tests (test/support/failover.ts). Clients follow MOVED and ASK; no
 * wrong answer and no 503.
 */

const REDIS_CLI = process.env.TOKENGATE_TEST_REDIS_CLI ?? '/usr/bin/redis-cli';
const SLOTS_MOVED = Math.round(16_384 / 3);

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

/** `redis-cli --cluster reshard`, run beside the traffic (a child process, not a blocking call). */
async function reshard(entry: string, from: string, to: string, slots: number): Promise<void> {
  const child = spawn(
    REDIS_CLI,
    ['--cluster', 'reshard', entry, '--cluster-from', from, '--cluster-to', to, '--cluster-slots', String(slots), '--cluster-yes'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4_000)));
  child.stderr.on('data', (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4_000)));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`redis-cli --cluster reshard failed (${code}):\n${output}`);
}

describe('Redis Cluster: slots migrate between masters under traffic', () => {
  it('follows MOVED and ASK with no wrong answer and no 503', { timeout: 180_000 }, async () => {
    const pair = await startFailoverSidecars('resharding', topology, upstream.url, sidecars);
    const { first } = pair;
    const { cluster } = topology;
    // The master of the revocation feed gives its slots away: both sidecars' subscriptions move too.
    const source = await cluster.masterOfSlot(slotOf(`${first.prefix}revocations`));
    const nodes = await cluster.topology();
    const sourceId = nodes.find((node) => node.port === source.port)!.id;
    const targetId = nodes.find((node) => node.role === 'master' && node.port !== source.port && !node.failed)!.id;
    const slotsBefore = nodes.find((node) => node.id === sourceId)!.slots;

    let movedAfterMs = 0;
    const report = await runFailover(pair, {
      fail: async () => {
        const started = performance.now();
        await reshard(source.address, sourceId, targetId, SLOTS_MOVED);
        movedAfterMs = Math.round(performance.now() - started);
      },
      promoted: () => cluster.waitUntilHealthy(),
      aloneMs: 0,
      replicaBack: async () => {},
    });
    process.stdout.write(`Resharding: ${SLOTS_MOVED} slots moved in ${movedAfterMs} ms; ${answers(report, 'the move began', 'during the move')}\n`);

    const slotsAfter = (await cluster.topology()).find((node) => node.id === sourceId)!.slots;
    expect(slotsBefore - slotsAfter).toBe(Math.min(SLOTS_MOVED, slotsBefore));
    expect(report.validRefused).toBe(0);
    expect(report.revokedAccepted).toBe(0);
    expect(report.codesRedeemedTwice).toBe(0);
    expect(report.refreshTokensUsedTwice).toBe(0);
    expect(report.unexpected).toEqual([]);
    expect(report.afterwards).toMatchObject({ validRefused: 0, revokedAccepted: 0 });
    expect(report.afterwards.valid).toBeGreaterThan(30);
    // A migrating slot is no outage: a command that met ASK or MOVED is sent where the key is now.
    expect(report.unavailable).toBe(0);
    // Traffic of every kind went on during the move.
    expect(report.gatewayWhileFailing.valid[200]).toBeGreaterThan(0);
    expect(report.issuance[200]).toBeGreaterThan(0);
  });
});
