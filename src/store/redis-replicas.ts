import type { Cluster, Redis } from 'ioredis';
import { slotOf } from './redis-feed.js';
import type { RedisClient } from './redis-topology.js';

/**
 * How many replicas a write waits for, master by master: `store.waitForReplicas`, or fewer when
 * the master has fewer that could ever be promoted. A master is known by its replication ID
 * (INFO replication `master_replid`), which a promotion or a restart replaces: a promoted
 * replica starts with no replica of its own, and its writes go on at once.
 *
 * A replica counts from the moment the master reports it in sync (`state=online`) until it has
 * been gone `lostReplicaWaitMs`: one that left (a partition, a stopped link) may still be
 * promoted for a while by Redis Cluster or the sentinels without the writes it missed, and the
 * master it left may still be master on the far side of a partition. So losing a replica stops
 * writes on that master for that long, unless the replica comes back; a replica that was never
 * in sync (still in its first full sync) is not waited for: the sync carries every write made
 * before it ends.
 */
export class ReplicaCounts {
  /** The replicas each master reported in sync, and when last. */
  private readonly seen = new Map<string, Map<string, number>>();
  /** The replication ID each master address had when last asked. */
  private readonly replidOf = new Map<string, string>();

  constructor(
    private readonly configured: number,
    private readonly lostReplicaWaitMs: number,
  ) {}

  /** Replicas to wait for on the master at `address`; undefined when not known yet. */
  required(address: string, now = Date.now()): number | undefined {
    const replid = this.replidOf.get(address);
    return replid === undefined ? undefined : this.requiredOf(replid, now);
  }

  /** Takes in an INFO replication answer of the master at `address`; what a write there needs now. */
  observe(address: string, info: string, now = Date.now()): number {
    const report = parseReplication(info);
    if (report === null) return this.configured;
    this.replidOf.set(address, report.replid);
    let replicas = this.seen.get(report.replid);
    if (replicas === undefined) this.seen.set(report.replid, (replicas = new Map()));
    for (const replica of report.inSync) replicas.set(replica, now);
    this.forgetOld(now);
    return this.requiredOf(report.replid, now);
  }

  /**
   * Forgets which master each address had: the next write there asks it again. What each
   * master's replicas were is kept, so a master found again with the same replication ID
   * still waits for a replica it lost.
   */
  forgetAddresses(): void {
    this.replidOf.clear();
  }

  private requiredOf(replid: string, now: number): number {
    let counted = 0;
    for (const lastSeen of this.seen.get(replid)?.values() ?? []) if (now - lastSeen <= this.lostReplicaWaitMs) counted += 1;
    return Math.min(this.configured, counted);
  }

  /** Replicas gone for good, and masters no address has any more (promoted away, restarted). */
  private forgetOld(now: number): void {
    const current = new Set(this.replidOf.values());
    for (const [replid, replicas] of this.seen) {
      for (const [replica, lastSeen] of replicas) if (now - lastSeen > this.lostReplicaWaitMs) replicas.delete(replica);
      if (replicas.size === 0 && !current.has(replid)) this.seen.delete(replid);
    }
  }
}

export interface ReplicationReport {
  replid: string;
  /** `ip:port` of every replica the master reports in sync. */
  inSync: string[];
}

/** A master's INFO replication, or null when it does not speak as a master (a replica now, an error). */
export function parseReplication(info: string): ReplicationReport | null {
  let role = '';
  let replid = '';
  const inSync: string[] = [];
  for (const line of info.split('\n')) {
    const [name, value = ''] = line.trim().split(':', 2) as [string, string?];
    if (name === 'role') role = value;
    else if (name === 'master_replid') replid = value;
    else if (/^slave\d+$/.test(name)) {
      const fields = new Map(
        line
          .trim()
          .slice(name.length + 1)
          .split(',')
          .map((pair) => pair.split('=', 2) as [string, string]),
      );
      if (fields.get('state') === 'online') inSync.push(`${fields.get('ip')}:${fields.get('port')}`);
    }
  }
  return role === 'master' && replid !== '' ? { replid, inSync } : null;
}

/**
 * The master a write of `key` goes to, by address, and its connection: on a Cluster the slot's
 * master in the client's slot map; otherwise the one server the client is connected to.
 */
export function masterFor(client: RedisClient, key: string | undefined): { address: string; connection: Redis } | null {
  if ((client as Cluster).isCluster !== true) {
    const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
    return stream?.remotePort === undefined ? null : { address: `${stream.remoteAddress}:${stream.remotePort}`, connection: client as Redis };
  }
  const cluster = client as Cluster;
  if (key === undefined || cluster.status !== 'ready') return null;
  const address = cluster.slots[slotOf(key)]?.[0];
  if (address === undefined) return null;
  const connection = cluster.nodes('master').find((node) => `${node.options.host}:${node.options.port}` === address);
  return connection === undefined ? null : { address, connection };
}
