import { Redis, type RedisOptions } from 'ioredis';
import type {
  AccessTokenRecord,
  ApplicationRecord,
  AuthorizationCodeRecord,
  Consumed,
  RefreshTokenRecord,
  RevocationEvent,
  RevocationFeed,
  SessionRecord,
  Store,
  UserRecord,
} from './store.js';
import { StoreUnavailableError } from './store.js';

/**
 * Key layout (every key under `keyPrefix`):
 *   app:<client_id>          JSON ApplicationRecord          apps   SET of client ids
 *   user:<id>                JSON UserRecord                 user-email:<email> -> id
 *   code:<digest>            HASH r=JSON used=1 once used, TTL  (single use, replay visible)
 *   at:<digest>              JSON AccessTokenRecord, TTL
 *   rt:<digest>              HASH r=JSON used=1 once used, TTL  (rotation, reuse visible)
 *   idx:user|client|family:<id>  ZSET of "at:<digest>"/"rt:<digest>" scored by expiry, TTL = last expiry
 *   counter:<name>, secret:<name>, session:<digest>
 *   channel revocations      RevocationEvent JSON
 * Scripts touch keys they compute from the index, so they need a standalone or Sentinel Redis
 * (not Cluster).
 */

const SAVE_INDEXED = `
-- KEYS[1] record key, KEYS[2..] index keys; ARGV: member, expiresAt (ms), now (ms), kind ('string'|'hash'), payload
local ttl = tonumber(ARGV[2]) - tonumber(ARGV[3])
if ttl <= 0 then return 0 end
if ARGV[4] == 'hash' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'r', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('SET', KEYS[1], ARGV[5], 'PX', ttl)
end
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[2], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[3])
  local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
return 1
`;

const CONSUME = `
-- KEYS[1] single-use hash; returns {record, 1 if this call is the first use}
local record = redis.call('HGET', KEYS[1], 'r')
if not record then return nil end
return {record, redis.call('HSETNX', KEYS[1], 'used', '1')}
`;

const REVOKE = `
-- KEYS[1] index key or '' ; ARGV: prefix, channel, now, members... (used when KEYS[1] is '')
local members
if KEYS[1] ~= '' then
  members = redis.call('ZRANGE', KEYS[1], 0, -1)
  redis.call('DEL', KEYS[1])
else
  members = {}
  for i = 4, #ARGV do members[#members + 1] = ARGV[i] end
end
local removed = 0
local access = {}
for _, member in ipairs(members) do
  removed = removed + redis.call('DEL', ARGV[1] .. member)
  if string.sub(member, 1, 3) == 'at:' then access[#access + 1] = string.sub(member, 4) end
end
if #access > 0 then
  redis.call('PUBLISH', ARGV[2], '{"accessTokens":' .. cjson.encode(access) .. ',"publishedAt":' .. ARGV[3] .. '}')
end
return removed
`;

const DECREMENT_LIVE = `
-- KEYS[1] counter; a plain DECR would recreate an expired counter without a TTL
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECR', KEYS[1]) end
return 0
`;

interface ScriptCommands {
  saveIndexed(keyCount: number, ...args: Array<string | number>): Promise<number>;
  consume(key: string): Promise<[string, number] | null>;
  revoke(indexKey: string, prefix: string, channel: string, now: number, ...members: string[]): Promise<number>;
  decrementLive(key: string): Promise<number>;
}

export interface RedisStoreOptions {
  url: string;
  keyPrefix: string;
  commandTimeoutMs: number;
  connectTimeoutMs: number;
}

export class RedisStore implements Store {
  readonly driver = 'redis' as const;
  private readonly redis: Redis & ScriptCommands;
  private readonly prefix: string;
  private readonly channel: string;
  private readonly subscribers = new Set<Redis>();

