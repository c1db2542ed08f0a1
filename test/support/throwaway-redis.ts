import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { freePort } from './ports.js';
import { waitUntilAnswering } from './redis-cluster.js';

const REDIS_SERVER = process.env.TOKENGATE_TEST_REDIS_SERVER ?? '/usr/bin/redis-server';

/**
 * A redis-server of the test's own, on a free port, without persistence: the test may kill it,
 * kill its clients and restart it without touching the shared Redis. Restarted, it is empty.
 */
export class ThrowawayRedis {
  private process: ChildProcess | null = null;

  private constructor(readonly port: number) {}

  static async start(): Promise<ThrowawayRedis> {
    const redis = await ThrowawayRedis.notStarted();
    await redis.restart();
    return redis;
  }

  /** One with its port chosen but not running yet: restart() starts it. */
  static async notStarted(): Promise<ThrowawayRedis> {
    return new ThrowawayRedis(await freePort());
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /**
   * Starts it (again, on the same port) and resolves once it answers PING, as `probeUrl` when
   * given (`extraArgs` may take PING away from the default user).
   */
  async restart(extraArgs: string[] = [], probeUrl = this.url): Promise<void> {
    if (this.process !== null) throw new Error('the throwaway redis-server is already running');
    this.process = spawn(REDIS_SERVER, ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extraArgs], {
      stdio: 'ignore',
    });
    await waitUntilAnswering(probeUrl, 5_000);
  }

  /** Kills it outright (no shutdown, no goodbye to clients) and waits until it is gone. */
  async kill(): Promise<void> {
    const running = this.process;
    if (running === null) return;
    this.process = null;
    if (running.exitCode === null && running.signalCode === null) {
      running.kill('SIGKILL');
      await once(running, 'exit');
    }
  }

  /** Freezes it (SIGSTOP): connections stay open but nothing is answered, a hung server. */
  pause(): void {
    this.process?.kill('SIGSTOP');
  }

  resume(): void {
    this.process?.kill('SIGCONT');
  }

  /** A plain client for commands the test sends itself (CLIENT KILL, CONFIG SET, DEL). */
  client(): Redis {
    return new Redis(this.url, { maxRetriesPerRequest: 1 });
  }
}
