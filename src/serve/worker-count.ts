import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * How many workers `server.workers` means. `auto` is the CPUs this process may use: the CPUs it
 * may run on (affinity), capped by a container's CPU quota (cgroup v2 `cpu.max`, or v1's
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded up, at least 1. A container limited to 1.5
 * CPUs on a 32-core host gets 2 workers, not 32.
 */
export function workerCount(setting: number | 'auto', readFile: (path: string) => string = (path) => readFileSync(path, 'utf8')): number {
  if (setting !== 'auto') return setting;
  const quota = cgroupCpuQuota(readFile);
  const cpus = availableParallelism();
  return Math.max(1, quota === null ? cpus : Math.min(cpus, Math.ceil(quota)));
}

/** CPUs the cgroup allows, or null without a limit (or without cgroup files). */
export function cgroupCpuQuota(readFile: (path: string) => string): number | null {
  const v2 = attempt(() => readFile('/sys/fs/cgroup/cpu.max').trim().split(/\s+/));
  if (v2 !== null) return v2[0] === 'max' ? null : ratio(v2[0], v2[1]);
  const quota = attempt(() => readFile('/sys/fs/cgroup/cpu/cpu.cfs_quota_us').trim());
  const period = attempt(() => readFile('/sys/fs/cgroup/cpu/cpu.cfs_period_us').trim());
  return quota === null || period === null || quota === '-1' ? null : ratio(quota, period);
}

function ratio(quota: string | undefined, period: string | undefined): number | null {
  const value = Number(quota) / Number(period);
  return Number.isFinite(value) && value > 0 ? value : null;
}

function attempt<T>(read: () => T): T | null {
  try {
    return read();
  } catch {
    return null;
  }
}
