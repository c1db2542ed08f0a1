import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { slotOf } from '../src/store/redis-feed.js';
import type { RedisStore } from '../src/store/redis.js';
import type { RedisDoor } from '../src/store/backend.js';
import type { RedisNode } from './support/redis-cluster.js';
import { uniquePrefix } from './support/redis.js';
import { openTopologyStore, startClusterTopology } from './support/topologies.js';

/**
 * The door to Redis while a Cluster slot is being migrated (what `redis-cli --cluster reshard`
 * does one slot at a time): a key already moved to the importing master is answered ASK by the
 * old one, and a command that meets ASK was not executed. The door sends it to the new master
 * (ASKING first), with the replica wait of a confirmed write on that master, so a write under
 * migration succeeds instead of answering 503.
 */

let topology: Awaited<ReturnType<typeof startClusterTopology>>;
let store: RedisStore;
let door: RedisDoor;

beforeAll(async () => {
  topology = await startClusterTopology();
  store = await openTopologyStore(topology, uniquePrefix('door'));
  door = store.backend;
}, 120_000);
afterAll(async () => {
  await store?.close();
  await topology?.stop();
});

async function nodeId(node: RedisNode): Promise<string> {
  return String(await node.command('CLUSTER', 'MYID'));
}

/** Starts moving `slot` from its master to another one, moves `keys` of it, and returns how to finish the move (every key left moved first). */
async function migrating(slot: number, keys: string[]): Promise<{ finish(): Promise<void> }> {
  const { cluster } = topology;
  const source = await cluster.masterOfSlot(slot);
  const target = (await cluster.masters()).find((master) => master.port !== source.port)!;
  const [sourceId, targetId] = [await nodeId(source), await nodeId(target)];
  await target.command('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceId);
  await source.command('CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId);
  for (const key of keys) await source.command('MIGRATE', '127.0.0.1', target.port, key, 0, 5_000);
  return {
    async finish() {
      await cluster.handOverSlot(slot, source, target);
      await cluster.waitUntilHealthy();
    },
  };
}

/** A key under the prefix, named `name:<n>`, in the same slot as `key`. */
function keyInSlotOf(key: string, name: string): string {
  for (let suffix = 0; ; suffix += 1) {
    const candidate = door.key(`${name}:${suffix}`);
    if (slotOf(candidate) === slotOf(key)) return candidate;
  }
}

describe('the door to a Redis Cluster while a slot migrates', () => {
  it('sends a command that met ASK to the importing master, confirmed writes and scripts included, and answers no 503', { timeout: 60_000 }, async () => {
    // Three keys of one slot, found by name: two move, one stays on the old master.
    const moved = door.key('door:moved');
    const stay = keyInSlotOf(moved, 'door:staying');
    const scripted = keyInSlotOf(moved, 'door:script');
    door.defineScript('doorTestIncrement', { numberOfKeys: 1, lua: "return redis.call('INCRBY', KEYS[1], ARGV[1])" });

    await door.write('set', moved, 'before');
    await door.write('set', stay, 'before');
    await door.write('doorTestIncrement', scripted, 1);
    const move = await migrating(slotOf(moved), [moved, scripted]);
    try {
      // Moved: the old master answers ASK for them.
      expect(await door.write('set', moved, 'after')).toBe('OK');
      expect(await door.read('get', moved)).toBe('after');
      expect(await door.write('doorTestIncrement', scripted, 2)).toBe(3);
      // Not moved yet: the old master still serves it.
      expect(await door.write('set', stay, 'after')).toBe('OK');
      expect(await door.read('get', stay)).toBe('after');
    } finally {
      await move.finish();
    }
    expect(await door.read('get', moved)).toBe('after');
    expect(await door.read('get', scripted)).toBe('3');
  });

  it(
    'sends again each read of a batch that met MOVED, though the batch no longer fits one master (ioredis refuses to send it again: it was a 503)',
    { timeout: 60_000 },
    async () => {
      const moving = door.key('door:batch-moving');
      const source = await topology.cluster.masterOfSlot(slotOf(moving));
      // A key of another slot that the same master serves: ioredis sends both reads in one batch.
      let staying = '';
      for (let suffix = 0; staying === ''; suffix += 1) {
        const candidate = door.key(`door:batch-staying:${suffix}`);
        if (slotOf(candidate) !== slotOf(moving) && (await topology.cluster.masterOfSlot(slotOf(candidate))).port === source.port) staying = candidate;
      }
      await door.write('set', moving, 'moving');
      await door.write('set', staying, 'staying');
      // The slot moves behind the client's back: it still believes the old master serves it.
      await (await migrating(slotOf(moving), [moving])).finish();
      expect(await Promise.all([door.read('get', moving), door.read('get', staying)])).toEqual(['moving', 'staying']);
    },
  );
});