  constructor(private readonly options: RedisStoreOptions) {
    this.prefix = options.keyPrefix;
    this.channel = `${options.keyPrefix}revocations`;
    this.redis = new Redis(options.url, this.connectionOptions()) as Redis & ScriptCommands;
    this.redis.defineCommand('saveIndexed', { lua: SAVE_INDEXED });
    this.redis.defineCommand('consume', { numberOfKeys: 1, lua: CONSUME });
    this.redis.defineCommand('revoke', { numberOfKeys: 1, lua: REVOKE });
    this.redis.defineCommand('decrementLive', { numberOfKeys: 1, lua: DECREMENT_LIVE });
    // Errors surface on the commands that hit them; the client's own event would crash the process.
    this.redis.on('error', () => {});
    // Until the first connection is up, commands wait for it in ioredis's offline queue, so a
    // store is usable as soon as it is built. From then on a command sent while disconnected
    // fails at once: the gateway answers 503 now instead of after commandTimeout, nothing piles
    // up during an outage, and nothing is replayed on reconnect (ioredis keeps a command that
    // timed out in the offline queue and still sends it when Redis returns, so a write whose
    // caller was told it failed would be applied after all).
    this.redis.once('ready', () => {
      this.redis.options.enableOfflineQueue = false;
    });
  }

  private connectionOptions(): RedisOptions {
    return {
      // Commands a miss sends in the same tick go out in one round trip.
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
    };
  }

  /** The underlying client, for health checks and tests. */
  get client(): Redis {
    return this.redis;
  }

  async ping(): Promise<void> {
    await this.run(this.redis.ping());
  }

  async close(): Promise<void> {
    // Forgotten first, so their closing is not reported to the feeds as an interruption.
    for (const subscriber of this.subscribers) closeSubscriber(subscriber);
    this.subscribers.clear();
    await this.redis.quit().catch(() => this.redis.disconnect());
  }

  async putApplication(app: ApplicationRecord): Promise<void> {
    await this.run(this.redis.multi().set(this.key('app', app.clientId), JSON.stringify(app)).sadd(this.key('apps'), app.clientId).exec());
  }

  async getApplication(clientId: string): Promise<ApplicationRecord | null> {
    return parse<ApplicationRecord>(await this.run(this.redis.get(this.key('app', clientId))));
  }

  async listApplications(): Promise<ApplicationRecord[]> {
    const ids = await this.run(this.redis.smembers(this.key('apps')));
    if (ids.length === 0) return [];
    const values = await this.run(this.redis.mget(ids.map((id) => this.key('app', id))));
    return values.map((value) => parse<ApplicationRecord>(value)).filter((app): app is ApplicationRecord => app !== null);
  }

  async deleteApplication(clientId: string): Promise<boolean> {
    const [deleted] = await this.run(Promise.all([this.redis.del(this.key('app', clientId)), this.redis.srem(this.key('apps'), clientId)]));
    await this.revokeClientTokens(clientId);
    return deleted === 1;
  }

  async createUser(user: UserRecord): Promise<boolean> {
    const claimed = await this.run(this.redis.set(this.key('user-email', user.email), user.id, 'NX'));
    if (claimed !== 'OK') return false;
    const created = await this.run(this.redis.set(this.key('user', user.id), JSON.stringify(user), 'NX'));
    if (created !== 'OK') {
      await this.run(this.redis.del(this.key('user-email', user.email)));
      return false;
    }
    await this.run(this.redis.sadd(this.key('users'), user.id));
    return true;
  }

  async getUser(id: string): Promise<UserRecord | null> {
    return parse<UserRecord>(await this.run(this.redis.get(this.key('user', id))));
  }

  async findUserByEmail(email: string): Promise<UserRecord | null> {
    const id = await this.run(this.redis.get(this.key('user-email', email)));
    return id === null ? null : this.getUser(id);
  }

  async listUsers(): Promise<UserRecord[]> {
    const ids = await this.run(this.redis.smembers(this.key('users')));
    if (ids.length === 0) return [];
    const values = await this.run(this.redis.mget(ids.map((id) => this.key('user', id))));
    return values.map((value) => parse<UserRecord>(value)).filter((user): user is UserRecord => user !== null);
  }

