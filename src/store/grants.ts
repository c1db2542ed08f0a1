import { randomUUID } from 'node:crypto';
import type { RedisDoor } from './backend.js';
import { parse } from './redis-records.js';

/**
 * What a user approved for one application on the consent page: the scopes and the resources,
 * grown by every later approval, until the user disconnects the application (or the operator
 * revokes the grant, or deletes the user or the application). A grant has an id of its own, new
 * each time one is created: codes and refresh tokens carry the id of the grant they were issued
 * under, so one issued before a disconnection is not rescued by the user connecting again.
 */
export interface GrantRecord {
  /** Random, new for each grant created (a grant ended and approved again is another grant). */
  id: string;
  userId: string;
  clientId: string;
  scopes: string[];
  /** The resources (RFC 8707) approved; empty when none are configured. */
  resources: string[];
  /** Epoch ms of the approval that last added something (or created it). */
  approvedAt: number;
  /** Epoch ms a code or a refresh was last issued under it. */
  lastUsedAt: number;
}

/** What one approval adds to a grant. */
export interface Approval {
  scopes: readonly string[];
  resources: readonly string[];
}

/** The users' grants to applications (remembered consent). */
export interface Grants {
  get(userId: string, clientId: string): Promise<GrantRecord | null>;
  /** The user's grants, the most recently approved first. */
  list(userId: string): Promise<GrantRecord[]>;
  /**
   * Adds an approval to the user's grant to the application, creating the grant when there is
   * none; concurrent approvals all count (nothing one adds is lost to another). Marks it used.
   */
  approve(userId: string, clientId: string, approval: Approval, now: number): Promise<GrantRecord>;
  /**
   * Marks grant `id` used at `now`, when it still stands: false when it was ended (or ended and
   * created again, with another id). One command: the token endpoint calls it on every code
   * exchange and refresh.
   */
  touch(userId: string, clientId: string, id: string, now: number): Promise<boolean>;
  /**
   * Ends one grant at `now`, remembering when; false when there was none. The tokens issued
   * under it are the caller's to revoke (./deletions.ts).
   */
  delete(userId: string, clientId: string, now: number): Promise<boolean>;
  /**
   * When the user last ended a grant to the application (epoch ms), or null: a code or refresh
   * token from before grants were kept, issued before that, must not make a grant again.
   */
  endedAt(userId: string, clientId: string): Promise<number | null>;
  /** Ends every grant of a user (the user is deleted). */
  deleteUser(userId: string): Promise<void>;
  /** Ends every grant to an application (it is deleted). */
  deleteClient(clientId: string): Promise<void>;
}

/** `current` with `approval` added; `current` itself (same object) when it adds nothing. */
export function withApproval(current: GrantRecord | null, userId: string, clientId: string, approval: Approval, now: number): GrantRecord {
  if (current === null) {
    return {
      id: randomUUID(),
      userId,
      clientId,
      scopes: [...new Set(approval.scopes)],
      resources: [...new Set(approval.resources)],
      approvedAt: now,
      lastUsedAt: now,
    };
  }
  const scopes = [...new Set([...current.scopes, ...approval.scopes])];
  const resources = [...new Set([...current.resources, ...approval.resources])];
  if (scopes.length === current.scopes.length && resources.length === current.resources.length) return current;
  return { ...current, scopes, resources, approvedAt: now };
}

export class MemoryGrants implements Grants {
  /** user id -> client id -> grant. */
  private readonly byUser = new Map<string, Map<string, GrantRecord>>();
  /** client id -> the users with a grant to it. */
  private readonly usersOf = new Map<string, Set<string>>();
  /** user id -> client id -> when the user last ended a grant to it. */
  private readonly ended = new Map<string, Map<string, number>>();

  async get(userId: string, clientId: string): Promise<GrantRecord | null> {
    const grant = this.byUser.get(userId)?.get(clientId);
    return grant === undefined ? null : structuredClone(grant);
  }

  async list(userId: string): Promise<GrantRecord[]> {
    return newestFirst([...(this.byUser.get(userId)?.values() ?? [])].map((grant) => structuredClone(grant)));
  }

