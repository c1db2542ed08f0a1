import type { RedisDoor } from './backend.js';
import { cloneOrNull } from './expiring-map.js';
import { listRecords, parse } from './redis-records.js';

export interface UserRecord {
  id: string;
  /** Lower-cased; unique. */
  email: string;
  /** `scrypt$N$r$p$salt$hash` from src/issuer/passwords.ts. */
  passwordHash: string;
  createdAt: number;
}

/** The people who sign in on the authorization page. */
export interface Users {
  /** False when the e-mail (or the id) is taken. */
  create(user: UserRecord): Promise<boolean>;
  get(id: string): Promise<UserRecord | null>;
  findByEmail(email: string): Promise<UserRecord | null>;
  list(): Promise<UserRecord[]>;
  /**
   * Sets a new password hash when the user still has `previous` (a rehash at sign-in must not
   * undo a password changed or a user deleted meanwhile). False when it did not.
   */
  replacePasswordHash(id: string, previous: string, next: string): Promise<boolean>;
  /** Removes the record alone; `deleteUserAndTokens` (./deletions.ts) also revokes their tokens. False when there was none. */
  delete(id: string): Promise<boolean>;
}

export class MemoryUsers implements Users {
  private readonly records = new Map<string, UserRecord>();
  private readonly idsByEmail = new Map<string, string>();

  async create(user: UserRecord): Promise<boolean> {
    if (this.idsByEmail.has(user.email) || this.records.has(user.id)) return false;
    this.records.set(user.id, structuredClone(user));
    this.idsByEmail.set(user.email, user.id);
    return true;
  }

  async get(id: string): Promise<UserRecord | null> {
    return cloneOrNull(this.records.get(id));
  }

  async findByEmail(email: string): Promise<UserRecord | null> {
    const id = this.idsByEmail.get(email);
    return id === undefined ? null : this.get(id);
  }

  async list(): Promise<UserRecord[]> {
    return [...this.records.values()].map((user) => structuredClone(user));
  }

  async replacePasswordHash(id: string, previous: string, next: string): Promise<boolean> {
    const user = this.records.get(id);
    if (user === undefined || user.passwordHash !== previous) return false;
    user.passwordHash = next;
    return true;
  }

  async delete(id: string): Promise<boolean> {
    const user = this.records.get(id);
    if (user === undefined) return false;
    this.records.delete(id);
    this.idsByEmail.delete(user.email);
    return true;
  }
}

const SET_IF_EQUAL = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1]; ARGV[1] the value it must still hold; ARGV[2] the new value
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end
return 0
`,
} as const;

const DELETE_IF_EQUAL = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1]; ARGV[1] the value it must still hold
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
} as const;

/** Keys: `user:<id>` JSON UserRecord; `user-email:<email>` -> id; `users` SET of ids. */
export class RedisUsers implements Users {
  constructor(private readonly door: RedisDoor) {
    door.defineScript('deleteIfEqual', DELETE_IF_EQUAL);
    door.defineScript('setIfEqual', SET_IF_EQUAL);
  }

  async create(user: UserRecord): Promise<boolean> {
    const claimed = await this.door.write<string | null>('set', this.emailKey(user.email), user.id, 'NX');
    if (claimed !== 'OK') return false;
    const created = await this.door.write<string | null>('set', this.recordKey(user.id), JSON.stringify(user), 'NX');
    if (created !== 'OK') {
      await this.door.write('deleteIfEqual', this.emailKey(user.email), user.id);
      return false;
    }
    await this.door.write('sadd', this.door.key('users'), user.id);
    return true;
  }

  async get(id: string): Promise<UserRecord | null> {
    return parse<UserRecord>(await this.door.read<string | null>('get', this.recordKey(id)));
  }

  async findByEmail(email: string): Promise<UserRecord | null> {
    const id = await this.door.read<string | null>('get', this.emailKey(email));
    return id === null ? null : this.get(id);
  }

  async replacePasswordHash(id: string, previous: string, next: string): Promise<boolean> {
    const raw = await this.door.read<string | null>('get', this.recordKey(id));
    const user = parse<UserRecord>(raw);
    if (raw === null || user === null || user.passwordHash !== previous) return false;
    // Set only over the record as read: a change in between wins.
    return (await this.door.write<number>('setIfEqual', this.recordKey(id), raw, JSON.stringify({ ...user, passwordHash: next }))) === 1;
  }

  list(): Promise<UserRecord[]> {
    return listRecords<UserRecord>(this.door, this.door.key('users'), (id) => this.recordKey(id));
  }

  async delete(id: string): Promise<boolean> {
    const user = await this.get(id);
    if (user === null) return false;
    // The record first: from then on the user cannot sign in, whatever else fails.
    await this.door.write('del', this.recordKey(id));
    await this.door.write('deleteIfEqual', this.emailKey(user.email), id);
    await this.door.write('srem', this.door.key('users'), id);
    return true;
  }

  private recordKey(id: string): string {
    return this.door.key(`user:${id}`);
  }

  private emailKey(email: string): string {
    return this.door.key(`user-email:${email}`);
  }
}