  async deleteUser(id: string): Promise<boolean> {
    const user = await this.getUser(id);
    if (user === null) return false;
    await this.run(this.redis.multi().del(this.key('user', id)).del(this.key('user-email', user.email)).srem(this.key('users'), id).exec());
    await this.revokeUserTokens(id);
    return true;
  }

  async saveAuthorizationCode(digest: string, record: AuthorizationCodeRecord): Promise<void> {
    await this.saveIndexed(this.key('code', digest), [], '', record.expiresAt, 'hash', record);
  }

  async consumeAuthorizationCode(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null> {
    return consumed<AuthorizationCodeRecord>(await this.run(this.redis.consume(this.key('code', digest))));
  }

  async saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void> {
    await this.saveIndexed(this.key('at', digest), this.indexKeys(record), `at:${digest}`, record.expiresAt, 'string', record);
  }

  async getAccessToken(digest: string): Promise<AccessTokenRecord | null> {
    return parse<AccessTokenRecord>(await this.run(this.redis.get(this.key('at', digest))));
  }

  async saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void> {
    await this.saveIndexed(this.key('rt', digest), this.indexKeys(record), `rt:${digest}`, record.expiresAt, 'hash', record);
  }

  async getRefreshToken(digest: string): Promise<RefreshTokenRecord | null> {
    const [record, used] = await this.run(this.redis.hmget(this.key('rt', digest), 'r', 'used'));
    return used === '1' ? null : parse<RefreshTokenRecord>(record ?? null);
  }

  async consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null> {
    return consumed<RefreshTokenRecord>(await this.run(this.redis.consume(this.key('rt', digest))));
  }

  async revokeAccessToken(digest: string): Promise<number> {
    return this.run(this.redis.revoke('', this.prefix, this.channel, Date.now(), `at:${digest}`));
  }

  async revokeRefreshToken(digest: string): Promise<number> {
    return this.run(this.redis.revoke('', this.prefix, this.channel, Date.now(), `rt:${digest}`));
  }

  async revokeFamily(familyId: string): Promise<number> {
    return this.run(this.redis.revoke(this.key('idx:family', familyId), this.prefix, this.channel, Date.now()));
  }

  async revokeUserTokens(userId: string): Promise<number> {
    return this.run(this.redis.revoke(this.key('idx:user', userId), this.prefix, this.channel, Date.now()));
  }

  async revokeClientTokens(clientId: string): Promise<number> {
    return this.run(this.redis.revoke(this.key('idx:client', clientId), this.prefix, this.channel, Date.now()));
  }

  async subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>> {
    // A subscribed connection can issue no other command, so revocations get their own.
    // It waits for its connection however long that takes (offline queue, no timeout, and a
    // SUBSCRIBE cut off by a drop is sent again).
    const subscriber = this.redis.duplicate({
      enableAutoPipelining: false,
      enableOfflineQueue: true,
      autoResendUnfulfilledCommands: true,
      commandTimeout: undefined,
      maxRetriesPerRequest: null,
    });
    subscriber.on('error', () => {});
    this.subscribers.add(subscriber);
    // Until the first SUBSCRIBE is answered the feed has not started, so a failed connection
    // attempt is no interruption: the caller treats the feed as down until this resolves.
    let established = false;
    let interrupted = false;
    subscriber.on('close', () => {
      if (!established || interrupted || !this.subscribers.has(subscriber)) return;
      interrupted = true;
      feed.onInterrupted();
    });
    // ioredis re-subscribes by itself after a reconnect, but says 'ready' before that SUBSCRIBE
    // is answered; the feed is reset once ours is, since from then on nothing is missed. What
    // was published meanwhile is lost, so the reset tells the feed to forget everything.
    subscriber.on('ready', () => {
      if (!interrupted) return;
      subscriber.subscribe(this.channel).then(
        () => {
          if (!interrupted || subscriber.status !== 'ready') return;
          interrupted = false;
          feed.onReset();
        },
        // Dropped again: 'close' keeps the feed interrupted and the next 'ready' tries again.
        () => {},
      );
    });
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return;
      const event = parse<RevocationEvent>(message);
      if (event !== null && Array.isArray(event.accessTokens)) feed.onRevoked(event);
    });
    await this.run(subscriber.subscribe(this.channel));
    established = true;
    return async () => {
      this.subscribers.delete(subscriber);
      closeSubscriber(subscriber);
    };
  }

  async incrementCounter(key: string, windowMs: number): Promise<number> {
    const counter = this.key('counter', key);
    const [[, count]] = (await this.run(this.redis.multi().incr(counter).pexpire(counter, windowMs, 'NX').exec())) as [[null, number]];
    return count;
  }

  async decrementCounter(key: string): Promise<void> {
    await this.run(this.redis.decrementLive(this.key('counter', key)));
  }

  async resetCounter(key: string): Promise<void> {
    await this.run(this.redis.del(this.key('counter', key)));
  }

  async getOrCreateSecret(name: string, candidate: string): Promise<string> {
    const key = this.key('secret', name);
    await this.run(this.redis.set(key, candidate, 'NX'));
    const stored = await this.run(this.redis.get(key));
    if (stored === null) throw new StoreUnavailableError(`the shared secret ${name} vanished while being created`);
    return stored;
  }

  async saveSession(digest: string, data: SessionRecord, ttlMs: number): Promise<void> {
    await this.run(this.redis.set(this.key('session', digest), JSON.stringify(data), 'PX', ttlMs));
  }

  async getSession(digest: string): Promise<SessionRecord | null> {
    return parse<SessionRecord>(await this.run(this.redis.get(this.key('session', digest))));
  }

  async deleteSession(digest: string): Promise<void> {
    await this.run(this.redis.del(this.key('session', digest)));
  }

  private key(kind: string, id?: string): string {
    return id === undefined ? `${this.prefix}${kind}` : `${this.prefix}${kind}:${id}`;
  }

  private indexKeys(record: { clientId: string; userId: string | null; familyId: string | null }): string[] {
    const keys = [this.key('idx:client', record.clientId)];
    if (record.userId !== null) keys.push(this.key('idx:user', record.userId));
    if (record.familyId !== null) keys.push(this.key('idx:family', record.familyId));
    return keys;
  }

  private async saveIndexed(
    recordKey: string,
    indexKeys: string[],
    member: string,
    expiresAt: number,
    kind: 'string' | 'hash',
    record: unknown,
  ): Promise<void> {
    await this.run(this.redis.saveIndexed(1 + indexKeys.length, recordKey, ...indexKeys, member, expiresAt, Date.now(), kind, JSON.stringify(record)));
  }

  /** Every failure to reach Redis becomes StoreUnavailableError: callers answer 503, never 401. */
  private async run<T>(command: Promise<T>): Promise<T> {
    try {
      return await command;
    } catch (error) {
      throw new StoreUnavailableError(`redis: ${(error as Error).message}`, { cause: error });
    }
  }
}

/**
 * Disconnects at once: a subscriber has nothing to finish, and QUIT would wait for ever behind
 * a SUBSCRIBE queued while Redis was unreachable (its queue has no retry limit).
 */
function closeSubscriber(subscriber: Redis): void {
  subscriber.disconnect();
}

function parse<T>(value: string | null): T | null {
  if (value === null) return null;
  try {
    return JSON.parse(value) as T;
  } catch {
    return null;
  }
}

function consumed<T>(reply: [string, number] | null): Consumed<T> | null {
  if (reply === null) return null;
  const record = parse<T>(reply[0]);
  return record === null ? null : { record, firstUse: reply[1] === 1 };
}
