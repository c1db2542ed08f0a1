import { spawnSync } from 'node:child_process';
import type { RedisDoor } from '../../src/store/backend.js';
import { RedisStore } from '../../src/store/redis.js';
import { freePort, waitForPort, type ProcessGroup, type Started } from './processes.js';

/** Commands Redis has executed so far (INFO commandstats), the INFO itself not counted. */
export async function commandsExecuted(door: Pick<RedisDoor, 'read'>): Promise<number> {
  const stats = await door.read<string>('info', 'commandstats');
  let calls = 0;
  for (const match of stats.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) if (match[1] !== 'info') calls += Number(match[2]);
  return calls;
}

/** A throwaway Redis for the run, on the load side: its own port, no persistence, nothing else talking to it. */
export async function startRedis(group: ProcessGroup): Promise<{ url: string; process: Started }> {
  if (spawnSync('redis-server', ['--version']).status !== 0)
    throw new Error('redis-server is not installed (apt-get install -y redis-server): the benchmark starts its own Redis');
  const port = await freePort();
  const started = group.spawn('redis', 'load', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']);
  await waitForPort(started, port);
  return { url: `redis://127.0.0.1:${port}`, process: started };
}

/** The store a run writes its tokens and applications to: the throwaway Redis at `url`, under the run's key prefix. */
export function benchStore(url: string, keyPrefix: string): RedisStore {
  return new RedisStore({
    connection: { topology: { kind: 'standalone', url } },
    keyPrefix,
    commandTimeoutMs: 5_000,
    connectTimeoutMs: 2_000,
    waitForReplicas: 0,
  });
}
