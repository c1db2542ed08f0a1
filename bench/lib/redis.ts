import { spawnSync } from 'node:child_process';
import { freePort, waitForPort, type ProcessGroup, type Started } from './processes.js';

/**
 * A throwaway Redis for the run: its own port, no persistence, nothing else talking to it, so
 * `INFO commandstats` counts exactly what the processes under test sent.
 */
export async function startRedis(group: ProcessGroup): Promise<{ url: string; process: Started }> {
  if (spawnSync('redis-server', ['--version']).status !== 0)
    throw new Error('redis-server is not installed (apt-get install -y redis-server): the benchmark starts its own Redis');
  const port = await freePort();
  const started = group.spawn('redis', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']);
  await waitForPort(started, port);
  return { url: `redis://127.0.0.1:${port}`, process: started };
}

/** Commands Redis has executed so far, summed over every command except INFO itself. */
export async function commandsExecuted(redis: { info(section: 'commandstats'): Promise<string> }): Promise<number> {
  return parseCommandStats(await redis.info('commandstats'));
}

/** Sums `calls=` over the `cmdstat_*` lines of INFO commandstats, leaving out INFO. */
export function parseCommandStats(info: string): number {
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== 'info') calls += Number(match[2]);
  }
  return calls;
}
