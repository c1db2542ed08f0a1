import type { Argument, RedisDoor } from './backend.js';
import { IoredisDoor, type RedisDoorOptions } from './redis-door.js';
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
import { REVOKED_MARK_MS } from './store.js';

/**
 * Key layout (every key under `keyPrefix`, the same on one server, Sentinel and Cluster):
 *   app:<client_id>          JSON ApplicationRecord          apps   SET of client ids
 *   user:<id>                JSON UserRecord                 user-email:<email> -> id   users  SET of ids
 *   code:<digest>            HASH r=JSON used=1 once used, TTL  (single use, replay visible)
 *   at:<digest>              JSON AccessTokenRecord, TTL
 *   rt:<digest>              HASH r=JSON used=1 once used, TTL  (rotation, reuse visible)
 *   idx:user|client|family:<id>  ZSET of "at:<digest>"/"rt:<digest>" scored by expiry, TTL = last expiry;
 *                            member "revoked" once the family, user or application is gone for good
 *   counter:<name>, secret:<name>, session:<digest>
 *   channel revocations      RevocationEvent JSON (sharded pub/sub on a Cluster)
 *
 * No key carries a hash tag, so on a Cluster every key lands on the slot of its own name and
 * the keyspace spreads over every master. That works because on a Cluster every atomic step
 * touches one key: the operations that involve several (a token and its indexes, a revocation
 * and the tokens it removes) are ordered steps there, safe in any interleaving without a
 * transaction across slots; on one server they are one script each (docs/store.md says which
 * guarantee each operation keeps).
 */

/** Lua functions the token scripts share: each acts on the keys it is given, nothing else. */
const TOKEN_FUNCTIONS = `
-- The index is marked: its family is revoked, or its user or application deleted, for good.
local function marked(index)
  return redis.call('ZSCORE', index, 'revoked') ~= false
end
-- Joins an index, drops expired members, and keeps the index as long as its last member.
local function join(index, member, expiresAt, now)
  redis.call('ZADD', index, expiresAt, member)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
  local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', index, last[2])
end
local function write(key, kind, payload, expiresAt)
  redis.call('DEL', key)
  if kind == 'hash' then
    redis.call('HSET', key, 'r', payload)
  else
    redis.call('SET', key, payload)
  end
  redis.call('PEXPIREAT', key, expiresAt)
end
-- Empties an index and returns its members; marks it when forGood is '1', until its last
-- member's expiry and at least until floor.
local function take(index, forGood, floor)
  local entries = redis.call('ZRANGE', index, 0, -1, 'WITHSCORES')
  redis.call('DEL', index)
  local members = {}
  local last = tonumber(floor)
  for i = 1, #entries, 2 do
    if entries[i] ~= 'revoked' then members[#members + 1] = entries[i] end
    local score = tonumber(entries[i + 1])
    if score > last then last = score end
  end
  if forGood == '1' then
    redis.call('ZADD', index, string.format('%d', last), 'revoked')
    redis.call('PEXPIREAT', index, string.format('%d', last))
  end
  return members
end
`;

// One key per script, for a Cluster: see saveIndexed and revokeIndexed.

const INDEX_ADD = `${TOKEN_FUNCTIONS}
-- KEYS[1] index; ARGV: member, expiresAt (ms), now (ms). 0 when the index is marked.
if marked(KEYS[1]) then return 0 end
join(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return 1
`;

const SAVE_RECORD = `${TOKEN_FUNCTIONS}
-- KEYS[1] record; ARGV: kind ('string'|'hash'), payload, expiresAt (ms)
write(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return 1
`;

/** A script, not ZSCORE: a script runs on the master even when reads go to replicas. */
const IS_MEMBER = `
-- KEYS[1] index; ARGV[1] member
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
return 0
`;

const REVOKE_INDEX = `${TOKEN_FUNCTIONS}
-- KEYS[1] index; ARGV: '1' to mark it, mark expiry floor (ms). Returns the members.
return take(KEYS[1], ARGV[1], ARGV[2])
`;

// The same operations in one script each, where every key is on one server (no Cluster).

const SAVE_INDEXED = `${TOKEN_FUNCTIONS}
-- KEYS[1] record, KEYS[2..] indexes; ARGV: member, expiresAt (ms), now (ms), kind, payload.
-- 0 when an index is marked: nothing is written.
for i = 2, #KEYS do
  if marked(KEYS[i]) then return 0 end
end
write(KEYS[1], ARGV[4], ARGV[5], ARGV[2])
for i = 2, #KEYS do join(KEYS[i], ARGV[1], ARGV[2], ARGV[3]) end
return 1
`;

