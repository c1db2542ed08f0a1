import { once } from 'node:events';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { Argument, ChannelHandlers, RedisDoor, ScriptDefinition } from './backend.js';
import { ClassicFeedConnection, ShardFeedConnection, type FeedConnection } from './redis-feed.js';
import { ReplicaCounts, masterFor } from './redis-replicas.js';
import { clusterNodeOptions, connectAgainWhenEnded, createRedisClient, type RedisClient, type RedisConnection } from './redis-topology.js';
import { StoreUnavailableError } from './store.js';

/** A command by name, as the door sends them (the defined scripts included). */
type CommandSender = Record<string, (...args: Argument[]) => Promise<unknown>>;
type PipelineBuilder = Record<string, (...args: Argument[]) => unknown> & { exec(): Promise<Array<[Error | null, unknown]> | null> };

/** `store.lostReplicaWaitMs`'s default: the longest a lost replica stays promotable with Redis's defaults (Sentinel's). */
const LOST_REPLICA_WAIT_MS = 300_000;

export interface RedisDoorOptions {
  connection: RedisConnection;
  keyPrefix: string;
  commandTimeoutMs: number;
  connectTimeoutMs: number;
  /** Replicas that must confirm each write (WAIT) before the door resolves it; 0: none. */
  waitForReplicas: number;
  /** How long a replica that left its master is still waited for (ReplicaCounts); `store.lostReplicaWaitMs` by default. */
  lostReplicaWaitMs?: number;
}

/** The door to Redis of one tokengate process, over ioredis (./backend.ts says what it guarantees). */
export class IoredisDoor implements RedisDoor {
  readonly driver = 'redis' as const;
  readonly cluster: boolean;
  /** Reads, and writes when no replica must confirm them. */
  private readonly redis: RedisClient;
  /**
   * Writes followed by WAIT. A client waiting on WAIT is answered nothing else until its
   * replicas confirm, so they get connections of their own and reads never queue behind them.
   */
  private readonly writer: RedisClient;
  /** How many replicas each master's writes wait for; null when none are. */
  private readonly replicaCounts: ReplicaCounts | null;
  private readonly scripts = new Map<string, ScriptDefinition>();
  private readonly feeds = new Set<FeedConnection>();
  private lastError: Error | null = null;
  private closing = false;

  constructor(private readonly options: RedisDoorOptions) {
    this.redis = this.createClient();
    this.writer = options.waitForReplicas > 0 ? this.createClient() : this.redis;
    this.cluster = isCluster(this.redis);
    this.replicaCounts = options.waitForReplicas > 0 ? new ReplicaCounts(options.waitForReplicas, options.lostReplicaWaitMs ?? LOST_REPLICA_WAIT_MS) : null;
    // A connection made again may reach a master that is not the one last asked at that address:
    // a server promoted again (a failover back to it) has a new replication ID and no replica
    // yet, where the one it had as master before would be waited for until the sentinels made
    // it a replica again, failing every write meanwhile. So the next write asks first.
    const counts = this.replicaCounts;
    if (counts !== null && !isCluster(this.writer)) this.writer.on('ready', () => counts.forgetAddresses());
  }

  key(name: string): string {
    return `${this.options.keyPrefix}${name}`;
  }

  defineScript(name: string, script: ScriptDefinition): void {
    const defined = this.scripts.get(name);
    if (defined !== undefined) {
      if (defined.lua !== script.lua || defined.numberOfKeys !== script.numberOfKeys) throw new Error(`two scripts are defined as ${name}`);
      return;
    }
    this.scripts.set(name, script);
    for (const client of this.clients()) client.defineCommand(name, script);
  }

  get lastConnectionError(): Error | null {
    return this.lastError;
  }

  read<T>(command: string, ...args: Argument[]): Promise<T> {
    return this.run(
      () => this.send<T>(this.redis, command, args),
      (importing) => this.sendAsking<T>(importing.connection, command, args),
    );
  }

  /**
   * With replicas to wait for, the write goes out with WAIT on the same connection, and counts
   * only once the replicas its master could lose it to hold it (redis-replicas.ts says which). A
   * write applied on the master but not confirmed in time fails for its caller (503), like a
   * write that never arrived: the caller never relies on it.
   */
  write<T>(command: string, ...args: Argument[]): Promise<T> {
    const counts = this.replicaCounts;
    if (counts === null) return this.read<T>(command, ...args);
    return this.run(
      () => this.confirmedWrite<T>(counts, command, args),
      (importing) => this.confirmedWrite<T>(counts, command, args, importing),
      this.writer,
    );
  }