  async approve(userId: string, clientId: string, approval: Approval, now: number): Promise<GrantRecord> {
    let grants = this.byUser.get(userId);
    if (grants === undefined) this.byUser.set(userId, (grants = new Map()));
    const next = { ...withApproval(grants.get(clientId) ?? null, userId, clientId, approval, now), lastUsedAt: now };
    grants.set(clientId, next);
    let users = this.usersOf.get(clientId);
    if (users === undefined) this.usersOf.set(clientId, (users = new Set()));
    users.add(userId);
    return structuredClone(next);
  }

  async touch(userId: string, clientId: string, id: string, now: number): Promise<boolean> {
    const grant = this.byUser.get(userId)?.get(clientId);
    if (grant === undefined || grant.id !== id) return false;
    grant.lastUsedAt = now;
    return true;
  }

  async delete(userId: string, clientId: string, now: number): Promise<boolean> {
    const deleted = this.byUser.get(userId)?.delete(clientId) ?? false;
    this.usersOf.get(clientId)?.delete(userId);
    let ended = this.ended.get(userId);
    if (ended === undefined) this.ended.set(userId, (ended = new Map()));
    ended.set(clientId, now);
    return deleted;
  }

  async endedAt(userId: string, clientId: string): Promise<number | null> {
    return this.ended.get(userId)?.get(clientId) ?? null;
  }

  async deleteUser(userId: string): Promise<void> {
    for (const clientId of this.byUser.get(userId)?.keys() ?? []) this.usersOf.get(clientId)?.delete(userId);
    this.byUser.delete(userId);
    this.ended.delete(userId);
  }

  async deleteClient(clientId: string): Promise<void> {
    for (const userId of this.usersOf.get(clientId) ?? []) this.byUser.get(userId)?.delete(clientId);
    this.usersOf.delete(clientId);
  }
}

/** Sets a hash field only while it still holds what was read (`''`: absent), with the grant's last use beside it. */
const SET_GRANT_IF_EQUAL = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] grants:<user>; ARGV: grant field, the value it must still hold ('' = none), new value, used field, used at
if (redis.call('HGET', KEYS[1], ARGV[1]) or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[5])
return 1
`,
} as const;

const TOUCH_GRANT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] grants:<user>; ARGV: grant field, used field, grant id, used at. 0 when that grant no longer stands.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local ok, grant = pcall(cjson.decode, raw)
if not ok or type(grant) ~= 'table' or grant.id ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
return 1
`,
} as const;