const REVOKE = `${TOKEN_FUNCTIONS}
-- KEYS[1] index, or '' to revoke the members given; ARGV: '1' to mark the index, mark expiry
-- floor (ms), key prefix, channel, now (ms), members... Deletes the records, publishes the
-- access tokens, returns how many records went.
local members
if KEYS[1] ~= '' then
  members = take(KEYS[1], ARGV[1], ARGV[2])
else
  members = {}
  for i = 6, #ARGV do members[#members + 1] = ARGV[i] end
end
local removed = 0
local access = {}
for _, member in ipairs(members) do
  removed = removed + redis.call('DEL', ARGV[3] .. member)
  if string.sub(member, 1, 3) == 'at:' then access[#access + 1] = string.sub(member, 4) end
end
if #access > 0 then
  redis.call('PUBLISH', ARGV[4], '{"accessTokens":' .. cjson.encode(access) .. ',"publishedAt":' .. ARGV[5] .. '}')
end
return removed
`;

const CONSUME = `
-- KEYS[1] single-use hash; returns {record, 1 if this call is the first use}
local record = redis.call('HGET', KEYS[1], 'r')
if not record then return nil end
return {record, redis.call('HSETNX', KEYS[1], 'used', '1')}
`;

const INCREMENT = `
-- KEYS[1] counter; ARGV[1] window (ms), set on the first increment only
local count = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1], 'NX')
return count
`;

const DECREMENT_LIVE = `
-- KEYS[1] counter; a plain DECR would recreate an expired counter without a TTL
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECR', KEYS[1]) end
return 0
`;

