import { spawn, spawnSync } from 'node:child_process';
import { openSync, readFileSync, closeSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { childPids } from './proc.js';

/**
 * Starting and stopping the processes under test. On a machine with 2+ cores and `taskset`,
 * the load generator (this process) is pinned to CPU 0 and every server to the other CPUs, so
 * the load generator never steals cycles from what it measures; each figure then says what the
 * servers do with the remaining core(s). Without taskset (or BENCH_PIN=0) nothing is pinned and
 * the report says so.
 */

export interface Pinning {
  loadGeneratorCpus: string;
  serverCpus: string;
  /** The server CPUs as numbers (for /proc/stat). */
  serverCpuList: number[];
}

export function choosePinning(env: NodeJS.ProcessEnv = process.env): Pinning | null {
  const cpus = availableParallelism();
  if (env.BENCH_PIN === '0' || cpus < 2) return null;
  if (spawnSync('taskset', ['-V']).status !== 0) return null;
  const serverCpuList = Array.from({ length: cpus - 1 }, (_, index) => index + 1);
  return { loadGeneratorCpus: '0', serverCpus: cpus === 2 ? '1' : `1-${cpus - 1}`, serverCpuList };
}

/** Moves every thread of this process (autocannon runs here) onto the load generator's CPUs. */
export function pinThisProcess(pinning: Pinning): void {
  const result = spawnSync('taskset', ['-a', '-cp', pinning.loadGeneratorCpus, String(process.pid)]);
  if (result.status !== 0) throw new Error(`taskset could not pin the load generator: ${result.stderr}`);
}

export interface Started {
  readonly name: string;
  readonly pid: number;
  readonly logFile: string;
  /** How the process ended (`exited with 1`), or null while it runs. */
  exitStatus(): string | null;
  stop(): Promise<void>;
}

export class ProcessGroup {
  private readonly started: Started[] = [];

  constructor(
    private readonly logDir: string,
    private readonly pinning: Pinning | null,
  ) {}

  /** Spawns `command`, pinned to the server CPUs, with stdout and stderr in `<logDir>/<name>.log`. */
  spawn(name: string, command: string, args: string[], options: { stopSignal?: NodeJS.Signals; cwd?: string } = {}): Started {
    const logFile = join(this.logDir, `${name}.log`);
    const log = openSync(logFile, 'a');
    const [file, argv] = this.pinning === null ? [command, args] : ['taskset', ['-c', this.pinning.serverCpus, command, ...args]];
    // taskset execs the command in place, so the pid is the server's own.
    const child = spawn(file, argv, { stdio: ['ignore', log, log], cwd: options.cwd });
    closeSync(log);
    if (child.pid === undefined) throw new Error(`${name}: could not start ${command}`);
    let exitStatus: string | null = null;
    const exited = new Promise<void>((resolve) =>
      child.once('exit', (code, signal) => {
        exitStatus = `exited with ${signal ?? code}`;
        resolve();
      }),
    );
    const started: Started = {
      name,
      pid: child.pid,
      logFile,
      exitStatus: () => exitStatus,
      stop: async () => {
        if (exitStatus !== null) return;
        child.kill(options.stopSignal ?? 'SIGTERM');
        const forced = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(forced);
      },
    };
    this.started.push(started);
    return started;
  }

  /** Every process of the group still running, and their children (nginx's worker). */
  pids(): number[] {
    const running = this.started.filter((started) => started.exitStatus() === null).map((started) => started.pid);
    return [...running, ...running.flatMap((pid) => childPids(pid))];
  }

  /** Stops everything this group started, newest first. */
  async stopAll(): Promise<void> {
    for (const started of this.started.reverse()) await started.stop().catch(() => {});
    this.started.length = 0;
  }
}

/** Waits until `port` accepts TCP connections; fails with the log's tail when the process dies first. */
export async function waitForPort(started: Started, port: number, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const exited = started.exitStatus();
    if (exited !== null) throw new Error(`${started.name} ${exited} before listening:\n${logTail(started.logFile)}`);
    if (await accepts(port)) return;
    if (Date.now() > deadline) throw new Error(`${started.name} did not listen on ${port} within ${timeoutMs} ms:\n${logTail(started.logFile)}`);
    await sleep(50);
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export function logTail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

export { freePort } from '../../test/support/ports.js';
