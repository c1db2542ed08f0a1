/**
 * Where a deployment's shared state lives, as a room that keeps keys of its own sees it (rate
 * limit leases, DPoP replay marks, the store's own records): in this process alone (the memory
 * store of a single instance), or in Redis through its one door. A room builds its memory or
 * its Redis implementation from this, and never reaches for the concrete store or its client.
 */
export type Backend = MemoryBackend | RedisDoor;

export interface MemoryBackend {
  readonly driver: 'memory';
}

export type Argument = string | number;

/** A Lua script of a room. `numberOfKeys` absent: the caller passes the key count first (a script on a variable number of keys). */
export interface ScriptDefinition {
  readonly numberOfKeys?: number;
  readonly lua: string;
}

/** What a subscription to a channel tells its owner. */
export interface ChannelHandlers {
  onMessage(message: string): void;
  /** The subscription dropped: messages published from now on may not arrive until onReset. */
  onInterrupted(): void;
  /**
   * Subscribed again after onInterrupted, and the store answers commands again: messages of the
   * gap may have been missed. Not before the store answers, so an owner that drops what it holds
   * on hearing it does not drop what it could still vouch for.
   */
  onReset(): void;
}

/**
 * The one door to Redis: every command, script and message of every room goes through it, so
 * what each needs is done in one place:
 * - the deployment's key prefix (`key`);
 * - a command timeout, and every failure to reach Redis rejected as StoreUnavailableError
 *   (callers answer 503, never 401);
 * - a write confirmed by the replicas a failover could promote (`store.waitForReplicas`) before
 *   it resolves, so a promotion cannot lose what a caller was told was written;
 * - on a Cluster, a command that met a moved slot sent again once the slot map is read again.
 *
 * Which writes wait for replicas: all of them. A room with a write it could afford to lose in a
 * failover would still pay for the doubt in every guarantee it states (a quota exceeded by a
 * forgotten lease, a DPoP proof accepted twice because its mark was forgotten), so there is one
 * kind of write; a lone master (its replicas gone or promoted away) confirms at once.
 */
export interface RedisDoor {
  readonly driver: 'redis';
  /** A Redis Cluster: an atomic step (a command, a script) may touch one key only. */
  readonly cluster: boolean;
  /** `name` under the deployment's key prefix (keys and channels alike). */
  key(name: string): string;
  /**
   * Defines a room's script by name on every connection; `read` and `write` then send it like a
   * command (EVALSHA, and the whole script once when the server does not know it yet). The same
   * name with another script is a programming error.
   */
  defineScript(name: string, script: ScriptDefinition): void;
  /** A command or script that changes nothing (reads always go to the master). */
  read<T>(command: string, ...args: Argument[]): Promise<T>;
  /** A command or script that changes the one key it names first, confirmed as the door says above. */
  write<T>(command: string, ...args: Argument[]): Promise<T>;
  /** Publishes to every sidecar subscribed to `channel` (sharded pub/sub on a Cluster). */
  publish(channel: string, message: string): Promise<void>;
  /** Subscribes to `channel` on a connection of its own; resolves once subscribed, with the unsubscribe. */
  subscribe(channel: string, handlers: ChannelHandlers): Promise<() => Promise<void>>;
  /** Resolves when every connection answers. */
  ping(): Promise<void>;
  /** Every master answers (a Cluster is usable only when each of its masters is). */
  pingEveryMaster(): Promise<void>;
  close(): Promise<void>;
  /** The last connection error the client reported, for the message when Redis cannot be reached at start. */
  readonly lastConnectionError: Error | null;
}

export const MEMORY_BACKEND: MemoryBackend = Object.freeze({ driver: 'memory' });