const DELETE_IF_EQUAL = `
-- KEYS[1]; ARGV[1] the value it must still hold
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

const SCRIPTS = {
  indexAdd: { numberOfKeys: 1, lua: INDEX_ADD },
  saveRecord: { numberOfKeys: 1, lua: SAVE_RECORD },
  isMember: { numberOfKeys: 1, lua: IS_MEMBER },
  revokeIndex: { numberOfKeys: 1, lua: REVOKE_INDEX },
  saveIndexed: { lua: SAVE_INDEXED },
  revoke: { numberOfKeys: 1, lua: REVOKE },
  consume: { numberOfKeys: 1, lua: CONSUME },
  increment: { numberOfKeys: 1, lua: INCREMENT },
  decrementLive: { numberOfKeys: 1, lua: DECREMENT_LIVE },
  deleteIfEqual: { numberOfKeys: 1, lua: DELETE_IF_EQUAL },
} as const;

export type RedisStoreOptions = RedisDoorOptions;

/** The store's records in Redis, through the door (./redis-door.ts) every room shares. */
export class RedisStore implements Store {
  readonly backend: RedisDoor;
  private readonly door: RedisDoor;
  private readonly channel: string;

  constructor(options: RedisStoreOptions) {
    this.door = this.backend = new IoredisDoor(options);
    for (const [name, script] of Object.entries(SCRIPTS)) this.door.defineScript(name, script);
    this.channel = this.door.key('revocations');
  }

  /** The last connection error Redis reported, for the message when the store cannot be reached at start. */
  get lastConnectionError(): Error | null {
    return this.door.lastConnectionError;
  }

  ping(): Promise<void> {
    return this.door.ping();
  }

  close(): Promise<void> {
    return this.door.close();
  }

  async putApplication(app: ApplicationRecord): Promise<void> {
    // Listed first: a listed id without its record is skipped, a record that is not listed would be hidden.
    await this.write('sadd', this.key('apps'), app.clientId);
    await this.write('set', this.key('app', app.clientId), JSON.stringify(app));
  }

  async getApplication(clientId: string): Promise<ApplicationRecord | null> {
    return parse<ApplicationRecord>(await this.read<string | null>('get', this.key('app', clientId)));
  }

  async listApplications(): Promise<ApplicationRecord[]> {
    return this.listRecords<ApplicationRecord>('apps', 'app');
  }

  async deleteApplication(clientId: string): Promise<boolean> {
    const deleted = await this.write<number>('del', this.key('app', clientId));
    await this.write('srem', this.key('apps'), clientId);
    await this.revokeIndexed(this.key('idx:client', clientId), true);
    return deleted === 1;
  }

  async createUser(user: UserRecord): Promise<boolean> {
    const claimed = await this.write<string | null>('set', this.key('user-email', user.email), user.id, 'NX');
    if (claimed !== 'OK') return false;
    const created = await this.write<string | null>('set', this.key('user', user.id), JSON.stringify(user), 'NX');
    if (created !== 'OK') {
      await this.write('deleteIfEqual', this.key('user-email', user.email), user.id);
      return false;
    }
    await this.write('sadd', this.key('users'), user.id);
    return true;
  }

  async getUser(id: string): Promise<UserRecord | null> {
    return parse<UserRecord>(await this.read<string | null>('get', this.key('user', id)));
  }

  async findUserByEmail(email: string): Promise<UserRecord | null> {
    const id = await this.read<string | null>('get', this.key('user-email', email));
    return id === null ? null : this.getUser(id);
  }

  async listUsers(): Promise<UserRecord[]> {
    return this.listRecords<UserRecord>('users', 'user');
  }

  async deleteUser(id: string): Promise<boolean> {
    const user = await this.getUser(id);
    if (user === null) return false;
    // The record first: from then on the user cannot sign in, whatever else fails.
    await this.write('del', this.key('user', id));
    await this.write('deleteIfEqual', this.key('user-email', user.email), id);
    await this.write('srem', this.key('users'), id);
    await this.revokeIndexed(this.key('idx:user', id), true);
    return true;
  }

  async saveAuthorizationCode(digest: string, record: AuthorizationCodeRecord): Promise<void> {
    if (record.expiresAt <= Date.now()) return;
    await this.write('saveRecord', this.key('code', digest), 'hash', JSON.stringify(record), record.expiresAt);
  }

  async consumeAuthorizationCode(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null> {
    return consumed<AuthorizationCodeRecord>(await this.write('consume', this.key('code', digest)));
  }

  async saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void> {
    await this.saveIndexed(`at:${digest}`, 'string', record);
  }

  async getAccessToken(digest: string): Promise<AccessTokenRecord | null> {
    return parse<AccessTokenRecord>(await this.read<string | null>('get', this.key('at', digest)));
  }

  async saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void> {
    await this.saveIndexed(`rt:${digest}`, 'hash', record);
  }

  async getRefreshToken(digest: string): Promise<RefreshTokenRecord | null> {
    const [record, used] = await this.read<Array<string | null>>('hmget', this.key('rt', digest), 'r', 'used');
    return used === '1' ? null : parse<RefreshTokenRecord>(record ?? null);
  }

  async consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null> {
    return consumed<RefreshTokenRecord>(await this.write('consume', this.key('rt', digest)));
  }

  async revokeAccessToken(digest: string): Promise<number> {
    return this.removeMembers([`at:${digest}`]);
  }

  async revokeRefreshToken(digest: string): Promise<number> {
    return this.removeMembers([`rt:${digest}`]);
  }

  async revokeFamily(familyId: string): Promise<number> {
    // A family revoked is revoked for good: a token of it saved later (a grant in flight) is born revoked.
    return this.revokeIndexed(this.key('idx:family', familyId), true);
  }

  async revokeUserTokens(userId: string): Promise<number> {
    return this.revokeIndexed(this.key('idx:user', userId), false);
  }

  async revokeClientTokens(clientId: string): Promise<number> {
    return this.revokeIndexed(this.key('idx:client', clientId), false);
  }

  subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>> {
    return this.door.subscribe(this.channel, {
      onMessage(message) {
        const event = parse<RevocationEvent>(message);
        if (event !== null && Array.isArray(event.accessTokens)) feed.onRevoked(event);
      },
      onInterrupted: () => feed.onInterrupted(),
      onReset: () => feed.onReset(),
    });
  }

  async incrementCounter(key: string, windowMs: number): Promise<number> {
    return this.write<number>('increment', this.key('counter', key), windowMs);
  }

  async decrementCounter(key: string): Promise<void> {
    await this.write('decrementLive', this.key('counter', key));
  }

  async resetCounter(key: string): Promise<void> {
    await this.write('del', this.key('counter', key));
  }

  async getOrCreateSecret(name: string, candidate: string): Promise<string> {
    const existing = await this.write<string | null>('set', this.key('secret', name), candidate, 'NX', 'GET');
    return existing ?? candidate;
  }

  async saveSession(digest: string, data: SessionRecord, ttlMs: number): Promise<void> {
    await this.write('set', this.key('session', digest), JSON.stringify(data), 'PX', ttlMs);
  }

  async getSession(digest: string): Promise<SessionRecord | null> {
    return parse<SessionRecord>(await this.read<string | null>('get', this.key('session', digest)));
  }

  async deleteSession(digest: string): Promise<void> {
    await this.write('del', this.key('session', digest));
  }

  private key(kind: string, id?: string): string {
    return this.door.key(id === undefined ? kind : `${kind}:${id}`);
  }

  private indexKeys(record: { clientId: string; userId: string | null; familyId: string | null }): string[] {
    const keys = [this.key('idx:client', record.clientId)];
    if (record.userId !== null) keys.push(this.key('idx:user', record.userId));
    if (record.familyId !== null) keys.push(this.key('idx:family', record.familyId));
    return keys;
  }

  /**
   * A token and its indexes. On one server (or Sentinel) one script does it all. On a Cluster
   * the keys live on different slots, so it takes three steps that need no transaction:
   * 1. it joins every index (refused by a family, user or application marked revoked: the token
   *    is then born revoked, and nothing is written);
   * 2. its record is written;
   * 3. it checks it is still in every index: a revocation that read an index between 1 and 2
   *    found no record to delete, so the record deletes itself.
   * A revocation that read the index after 2 deletes the record; one that read it before 1 does
   * not concern it. Either way no token outlives a revocation it was indexed under.
   */
  private async saveIndexed(member: string, kind: 'string' | 'hash', record: AccessTokenRecord | RefreshTokenRecord): Promise<void> {
    const now = Date.now();
    if (record.expiresAt <= now) return;
    const indexes = this.indexKeys(record);
    const recordKey = this.door.key(member);
    const payload = JSON.stringify(record);
    if (!this.door.cluster) {
      await this.write('saveIndexed', 1 + indexes.length, recordKey, ...indexes, member, record.expiresAt, now, kind, payload);
      return;
    }
    const joined = await Promise.all(indexes.map((index) => this.write<number>('indexAdd', index, member, record.expiresAt, now)));
    if (joined.includes(0)) return;
    await this.write('saveRecord', recordKey, kind, payload, record.expiresAt);
    const still = await Promise.all(indexes.map((index) => this.read<number>('isMember', index, member)));
    if (still.includes(0)) await this.write('del', recordKey);
  }

  /**
   * Revocation by index (or of the `members` given): take the members, marking the index
   * revoked for good when asked, delete their records, then announce the access tokens to every
   * sidecar, after the deletions, so a sidecar that reads the store on hearing it finds nothing.
   * One script on one server (or Sentinel); those steps in turn on a Cluster.
   */
  private async revokeIndexed(indexKey: string, forGood: boolean): Promise<number> {
    const markFloor = Date.now() + REVOKED_MARK_MS;
    if (!this.door.cluster) return this.write<number>('revoke', indexKey, forGood ? '1' : '0', markFloor, this.door.key(''), this.channel, Date.now());
    return this.removeMembers(await this.write<string[]>('revokeIndex', indexKey, forGood ? '1' : '0', markFloor));
  }

  private async removeMembers(members: string[]): Promise<number> {
    if (!this.door.cluster) return this.write<number>('revoke', '', '0', 0, this.door.key(''), this.channel, Date.now(), ...members);
    const removed = await Promise.all(members.map((member) => this.write<number>('del', this.door.key(member))));
    // Announced even when already gone here: another sidecar may still cache them.
    const accessTokens = members.filter((member) => member.startsWith('at:')).map((member) => member.slice(3));
    if (accessTokens.length > 0) await this.door.publish(this.channel, JSON.stringify({ accessTokens, publishedAt: Date.now() } satisfies RevocationEvent));
    return removed.reduce((sum, count) => sum + count, 0);
  }

  private async listRecords<T>(setName: string, kind: string): Promise<T[]> {
    const ids = await this.read<string[]>('smembers', this.key(setName));
    // One GET per record, not MGET: on a Cluster the records live on different slots.
    const values = await Promise.all(ids.map((id) => this.read<string | null>('get', this.key(kind, id))));
    return values.map((value) => parse<T>(value)).filter((record): record is T & {} => record !== null);
  }

  private read<T>(command: string, ...args: Argument[]): Promise<T> {
    return this.door.read<T>(command, ...args);
  }

  private write<T = unknown>(command: string, ...args: Argument[]): Promise<T> {
    return this.door.write<T>(command, ...args);
  }
}

function parse<T>(value: string | null): T | null {
  if (value === null) return null;
  try {
    return JSON.parse(value) as T;
  } catch {
    return null;
  }
}

function consumed<T>(reply: unknown): Consumed<T> | null {
  if (reply === null || !Array.isArray(reply)) return null;
  const [text, firstUse] = reply as [string, number];
  const record = parse<T>(text);
  return record === null ? null : { record, firstUse: firstUse === 1 };
}
