import { Redis, type Cluster, type RedisOptions } from 'ioredis';
import { connectAgainWhenEnded, hostAndPort } from './redis-topology.js';

/**
 * The connection that carries revocation messages to one sidecar. A subscribed connection can
 * send no other command, so it is a connection of its own. It reports when its subscription
 * drops and when it is answered again, so the store can tell the cache what it may have missed.
 */
export interface FeedConnection {
  onMessage: (message: string) => void;
  /** The subscription dropped: messages published from now on may not arrive. */
  onDown: () => void;
  /** After a drop, the subscription is answered again: from now on nothing is missed. */
  onResubscribed: () => void;
  /** Whether the subscription is answered and its connection up right now. */
  readonly subscribed: boolean;
  /** Resolves once the first subscription is answered, however long that takes; rejects if closed first. */
  start(): Promise<void>;
  close(): void;
}

const noop = () => {};

/**
 * Classic pub/sub on one server or a Sentinel master: a duplicate of the command client, which
 * follows the master the same way. It waits for its connection however long that takes
 * (offline queue, no timeout, and a SUBSCRIBE cut off by a drop is sent again).
 */
export class ClassicFeedConnection implements FeedConnection {
  onMessage: (message: string) => void = noop;
  onDown: () => void = noop;
  onResubscribed: () => void = noop;
  private readonly subscriber: Redis;
  private established = false;
  private interrupted = false;
  private closed = false;

  constructor(
    client: Redis,
    private readonly channel: string,
  ) {
    this.subscriber = client.duplicate({
      enableAutoPipelining: false,
      enableOfflineQueue: true,
      autoResendUnfulfilledCommands: true,
      commandTimeout: undefined,
      maxRetriesPerRequest: null,
      connectionName: 'tokengate-revocations',
    });
    this.subscriber.on('error', noop);
    connectAgainWhenEnded(this.subscriber, () => this.closed);
    // Until the first SUBSCRIBE is answered the feed has not started, so a failed connection
    // attempt is no interruption: the caller treats the feed as down until start() resolves.
    this.subscriber.on('close', () => {
      if (!this.established || this.interrupted || this.closed) return;
      this.interrupted = true;
      this.onDown();
    });
    // ioredis re-subscribes by itself after a reconnect, but says 'ready' before that SUBSCRIBE
    // is answered; the feed is back once ours is.
    this.subscriber.on('ready', () => {
      if (!this.interrupted) return;
      this.subscriber.subscribe(this.channel).then(
        () => {
          if (!this.interrupted || this.subscriber.status !== 'ready' || this.closed) return;
          this.interrupted = false;
          this.onResubscribed();
        },
        // Dropped again: 'close' keeps the feed interrupted and the next 'ready' tries again.
        noop,
      );
    });
    this.subscriber.on('message', (received: string, message: string) => {
      if (received === this.channel) this.onMessage(message);
    });
  }

  get subscribed(): boolean {
    return this.established && !this.interrupted && !this.closed && this.subscriber.status === 'ready';
  }

  async start(): Promise<void> {
    await this.subscriber.subscribe(this.channel);
    this.established = true;
  }

  /**
   * Disconnects at once: a subscriber has nothing to finish, and QUIT would wait for ever behind
   * a SUBSCRIBE queued while Redis was unreachable (its queue has no retry limit).
   */
  close(): void {
    this.closed = true;
    this.subscriber.disconnect();
  }
}

/**
 * Sharded pub/sub on a Cluster: one connection to the master that serves the channel's slot,
 * the only node an SPUBLISH reaches. When that connection ends (the master failed, lost the
 * slot and dropped its subscribers, or the slot map names another master), the slot map is read
 * again and the new master subscribed to. ioredis's own cluster subscriber re-subscribes without saying when it has, which the cache
 * needs to know, so the connection is kept here.
 */
