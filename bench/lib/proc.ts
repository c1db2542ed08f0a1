import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

/**
 * Per-process CPU time and resident memory straight from /proc, so the figures are the
 * kernel's accounting of the process under test and nothing the process reports about itself.
 */

const CLOCK_TICKS_PER_SECOND = readClockTicks();

function readClockTicks(): number {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
}

/** The fields of /proc/<pid>/stat after the command name (which may itself contain spaces). */
function statFields(pid: number): string[] {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

/** User + system CPU time the process has used so far, in milliseconds (all its threads). */
export function cpuMilliseconds(pid: number): number {
  const fields = statFields(pid);
  // Fields 14 and 15 of stat (utime, stime); fields[0] here is field 3 (state).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND;
}

/** Total CPU milliseconds of several processes (nginx master + workers + the check service); one that has ended counts as nothing more. */
export function totalCpuMilliseconds(pids: readonly number[]): number {
  let total = 0;
  for (const pid of pids) {
    try {
      total += cpuMilliseconds(pid);
    } catch {
      // Ended meanwhile.
    }
  }
  return total;
}

/** Resident set size in bytes (VmRSS). */
export function residentBytes(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (match === null) throw new Error(`no VmRSS for process ${pid}`);
  return Number(match[1]) * 1024;
}

/** Direct children of a process (nginx's workers), found through each process's parent id. */
export function childPids(parent: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(statFields(Number(entry))[1]) === parent) children.push(Number(entry));
    } catch {
      // The process ended while the list was read.
    }
  }
  return children;
}
