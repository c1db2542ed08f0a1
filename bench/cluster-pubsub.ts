import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { slotOf } from '../src/store/redis-feed.js';
import { percentile } from './lib/load.js';
import { markdownTable } from './lib/report.js';
import { totalCpuMilliseconds } from './lib/proc.js';
import { LocalRedisCluster, type RedisNode } from '../test/support/redis-cluster.js';

/**
 * `node --import tsx bench/cluster-pubsub.ts`: how a revocation message reaches every sidecar on
 * a Redis Cluster, classic pub/sub (PUBLISH, forwarded to every node over the cluster bus)
 * against sharded pub/sub (SPUBLISH, delivered by the master of the channel's slot alone).
 * On a local cluster of three masters with a replica each, SUBSCRIBERS connections listen (for
 * classic spread over every node, as sidecars would be; for sharded all on the channel's master,
 * where the store puts them) and MESSAGES revocation-sized messages are published one at a
 * time. It prints, per mode: delivery delay (publish sent -> last subscriber received), the
 * cluster-bus messages it caused (CLUSTER INFO of every node) and the CPU of every node.
 */

const SUBSCRIBERS = Number(process.env.PUBSUB_SUBSCRIBERS ?? 12);
const MESSAGES = Number(process.env.PUBSUB_MESSAGES ?? 2_000);
const CHANNEL = 'tokengate:revocations';
const MESSAGE = JSON.stringify({ accessTokens: ['x'.repeat(43)], publishedAt: Date.now() });

interface ModeResult {
  mode: string;
  p50Ms: number;
  p99Ms: number;
  busMessagesPerPublish: number;
  cpuMsPer1kPublishes: number;
}

async function busMessages(nodes: RedisNode[]): Promise<number> {
  let sent = 0;
  for (const node of nodes) {
    const info = String(await node.command('CLUSTER', 'INFO'));
    for (const match of info.matchAll(/^cluster_stats_messages_(publish|publishshard)_sent:(\d+)/gm)) sent += Number(match[2]);
  }
  return sent;
}

async function measureMode(cluster: LocalRedisCluster, sharded: boolean): Promise<ModeResult> {
  const master = await cluster.masterOfSlot(slotOf(CHANNEL));
  const subscribers: Redis[] = [];
  let received = 0;
  let onAllReceived: () => void = () => {};
  for (let index = 0; index < SUBSCRIBERS; index++) {
    const node = sharded ? master : cluster.nodes[index % cluster.nodes.length]!;
    const subscriber = new Redis({ host: '127.0.0.1', port: node.port });
    subscriber.on(sharded ? 'smessage' : 'message', () => {
      received += 1;
      if (received === SUBSCRIBERS) onAllReceived();
    });
    await (sharded ? subscriber.ssubscribe(CHANNEL) : subscriber.subscribe(CHANNEL));
    subscribers.push(subscriber);
  }
  // Classic: published wherever the client happens to be connected, here another master.
  const masters = await cluster.masters();
  const publisherNode = sharded ? master : masters.find((each) => each !== master)!;
  const publisher = new Redis({ host: '127.0.0.1', port: publisherNode.port });
  const delays: number[] = [];
  const busBefore = await busMessages(cluster.nodes);
  const pids = cluster.nodes.map((node) => node.pid!).filter(Boolean);
  const cpuBefore = totalCpuMilliseconds(pids);
  for (let index = 0; index < MESSAGES; index++) {
    received = 0;
    const allReceived = new Promise<void>((resolve) => (onAllReceived = resolve));
    const sent = performance.now();
    await (sharded ? publisher.spublish(CHANNEL, MESSAGE) : publisher.publish(CHANNEL, MESSAGE));
    await allReceived;
    delays.push(performance.now() - sent);
  }
  const cpuMs = totalCpuMilliseconds(pids) - cpuBefore;
  const bus = (await busMessages(cluster.nodes)) - busBefore;
  publisher.disconnect();
  for (const subscriber of subscribers) subscriber.disconnect();
  const sorted = Float64Array.from(delays).sort();
  return {
    mode: sharded ? 'sharded (SPUBLISH, subscribers on the channel master)' : 'classic (PUBLISH, subscribers on every node)',
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    busMessagesPerPublish: bus / MESSAGES,
    cpuMsPer1kPublishes: (cpuMs * 1000) / MESSAGES,
  };
}

async function main(): Promise<void> {
  const cluster = await LocalRedisCluster.start();
  try {
    const results = [await measureMode(cluster, false), await measureMode(cluster, true), await measureMode(cluster, false), await measureMode(cluster, true)];
    process.stdout.write(
      `${SUBSCRIBERS} subscribers, ${MESSAGES} messages of ${MESSAGE.length} bytes, each published once all received the one before; each mode twice\n\n`,
    );
    process.stdout.write(
      `${markdownTable(
        ['mode', 'delivery p50 ms', 'delivery p99 ms', 'cluster-bus messages per publish', 'CPU of all nodes, ms per 1k publishes'],
        results.map((result) => [
          result.mode,
          result.p50Ms.toFixed(3),
          result.p99Ms.toFixed(3),
          result.busMessagesPerPublish.toFixed(1),
          result.cpuMsPer1kPublishes.toFixed(0),
        ]),
      )}\n`,
    );
  } finally {
    await cluster.stop();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
