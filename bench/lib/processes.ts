import { spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { childPids } from './proc.js';

/**
 * Starting and stopping the processes of a run, each where it belongs. With 2+ CPUs and a
 * working `taskset`, the load side (this process, which is the load generator, the upstream and
 * Redis) runs on CPU 0 and the tier under test alone on CPU 1, so a tier's CPU figures are its
 * own and the load side never takes its cycles. Without, nothing is pinned and the report says so.
 */

/** Where a process runs: the load side's CPU, the tier-under-test CPU, or wherever the kernel puts it. */
export type Placement = 'load' | 'tier' | 'anywhere';

export interface Pinning {
  loadCpu: number;
  tierCpu: number;
}

export function choosePinning(): Pinning | null {
  if (availableParallelism() < 2) return null;
  // taskset may exist yet be refused (a container without CAP_SYS_NICE over its CPUs).
  if (spawnSync('taskset', ['-c', '1', 'true']).status !== 0) return null;
  return { loadCpu: 0, tierCpu: 1 };
}

/** Moves every thread of this process (autocannon runs here) onto the load side's CPU. */
export function pinThisProcess(pinning: Pinning): void {
  const result = spawnSync('taskset', ['-a', '-cp', String(pinning.loadCpu), String(process.pid)]);
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
    readonly logDir: string,
    private readonly pinning: Pinning | null,
  ) {}

  /** Spawns `command` where `placement` says, with stdout and stderr in `<logDir>/<name>.log`. */
  spawn(name: string, placement: Placement, command: string, args: string[], stopSignal: NodeJS.Signals = 'SIGTERM'): Started {
    const logFile = join(this.logDir, `${name}.log`);
    const log = openSync(logFile, 'a');
    const cpu = this.pinning === null || placement === 'anywhere' ? null : placement === 'load' ? this.pinning.loadCpu : this.pinning.tierCpu;
    // taskset execs the command in place, so the pid is the server's own.
    const child =
      cpu === null
        ? spawn(command, args, { stdio: ['ignore', log, log] })
        : spawn('taskset', ['-c', String(cpu), command, ...args], { stdio: ['ignore', log, log] });
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
        child.kill(stopSignal);
        const forced = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(forced);
      },
    };
    this.started.push(started);
    return started;
  }

  /** Stops everything this group started, newest first. */
  async stopAll(): Promise<void> {
    for (const started of this.started.reverse()) await started.stop().catch(() => {});
    this.started.length = 0;
  }
}

/** A process and its children (nginx's workers, tokengate's cluster workers): whose CPU a tier spends. */
export const withChildren = (pid: number): number[] => [pid, ...childPids(pid)];

/** A loopback port nothing listens on right now, for a server that takes its port on the command line. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
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
