import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { RedisStore } from '../../src/store/redis.js';
import { rotation, saveUserTokens, seedUserTokens } from './fixtures.js';
import { progress, type Bench, type Row } from './measure.js';
import { freePort, waitForPort, type ProcessGroup } from './processes.js';
import { startTokengate } from './services.js';
import { ME } from './tokengate-config.js';

/**
 * `cluster-miss`: the cache-miss row again, with tokengate on a local Redis Cluster (three
 * masters with a replica each, on the load side like the run's one Redis) instead of one Redis.
 * It is measured in turns with `cache-miss`, its baseline.
 */

const MASTERS = 3;

/** Six redis-servers made one cluster by `redis-cli --cluster create`; resolves with the masters' addresses once every slot is served. */
async function startCluster(group: ProcessGroup): Promise<string[]> {
  if (spawnSync('redis-cli', ['--version']).status !== 0) throw new Error('redis-cli is not installed (apt-get install -y redis-tools)');
  const addresses: string[] = [];
  for (let node = 0; node < MASTERS * 2; node++) {
    // The cluster bus gets a free port of its own: by default it is port + 10000, which may be taken or past 65535.
    const [port, busPort] = [await freePort(), await freePort()];
    const dir = join(group.logDir, `cluster-${port}`);
    mkdirSync(dir, { recursive: true });
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--cluster-enabled',
      'yes',
      '--cluster-port',
      String(busPort),
      '--dir',
      dir,
    ];
    await waitForPort(group.spawn(`cluster-${port}`, 'load', 'redis-server', args), port);
    addresses.push(`127.0.0.1:${port}`);
  }
  const created = spawnSync('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '1', '--cluster-yes'], { encoding: 'utf8' });
  if (created.status !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stderr || created.stdout}`);
  const [host, port] = addresses[0]!.split(':');
  for (let attempt = 0; ; attempt++) {
    const info = spawnSync('redis-cli', ['-h', host!, '-p', port!, 'cluster', 'info'], { encoding: 'utf8' }).stdout;
    if (info.includes('cluster_state:ok')) return addresses;
    if (attempt > 200) throw new Error(`the cluster did not come up:\n${info}`);
    await sleep(50);
  }
}

/** The cluster, a store on it (the harness seeds tokens through it) and a tokengate on it, started once. */
const clusters = new WeakMap<Bench, RedisStore>();

export const clusterMiss: Row = {
  id: 'cluster-miss',
  title: 'tokengate on a 3-master Redis Cluster, cache miss',
  tier: (bench) =>
    bench.shared('tokengate-cluster', async () => {
      const nodes = await startCluster(bench.group);
      const store = new RedisStore({
        connection: { topology: { kind: 'cluster', nodes, natMap: {}, scaleReads: 'master' } },
        keyPrefix: bench.keyPrefix,
        commandTimeoutMs: 5_000,
        connectTimeoutMs: 2_000,
        waitForReplicas: 0,
      });
      clusters.set(bench, store);
      bench.onStop(() => store.close());
      // The token every tier is checked and warmed up with, stored in this store too, once the
      // cluster client has read the slot map (until then a command fails instead of waiting).
      for (let attempt = 0; ; attempt++) {
        try {
          await store.ping();
          break;
        } catch (error) {
          if (attempt === 100) throw error;
          await sleep(100);
        }
      }
      await saveUserTokens(store, [bench.userToken]);
      return startTokengate(bench.group, {
        name: 'tokengate-cluster',
        placement: 'tier',
        config: { redisUrl: bench.redis.url, clusterNodes: nodes, keyPrefix: bench.keyPrefix, tokenTagKey: bench.tagKey, upstreamUrl: bench.upstream.url },
        nodeFlags: bench.settings.nodeFlags,
        profileDir: null,
      });
    }),
  async traffic(bench, _tier, windows) {
    const seeded = performance.now();
    const perWindow = Math.ceil(bench.settings.missTokens / windows);
    const next = rotation(await seedUserTokens(clusters.get(bench)!, bench.minter, perWindow * windows));
    progress(`seeded ${perWindow * windows} tokens in the cluster in ${((performance.now() - seeded) / 1000).toFixed(1)} s`);
    return {
      request: { method: 'GET', path: ME, setupRequest: (request) => ({ ...request, headers: { authorization: `Bearer ${next()}` } }) },
      requestsPerWindow: perWindow,
    };
  },
};
