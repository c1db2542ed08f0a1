import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { nginxVersion } from './services.js';

/** What a result was measured on, recorded beside it. */
export interface Machine {
  cpus: number;
  cpuModel: string;
  node: string;
  nginx: string | null;
  redis: string;
  commit: string;
  pinning: string;
  loadAverageAtStart: string[];
}

export function describeMachine(pinning: string): Machine {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const run = (file: string, args: string[]) => {
    try {
      return execFileSync(file, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
    } catch {
      return 'unknown';
    }
  };
  return {
    cpus: cpus().length,
    cpuModel: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1] ?? 'unknown CPU',
    node: process.version,
    nginx: nginxVersion(),
    redis: /v=(\S+)/.exec(run('redis-server', ['--version']))?.[1] ?? 'unknown',
    commit: run('git', ['rev-parse', '--short', 'HEAD']),
    pinning,
    loadAverageAtStart: loadavg().map((value) => value.toFixed(2)),
  };
}
