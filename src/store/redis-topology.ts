import { withoutPassword } from '../config/redact.js';
import { readFileSync } from 'node:fs';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { StoreConfig } from '../config/schema.js';

/**
 * Where the Redis store lives: one server (`store.url`), a master found through Redis Sentinel
 * (`store.sentinel`), or a Redis Cluster (`store.cluster`). ioredis speaks all three; this file
 * turns the config into its options, and names the topology in messages without secrets.
 */
export type RedisTopology =
  | { kind: 'standalone'; url: string }
  | { kind: 'sentinel'; sentinels: string[]; masterName: string; sentinelPassword: string }
  | { kind: 'cluster'; nodes: string[]; natMap: Record<string, string>; scaleReads: 'master' | 'slave' | 'all' };

export interface RedisConnection {
  topology: RedisTopology;
  /** ACL user and password of the servers with Sentinel or Cluster (a URL carries its own). */
  username?: string;
  password?: string;
  tls?: { enabled: boolean; caFile: string };
}

/** Either client: the store sends the same commands through both. */
export type RedisClient = Redis | Cluster;

export function redisConnection(config: StoreConfig): RedisConnection {
  const credentials = { username: config.username, password: config.password, tls: config.tls };
  if (config.cluster.nodes.length > 0) {
    const { nodes, natMap, scaleReads } = config.cluster;
    return { topology: { kind: 'cluster', nodes: [...nodes], natMap: { ...natMap }, scaleReads }, ...credentials };
  }
  if (config.sentinel.sentinels.length > 0) {
    const { sentinels, masterName, password } = config.sentinel;
    return { topology: { kind: 'sentinel', sentinels: [...sentinels], masterName, sentinelPassword: password }, ...credentials };
  }
  return { topology: { kind: 'standalone', url: config.url }, tls: config.tls };
}

/** Replicas a write must reach before it counts: `store.waitForReplicas`, or the topology's default. */
export function replicasToWaitFor(config: Pick<StoreConfig, 'waitForReplicas'>, topology: RedisTopology): number {
  return config.waitForReplicas ?? (topology.kind === 'standalone' ? 0 : 1);
}

/** `host:port` (or `[v6]:port`) split; the config check has made sure it parses. */
export function hostAndPort(address: string): { host: string; port: number } {
  const match = /^\[?([^\]]*?)\]?:(\d+)$/.exec(address);
  if (match === null) throw new Error(`expected host:port, got "${address}"`);
  return { host: match[1]!, port: Number(match[2]) };
}

/** What the topology is, for a message: its config key and its addresses, never a password. */
export function describeTopology(topology: RedisTopology): string {
  switch (topology.kind) {
    case 'standalone':
      return `Redis at ${withoutPassword(topology.url)} (store.url)`;
    case 'sentinel':
      return `the master "${topology.masterName}" of the sentinels ${topology.sentinels.join(', ')} (store.sentinel)`;
    case 'cluster':
      return `the Redis Cluster of ${topology.nodes.join(', ')} (store.cluster.nodes)`;
  }
}

/** What an operator checks when the topology does not answer. */
export function whatToCheck(topology: RedisTopology): string {
  switch (topology.kind) {
    case 'standalone':
      return 'Check that Redis runs and that this host reaches it, and the host, port and password in store.url.';
    case 'sentinel':
      return `Check that the sentinels run and this host reaches them and the master they name, that they monitor a master named "${topology.masterName}" (store.sentinel.masterName), and store.sentinel.password and store.password.`;
    case 'cluster':
      return 'Check that the cluster runs with every slot served and that this host reaches the addresses its nodes announce (store.cluster.natMap maps them otherwise), and store.password.';
  }
}

/**
 * A connection failure in words an operator acts on. ioredis reports some failures in its own
 * terms (retry limits, offline queues); those carry no information an operator could use, so
 * anything not recognised here is "no answer".
 */