  /**
   * On a Cluster the channel is sharded: the message goes to the master of the channel's slot
   * alone, which every sidecar subscribes to (docs/store.md explains the choice).
   */
  async publish(channel: string, message: string): Promise<void> {
    const redis = this.redis;
    await this.run(
      () => (isCluster(redis) ? redis.spublish(channel, message) : redis.publish(channel, message)),
      (importing) => this.sendAsking(importing.connection, 'spublish', [channel, message]),
    );
  }

  async subscribe(channel: string, handlers: ChannelHandlers): Promise<() => Promise<void>> {
    const redis = this.redis;
    const connection: FeedConnection = isCluster(redis)
      ? new ShardFeedConnection(redis, channel, { ...clusterNodeOptions(this.options.connection), connectTimeout: this.options.connectTimeoutMs })
      : new ClassicFeedConnection(redis, channel);
    this.feeds.add(connection);
    // Interrupted from the moment the subscription drops. Back (onReset) once it is answered
    // again AND the store answers commands.
    let up = false;
    let attempt = 0;
    connection.onMessage = (message) => handlers.onMessage(message);
    connection.onDown = () => {
      if (!up) return;
      up = false;
      handlers.onInterrupted();
    };
    connection.onResubscribed = () => {
      const mine = ++attempt;
      void this.untilAnswering(() => mine === attempt && this.feeds.has(connection) && connection.subscribed).then((answering) => {
        if (!answering || up) return;
        up = true;
        handlers.onReset();
      });
    };
    try {
      await connection.start();
    } catch (error) {
      this.feeds.delete(connection);
      connection.close();
      throw new StoreUnavailableError(`redis: the subscription to ${channel} did not start: ${(error as Error).message}`, { cause: error });
    }
    up = true;
    return async () => {
      this.feeds.delete(connection);
      connection.close();
    };
  }

  async ping(): Promise<void> {
    await this.run(() => Promise.all(this.clients().map((client) => client.ping())), notRedirected);
  }

  async pingEveryMaster(): Promise<void> {
    const redis = this.redis;
    if (!isCluster(redis)) return this.ping();
    if (redis.status !== 'ready') throw new StoreUnavailableError('the cluster client is not connected');
    const masters = redis.nodes('master');
    if (masters.length === 0) throw new StoreUnavailableError('no cluster master is known');
    await this.run(() => Promise.all(masters.map((master) => master.ping())), notRedirected);
  }

  async close(): Promise<void> {
    this.closing = true;
    // Forgotten first, so their closing is not reported to their owners as an interruption.
    for (const feed of this.feeds) feed.close();
    this.feeds.clear();
    await Promise.all(this.clients().map((client) => client.quit().catch(() => client.disconnect())));
  }

  private clients(): RedisClient[] {
    return this.writer === this.redis ? [this.redis] : [this.redis, this.writer];
  }

