import { waitFor } from './redis-cluster.js';
import type { LocalRedisSentinel } from './redis-sentinel.js';
import { liveWorkers, residentBytes, type SoakSidecar } from './soak-deployment.js';
import type { SoakLedger } from './soak-ledger.js';
import { sleep } from './wait.js';

/**
 * What the chaos soak does to the deployment while its clients run: a Sentinel failover
 * (SENTINEL FAILOVER: the replica promoted, the old master turned into its replica) and a worker
 * killed (SIGKILL), each on a schedule, and the resident memory of every tokengate process
 * sampled throughout.
 */

/** Waits until `atMs` of the soak, or returns false when the soak ends first. */
async function until(ledger: SoakLedger, atMs: number, endMs: number): Promise<boolean> {
  if (atMs >= endMs) return false;
  while (ledger.now() < atMs) await sleep(Math.min(200, atMs - ledger.now()));
  return true;
}

/**
 * A failover every `everyMs`, the first at half of it, none in the last `quietMs` of `endMs`.
 * Each is timed: asked, promoted (every sentinel names the replica, which says it is master),
 * the old master in sync as its replica (the promoted master says `state=online`), healthy
 * again (the sentinels agree).
 */
export async function failOverRepeatedly(
  sentinel: LocalRedisSentinel,
  ledger: SoakLedger,
  schedule: { everyMs: number; endMs: number; quietMs: number },
): Promise<void> {
  for (let at = schedule.everyMs / 2; await until(ledger, at, schedule.endMs - schedule.quietMs); at += schedule.everyMs) {
    const master = await sentinel.currentMaster();
    const successor = sentinel.servers.find((server) => server !== master)!;
    const startedMs = ledger.now();
    await sentinel.failOver();
    await sentinel.waitForMaster(successor);
    const promotedMs = ledger.now();
    // The old master, turned into its replica by the sentinels, synced and reported in sync.
    await waitFor(
      'the old master to be in sync as a replica',
      async () => /^slave\d+:.*state=online/m.test(String(await successor.command('INFO', 'replication'))),
      60_000,
    );
    const replicaInSyncMs = ledger.now();
    await sentinel.waitUntilHealthy(successor, 60_000);
    ledger.failovers.push({ startedMs, promotedMs, replicaInSyncMs, healthyMs: ledger.now() });
  }
}

/** Kills a live worker every `everyMs` (the first at half of it), taking the sidecars in turn, and times its replacement. */
export async function killWorkersRepeatedly(
  sidecars: readonly SoakSidecar[],
  ledger: SoakLedger,
  schedule: { everyMs: number; endMs: number; quietMs: number },
): Promise<void> {
  let turn = 0;
  for (let at = schedule.everyMs / 2; await until(ledger, at, schedule.endMs - schedule.quietMs); at += schedule.everyMs) {
    const sidecar = sidecars[turn++ % sidecars.length]!;
    const workers = liveWorkers(sidecar);
    const pid = workers[Math.floor(Math.random() * workers.length)];
    if (pid === undefined) continue;
    process.kill(pid, 'SIGKILL');
    const kill = { sidecar: sidecar.name, pid, killedMs: ledger.now(), replacedAfterMs: null as number | null };
    ledger.kills.push(kill);
    while (liveWorkers(sidecar).length < 2 && ledger.now() < kill.killedMs + 60_000) await sleep(100);
    if (liveWorkers(sidecar).length === 2) kill.replacedAfterMs = Math.round(ledger.now() - kill.killedMs);
  }
}

export interface MemorySamples {
  label: string;
  pid: number;
  /** [ms into the soak, resident bytes] */
  samples: Array<[number, number]>;
}

/** Samples every tokengate process's resident memory every `everyMs` until `running()` turns false. */
export async function sampleMemory(sidecars: readonly SoakSidecar[], ledger: SoakLedger, running: () => boolean, everyMs = 5_000): Promise<MemorySamples[]> {
  const byPid = new Map<number, MemorySamples>();
  const sample = () => {
    for (const sidecar of sidecars) {
      const processes: Array<[string, number]> = [
        [`${sidecar.name} primary`, sidecar.serve.child.pid!],
        ...liveWorkers(sidecar).map((pid): [string, number] => [`${sidecar.name} worker`, pid]),
      ];
      for (const [label, pid] of processes) {
        const bytes = residentBytes(pid);
        if (bytes === null) continue;
        const entry = byPid.get(pid) ?? { label, pid, samples: [] };
        entry.samples.push([Math.round(ledger.now()), bytes]);
        byPid.set(pid, entry);
      }
    }
  };
  while (running()) {
    sample();
    for (let waited = 0; waited < everyMs && running(); waited += 200) await sleep(200);
  }
  sample();
  return [...byPid.values()];
}