export class ShardFeedConnection implements FeedConnection {
  onMessage: (message: string) => void = noop;
  onDown: () => void = noop;
  onResubscribed: () => void = noop;
  private connection: Redis | null = null;
  private up = false;
  private established = false;
  private closed = false;
  private retry: NodeJS.Timeout | null = null;
  private failures = 0;
  private started: { resolve(): void; reject(error: Error): void } | null = null;
  /** The node the connection is to (`host:port` as in the slot map). */
  private node: string | null = null;

  constructor(
    private readonly cluster: Cluster,
    private readonly channel: string,
    private readonly nodeOptions: RedisOptions,
  ) {
    cluster.on('refresh', this.followSlot);
  }

  /**
   * Each time the client reads the slot map again: a channel served by another master now (a
   * failover this node did not see, cut off from the cluster) means messages go elsewhere.
   */
  private readonly followSlot = () => {
    const master = this.masterOfChannel();
    if (this.connection !== null && this.node !== null && master !== null && master !== this.node) this.connection.disconnect();
  };

  get subscribed(): boolean {
    return this.up && !this.closed;
  }

  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.started = { resolve, reject };
      this.connect();
    });
  }

  close(): void {
    this.closed = true;
    this.cluster.off('refresh', this.followSlot);
    if (this.retry !== null) clearTimeout(this.retry);
    this.connection?.disconnect();
    this.connection = null;
    this.started?.reject(new Error('the store was closed'));
    this.started = null;
  }

  private connect(): void {
    if (this.closed) return;
    const master = this.masterOfChannel();
    if (master === null) return this.again();
    const connection = new Redis({
      ...this.nodeOptions,
      ...hostAndPort(master),
      connectionName: 'tokengate-revocations',
      // No reconnection to this node: the next attempt asks the slot map where the channel is.
      retryStrategy: () => null,
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      lazyConnect: true,
    });
    this.connection = connection;
    this.node = master;
    connection.on('error', (error: Error) => {
      // The node dropped this subscription without being asked (its slot moved): ioredis then
      // finds a reply no command waits for. Start again from the slot map.
      if (/Command queue state error/.test(error.message)) connection.disconnect();
    });
    // SSUBSCRIBE sent to a node that no longer serves the slot: ioredis reports MOVED this way.
    connection.on('moved', () => connection.disconnect());
    connection.on('smessage', (received: string, message: string) => {
      if (received === this.channel) this.onMessage(message);
    });
    connection.once('end', () => {
      if (this.connection !== connection) return;
      this.connection = null;
      if (this.up) {
        this.up = false;
        this.onDown();
      }
      this.again();
    });
    connection
      .connect()
      .then(() => connection.ssubscribe(this.channel))
      .then(
        () => {
          if (this.connection !== connection || this.closed) return;
          this.failures = 0;
          this.up = true;
          if (!this.established) {
            this.established = true;
            this.started?.resolve();
            this.started = null;
          } else this.onResubscribed();
        },
        () => connection.disconnect(),
      );
  }

  /** The next attempt, after the slot map is read again, backing off up to a second. */
  private again(): void {
    if (this.closed || this.retry !== null) return;
    const pause = Math.min(50 * 2 ** this.failures, 1_000);
    this.failures += 1;
    this.retry = setTimeout(() => {
      this.retry = null;
      if (this.closed) return;
      if (this.cluster.status !== 'ready') return this.again();
      this.cluster.refreshSlotsCache(() => this.connect());
    }, pause);
  }

  private masterOfChannel(): string | null {
    const slot = slotOf(this.channel);
    return this.cluster.status === 'ready' ? (this.cluster.slots[slot]?.[0] ?? null) : null;
  }
}

/** The Cluster slot of a key or shard channel (CRC16/XMODEM of its hash tag or whole name, mod 16384). */
export function slotOf(key: string): number {
  const open = key.indexOf('{');
  let tagged = key;
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) tagged = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(tagged)) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16_384;
}