  private createClient(): RedisClient {
    const client = createRedisClient(this.options.connection, this.connectionOptions(), {
      // A command for a node that is down fails at once (503) instead of being retried behind
      // the caller's back; a lost node, a redirect (run) and a timer every second make the
      // client re-read the slot map, so a promoted replica is used soon after its promotion.
      retryDelayOnFailover: 0,
      // No offline queue even before the first connection: no command timeout applies there
      // (ioredis sets it per node), so a command would wait without a bound, and one that a
      // caller gave up on would still run once the cluster is reached.
      enableOfflineQueue: false,
      retryDelayOnClusterDown: 0,
      retryDelayOnTryAgain: 0,
      slotsRefreshInterval: 1_000,
      slotsRefreshTimeout: this.options.commandTimeoutMs,
      enableAutoPipelining: true,
      clusterRetryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 2_000),
    });
    for (const [name, script] of this.scripts) client.defineCommand(name, script);
    // Errors surface on the commands that hit them; the client's own event would crash the
    // process. The last one is kept for the message when the store cannot be reached at start.
    client.on('error', (error: Error) => (this.lastError = error));
    if (isCluster(client)) {
      client.on('node error', (error: Error) => (this.lastError = error));
      client.on('-node', () => client.refreshSlotsCache());
    } else {
      connectAgainWhenEnded(client, () => this.closing);
    }
    // Until the first connection is up, commands wait for it in ioredis's offline queue, so a
    // door on one server or Sentinel is usable as soon as it is built. From then on a command
    // sent while disconnected fails at once: the gateway answers 503 now instead of after
    // commandTimeout, nothing piles up during an outage, and nothing is replayed on reconnect
    // (ioredis keeps a command that timed out in the offline queue and still sends it when Redis
    // returns, so a write whose caller was told it failed would be applied after all).
    client.once('ready', () => {
      client.options.enableOfflineQueue = false;
    });
    return client;
  }

  private connectionOptions(): RedisOptions {
    return {
      // Commands sent in the same tick go out in one round trip.
      enableAutoPipelining: true,
      commandTimeout: this.options.commandTimeoutMs,
      connectTimeout: this.options.connectTimeoutMs,
      // Keep retrying a lost connection for ever (recovery is automatic) but never let a command
      // wait longer than commandTimeout: the gateway answers 503 instead of hanging.
      maxRetriesPerRequest: 1,
      retryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 2_000),
      // A command written before the connection dropped has failed for its caller by then
      // (commandTimeout); re-sending it after the reconnect would apply it behind their back.
      autoResendUnfulfilledCommands: false,
      lazyConnect: false,
      connectionName: 'tokengate',
    };
  }

  /** Pings until the store answers (true) or `wanted` turns false (false). */
  private async untilAnswering(wanted: () => boolean): Promise<boolean> {
    for (let pause = 50; wanted(); pause = Math.min(pause * 2, 1_000)) {
      try {
        await this.pingEveryMaster();
        return wanted();
      } catch {
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    }
    return false;
  }

  /**
   * The write, then WAIT for the replicas its master had when last asked, then INFO replication
   * from the same master: the answer that decides. A replica that came into sync meanwhile may
   * have missed the write, so it is waited for too before the write counts.
   */
  private async confirmedWrite<T>(counts: ReplicaCounts, command: string, args: Argument[], importing?: ClusterNode): Promise<T> {
    const timeout = this.options.commandTimeoutMs;
    const key = this.firstKey(command, args);
    const master = importing ?? masterFor(this.writer, key);
    let required = master === null ? undefined : counts.required(master.address);
    if (master !== null && required === undefined) required = counts.observe(master.address, await master.connection.info('replication'));
    required ??= this.options.waitForReplicas;
    const pipeline = (importing === undefined ? this.writer.pipeline() : this.withScripts(importing.connection).pipeline()) as unknown as PipelineBuilder;
    if (importing !== undefined) pipeline.asking!();
    pipeline[command]!(...args);
    pipeline.wait!(required, timeout);
    pipeline.info!('replication');
    const results = await pipeline.exec();
    if (results === null) throw new Error('the write was discarded');
    if (importing !== undefined) results.shift();
    const [[writeError, value], [waitError, waited], [infoError, info]] = results as [[Error | null, T], [Error | null, number], [Error | null, string]];
    if (writeError !== null) throw writeError;
    if (waitError !== null) throw waitError;
    if (infoError !== null) throw infoError;
    // The master that answered, whichever the client sent it to.
    const answered = importing ?? masterFor(this.writer, key);
    const needed = counts.observe(answered?.address ?? '', info);
    let acknowledged = waited;
    if (acknowledged < needed && waited >= required && answered !== null) acknowledged = await answered.connection.wait(needed, timeout);
    if (acknowledged < needed) throw new Error(`the write was not confirmed by ${needed} replica(s) within ${timeout} ms`);
    return value;
  }

  /** The key a write acts on: the first, after the key count of a script that takes a variable number. */
  private firstKey(command: string, args: Argument[]): string | undefined {
    const script = this.scripts.get(command);
    const key = script !== undefined && script.numberOfKeys === undefined ? args[1] : args[0];
    return typeof key === 'string' ? key : undefined;
  }

  /** A command the importing master of a migrating slot must take: ASKING first, on the same connection, in one round trip. */
  private async sendAsking<T>(node: Redis, command: string, args: Argument[]): Promise<T> {
    const pipeline = this.withScripts(node).pipeline() as unknown as PipelineBuilder;
    pipeline.asking!();
    pipeline[command]!(...args);
    const results = await pipeline.exec();
    if (results === null) throw new Error('the command was discarded');
    const [error, value] = results[1]!;
    if (error !== null) throw error;
    return value as T;
  }

  /** A Cluster's connection to one node, with the scripts defined on it as on the Cluster client. */
  private withScripts(node: Redis): Redis {
    for (const [name, script] of this.scripts) if (typeof (node as unknown as CommandSender)[name] !== 'function') node.defineCommand(name, script);
    return node;
  }

  /**
   * The master named by an ASK answer (`ASK <slot> <host:port>`), as the client reaches it (its
   * NAT map applied), among the masters it is connected to.
   */
  private importingMaster(cluster: Cluster, answer: string): ClusterNode | null {
    const announced = answer.split(' ')[2];
    if (announced === undefined) return null;
    const mapped = (cluster as unknown as { natMapper(key: string): { host: string; port: number } }).natMapper(announced);
    const address = `${mapped.host}:${mapped.port}`;
    const connection = cluster.nodes('master').find((node) => `${node.options.host}:${node.options.port}` === address);
    return connection === undefined ? null : { address, connection };
  }

  private send<T>(client: RedisClient, command: string, args: Argument[]): Promise<T> {
    const sender = (client as unknown as CommandSender)[command];
    if (sender === undefined) throw new Error(`no Redis command or script is named ${command}`);
    return sender.apply(client, args) as Promise<T>;
  }

  /**
   * Every failure to reach Redis becomes StoreUnavailableError: callers answer 503, never 401.
   * On a Cluster, some answers say the command was not executed where it was sent, and it is
   * sent again (at most REDIRECTIONS_FOLLOWED times):
   * - MOVED (the slot has a new owner; or the old master, a replica now, refused a write): ioredis
   *   hands it back rather than follow it when the command went in a batch with others (an
   *   auto-pipelined batch, a write followed by WAIT) and not every command of the batch met it;
   *   sent again after the client has read the slot map again;
   * - a batch of reads that met MOVED, which ioredis re-sends whole and then refuses because its
   *   keys no longer share a master: each read is sent again on its own;
   * - ASK (the slot is migrating and the key already moved): sent to the importing master with
   *   ASKING before it (`asked`), with a confirmed write's replica wait on that master;
   * - the client is reconnecting (it refuses commands rather than queue them): sent again once it
   *   is ready, within the command timeout.
   */
  private async run<T>(command: () => Promise<T>, asked: (importing: ClusterNode) => Promise<T>, redis: RedisClient = this.redis): Promise<T> {
    let attempt = command;
    for (let redirections = 0; ; redirections += 1) {
      try {
        return await attempt();
      } catch (error) {
        const next = isCluster(redis) && redirections < REDIRECTIONS_FOLLOWED ? await this.sentAgain(redis, error, command, asked) : null;
        if (next === null) throw unavailable(error);
        attempt = next;
      }
    }
  }

  /** How to send again a command the Cluster did not execute where it was sent (see run), or null when the error says nothing of the kind. */
  private async sentAgain<T>(
    cluster: Cluster,
    error: unknown,
    command: () => Promise<T>,
    asked: (importing: ClusterNode) => Promise<T>,
  ): Promise<(() => Promise<T>) | null> {
    const message = (error as Error).message ?? '';
    if (message.startsWith('ASK ')) {
      const importing = this.importingMaster(cluster, message);
      return importing === null ? null : () => asked(importing);
    }
    if (message.startsWith('MOVED ') || message === BATCH_ACROSS_MASTERS) {
      await new Promise<void>((resolve) => cluster.refreshSlotsCache(() => resolve()));
      return command;
    }
    if (message.startsWith(CLIENT_NOT_READY) && (await this.untilReady(cluster))) return command;
    return null;
  }

  private async untilReady(cluster: Cluster): Promise<boolean> {
    if (cluster.status === 'ready') return true;
    return once(cluster, 'ready', { signal: AbortSignal.timeout(this.options.commandTimeoutMs) }).then(
      () => true,
      () => false,
    );
  }
}

/** Redirections a command follows before its caller is told the store is unavailable. */
const REDIRECTIONS_FOLLOWED = 3;
/** ioredis's refusal to re-send a batch whose keys a new slot map spreads over several masters. */
const BATCH_ACROSS_MASTERS = 'All keys in the pipeline should belong to the same slots allocation group';
/** ioredis's refusal of a command while the Cluster client reconnects (the door keeps no offline queue). */
const CLIENT_NOT_READY = "Cluster isn't ready";

/** A master of a Cluster, by the address the client reaches it at, and the client's connection to it. */
interface ClusterNode {
  address: string;
  connection: Redis;
}

/** For commands that name no key (PING): no slot of theirs can migrate. */
function notRedirected(): Promise<never> {
  return Promise.reject(new Error('redirected without a key'));
}

function unavailable(error: unknown): StoreUnavailableError {
  return error instanceof StoreUnavailableError ? error : new StoreUnavailableError(`redis: ${(error as Error).message}`, { cause: error });
}

function isCluster(client: RedisClient): client is Cluster {
  return (client as Cluster).isCluster === true;
}