const END_GRANT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] grants:<user>; ARGV: grant field, used field, ended field, ended at. Returns 1 when there was a grant.
local removed = redis.call('HDEL', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
if removed > 0 then return 1 end
return 0
`,
} as const;

/** How many times an approval is tried again when another changed the grant between its read and its write. */
const APPROVAL_ATTEMPTS = 20;

/** The grant as stored in its hash field: who it is of is in the key and the field's name. */
type StoredGrant = Omit<GrantRecord, 'userId' | 'clientId' | 'lastUsedAt'>;

/**
 * Keys: `grants:<user_id>` HASH, per application `g:<client_id>` -> JSON grant,
 * `u:<client_id>` -> last use and `e:<client_id>` -> when a grant to it last ended (epoch ms
 * each); `grant-users:<client_id>` SET of the users with a grant
 * to it. A user's grants share one key, so reading, touching and growing one is one command on
 * one slot; the set of an application's users is only read when it is deleted.
 */
export class RedisGrants implements Grants {
  constructor(private readonly door: RedisDoor) {
    door.defineScript('setGrantIfEqual', SET_GRANT_IF_EQUAL);
    door.defineScript('touchGrant', TOUCH_GRANT);
    door.defineScript('endGrant', END_GRANT);
  }

  async get(userId: string, clientId: string): Promise<GrantRecord | null> {
    const [raw, used] = await this.door.read<Array<string | null>>('hmget', this.userKey(userId), grantField(clientId), usedField(clientId));
    return fromStored(parse<StoredGrant>(raw ?? null), userId, clientId, used ?? null);
  }

  async list(userId: string): Promise<GrantRecord[]> {
    const fields = await this.door.read<Record<string, string>>('hgetall', this.userKey(userId));
    const grants: GrantRecord[] = [];
    for (const [field, raw] of Object.entries(fields)) {
      if (!field.startsWith('g:')) continue;
      const clientId = field.slice(2);
      const grant = fromStored(parse<StoredGrant>(raw), userId, clientId, fields[usedField(clientId)] ?? null);
      if (grant !== null) grants.push(grant);
    }
    return newestFirst(grants);
  }

  async approve(userId: string, clientId: string, approval: Approval, now: number): Promise<GrantRecord> {
    // Listed first: a listed user without the grant is skipped when the application is deleted; a grant not listed would outlive it.
    await this.door.write('sadd', this.clientKey(clientId), userId);
    const key = this.userKey(userId);
    for (let attempt = 0; attempt < APPROVAL_ATTEMPTS; attempt++) {
      const raw = await this.door.read<string | null>('hget', key, grantField(clientId));
      const current = fromStored(parse<StoredGrant>(raw), userId, clientId, null);
      const next = withApproval(current, userId, clientId, approval, now);
      const stored: StoredGrant = { id: next.id, scopes: next.scopes, resources: next.resources, approvedAt: next.approvedAt };
      const written = await this.door.write<number>('setGrantIfEqual', key, grantField(clientId), raw ?? '', JSON.stringify(stored), usedField(clientId), now);
      if (written === 1) return { ...next, lastUsedAt: now };
    }
    throw new Error(`the grant of user ${userId} to ${clientId} changed under ${APPROVAL_ATTEMPTS} approvals in a row`);
  }

  async touch(userId: string, clientId: string, id: string, now: number): Promise<boolean> {
    return (await this.door.write<number>('touchGrant', this.userKey(userId), grantField(clientId), usedField(clientId), id, now)) === 1;
  }

  async delete(userId: string, clientId: string, now: number): Promise<boolean> {
    const removed = await this.door.write<number>('endGrant', this.userKey(userId), grantField(clientId), usedField(clientId), endedField(clientId), now);
    await this.door.write('srem', this.clientKey(clientId), userId);
    return removed === 1;
  }

  async endedAt(userId: string, clientId: string): Promise<number | null> {
    const ended = await this.door.read<string | null>('hget', this.userKey(userId), endedField(clientId));
    return ended === null ? null : Number(ended);
  }

  async deleteUser(userId: string): Promise<void> {
    const fields = await this.door.read<string[]>('hkeys', this.userKey(userId));
    await this.door.write('del', this.userKey(userId));
    const clientIds = fields.filter((field) => field.startsWith('g:')).map((field) => field.slice(2));
    await Promise.all(clientIds.map((clientId) => this.door.write('srem', this.clientKey(clientId), userId)));
  }

  async deleteClient(clientId: string): Promise<void> {
    const userIds = await this.door.read<string[]>('smembers', this.clientKey(clientId));
    // One command per user: on a Cluster each user's grants live on a slot of their own.
    await Promise.all(userIds.map((userId) => this.door.write('hdel', this.userKey(userId), grantField(clientId), usedField(clientId))));
    await this.door.write('del', this.clientKey(clientId));
  }

  private userKey(userId: string): string {
    return this.door.key(`grants:${userId}`);
  }

  private clientKey(clientId: string): string {
    return this.door.key(`grant-users:${clientId}`);
  }
}

const grantField = (clientId: string) => `g:${clientId}`;
const usedField = (clientId: string) => `u:${clientId}`;
const endedField = (clientId: string) => `e:${clientId}`;

function fromStored(stored: StoredGrant | null, userId: string, clientId: string, used: string | null): GrantRecord | null {
  if (stored === null || typeof stored.id !== 'string' || !Array.isArray(stored.scopes) || !Array.isArray(stored.resources)) return null;
  const lastUsedAt = used === null ? stored.approvedAt : Number(used);
  return { id: stored.id, userId, clientId, scopes: stored.scopes, resources: stored.resources, approvedAt: stored.approvedAt, lastUsedAt };
}

function newestFirst(grants: GrantRecord[]): GrantRecord[] {
  return grants.sort((a, b) => b.approvedAt - a.approvedAt || a.clientId.localeCompare(b.clientId));
}