export function plainCause(error: unknown): string {
  const { code, message } = (error ?? {}) as { code?: string; message?: string };
  const text = message ?? '';
  if (code === 'ECONNREFUSED' || /ECONNREFUSED/.test(text)) return 'connection refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || /ENOTFOUND|EAI_AGAIN/.test(text)) return 'host name not found';
  if (/^(WRONGPASS|ERR invalid password|ERR AUTH)/.test(text)) return 'the password was refused';
  if (/^NOAUTH/.test(text)) return 'a password is required';
  if (/^NOPERM/.test(text)) return 'the user lacks a permission';
  if (/All sentinels are unreachable/.test(text)) return 'no sentinel answered';
  if (/No master|is not monitored|master.*not found/i.test(text)) return 'the sentinels name no such master';
  if (/CLUSTERDOWN/.test(text)) return 'the cluster is down (not every slot is served)';
  if (/None of startup nodes|Failed to refresh slots cache/.test(text)) return 'no cluster node answered';
  if (/ECONNRESET|EPIPE/.test(text) || code === 'ECONNRESET') return 'the connection was reset';
  if (/certificate|SSL|TLS/i.test(text)) return `TLS failed (${text})`;
  return 'no answer in time';
}

/**
 * A client for the topology with `options` on every connection to a data node. For a Cluster,
 * `clusterOptions` tune how it follows the cluster's changes.
 */
export function createRedisClient(connection: RedisConnection, options: RedisOptions, clusterOptions: ClusterOptions = {}): RedisClient {
  const tls = tlsOptions(connection);
  const { topology } = connection;
  const auth = { username: connection.username || undefined, password: connection.password || undefined };
  switch (topology.kind) {
    case 'standalone':
      return new Redis(topology.url, { ...options, ...(tls === undefined ? {} : { tls }) });
    case 'sentinel':
      return new Redis({
        ...options,
        ...auth,
        sentinels: topology.sentinels.map(hostAndPort),
        name: topology.masterName,
        sentinelPassword: topology.sentinelPassword || undefined,
        // A sentinel that accepts connections but answers nothing (frozen, or behind a network
        // that drops its replies) would hold up every connection for as long: the next one is
        // asked instead.
        sentinelCommandTimeout: options.commandTimeout,
        // A failover announced by the sentinels moves every connection to the new master at
        // once, even when the old one is still reachable (a partition, a manual failover).
        failoverDetector: true,
        ...(tls === undefined ? {} : { tls, sentinelTLS: tls, enableTLSForSentinelMode: true }),
      });
    case 'cluster':
      return new Cluster(topology.nodes.map(hostAndPort), {
        ...clusterOptions,
        scaleReads: topology.scaleReads,
        natMap: Object.fromEntries(Object.entries(topology.natMap).map(([announced, reached]) => [announced, hostAndPort(reached)])),
        redisOptions: { ...options, ...auth, ...(tls === undefined ? {} : { tls }) },
      });
  }
}

/** How long a connection ioredis ended by itself waits before it is made again. */
const CONNECT_AGAIN_AFTER_MS = 200;

/**
 * Makes `client` (one server or Sentinel) connect again whenever it ends while `closed()` is
 * false. ioredis gives a Sentinel connection up for good ('end') when a failover is announced
 * while it is asking the sentinels where the master is (the announcement stops the connecting
 * in progress), and nothing but closing the store may end its connections.
 */
export function connectAgainWhenEnded(client: Redis, closed: () => boolean): void {
  client.on('end', () => {
    setTimeout(() => {
      if (!closed() && client.status === 'end') client.connect().catch(() => {});
    }, CONNECT_AGAIN_AFTER_MS);
  });
}

/** Node options for a connection of our own to one cluster node (the revocation feed's). */
export function clusterNodeOptions(connection: RedisConnection): RedisOptions {
  const tls = tlsOptions(connection);
  return { username: connection.username || undefined, password: connection.password || undefined, ...(tls === undefined ? {} : { tls }) };
}

function tlsOptions(connection: RedisConnection): { ca?: Buffer } | undefined {
  const urlAsksForTls = connection.topology.kind === 'standalone' && connection.topology.url.startsWith('rediss:');
  if (!connection.tls?.enabled && !urlAsksForTls) return undefined;
  return connection.tls?.caFile ? { ca: readFileSync(connection.tls.caFile) } : {};
}
