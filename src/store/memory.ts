import { MEMORY_BACKEND } from './backend.js';
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

/** A Map whose entries vanish at their expiry: on read, and by a periodic sweep. */
class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();

  get(key: string, now = Date.now()): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: V, expiresAt: number): void {
    this.entries.set(key, { value, expiresAt });
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  delete(key: string): boolean {
    return this.entries.delete(key);
  }

  /** Adds one to a counter, starting it at 1 with `expiresAt` if absent; the window's end never moves. */
  increment(this: ExpiringMap<number>, key: string, expiresAt: number, now: number): number {
    const entry = this.entries.get(key);
    if (entry === undefined || entry.expiresAt <= now) {
      this.entries.set(key, { value: 1, expiresAt });
      return 1;
    }
    entry.value += 1;
    return entry.value;
  }

  /** Takes one from a live counter; an expired or absent one is left alone. */
  decrement(this: ExpiringMap<number>, key: string, now: number): void {
    const entry = this.entries.get(key);
    if (entry !== undefined && entry.expiresAt > now) entry.value -= 1;
  }

  sweep(now: number): void {
    for (const [key, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(key);
  }
}

const SWEEP_INTERVAL_MS = 30_000;

/**
 * The embedded store for a single instance. Records are cloned in and out so callers can never
 * mutate what is stored, the same as with Redis. Not shared between processes: run the
 * `redis` driver as soon as there is more than one sidecar.
 */
export class MemoryStore implements Store {
  readonly backend = MEMORY_BACKEND;
  private readonly applications = new Map<string, ApplicationRecord>();
  private readonly users = new Map<string, UserRecord>();
  private readonly userIdsByEmail = new Map<string, string>();
  private readonly codes = new ExpiringMap<{ record: AuthorizationCodeRecord; used: boolean }>();
  private readonly accessTokens = new ExpiringMap<AccessTokenRecord>();
  private readonly refreshTokens = new ExpiringMap<{ record: RefreshTokenRecord; used: boolean }>();
  /** `user:ID`, `client:ID`, `family:ID` -> the access (`at:`) and refresh (`rt:`) digests under it. */
  private readonly index = new Map<string, Set<string>>();
  /** Index keys revoked for good (a family, a deleted user or application) -> until when a token of them is refused. */
  private readonly revokedForGood = new ExpiringMap<true>();
  private readonly counters = new ExpiringMap<number>();
  private readonly secrets = new Map<string, string>();
  private readonly sessions = new ExpiringMap<SessionRecord>();
  private readonly feeds = new Set<RevocationFeed>();
  private readonly sweeper: NodeJS.Timeout;

  constructor() {
    this.sweeper = setInterval(() => this.sweep(Date.now()), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.feeds.clear();
  }

  async putApplication(app: ApplicationRecord): Promise<void> {
    this.applications.set(app.clientId, structuredClone(app));
  }

  async getApplication(clientId: string): Promise<ApplicationRecord | null> {
    return cloneOrNull(this.applications.get(clientId));
  }

  async listApplications(): Promise<ApplicationRecord[]> {
    return [...this.applications.values()].map((app) => structuredClone(app));
  }

  async deleteApplication(clientId: string): Promise<boolean> {
    const existed = this.applications.delete(clientId);
    this.revokeIndexed(`client:${clientId}`, true);
    return existed;
  }

  async createUser(user: UserRecord): Promise<boolean> {
    if (this.userIdsByEmail.has(user.email) || this.users.has(user.id)) return false;
    this.users.set(user.id, structuredClone(user));
    this.userIdsByEmail.set(user.email, user.id);
    return true;
  }

  async getUser(id: string): Promise<UserRecord | null> {
    return cloneOrNull(this.users.get(id));
  }

  async findUserByEmail(email: string): Promise<UserRecord | null> {
    const id = this.userIdsByEmail.get(email);
    return id === undefined ? null : this.getUser(id);
  }

  async listUsers(): Promise<UserRecord[]> {
    return [...this.users.values()].map((user) => structuredClone(user));
  }

  async deleteUser(id: string): Promise<boolean> {
    const user = this.users.get(id);
    if (user === undefined) return false;
    this.users.delete(id);
    this.userIdsByEmail.delete(user.email);
    this.revokeIndexed(`user:${id}`, true);
    return true;
  }

  async saveAuthorizationCode(digest: string, record: AuthorizationCodeRecord): Promise<void> {
    this.codes.set(digest, { record: structuredClone(record), used: false }, record.expiresAt);
  }

  async consumeAuthorizationCode(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null> {
    return consume(this.codes.get(digest));
  }

  async saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void> {
    if (this.bornRevoked(record)) return;
    this.accessTokens.set(digest, structuredClone(record), record.expiresAt);
    this.addToIndex(`at:${digest}`, record);
  }

  async getAccessToken(digest: string): Promise<AccessTokenRecord | null> {
    return cloneOrNull(this.accessTokens.get(digest));
  }

  async saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void> {
    if (this.bornRevoked(record)) return;
    this.refreshTokens.set(digest, { record: structuredClone(record), used: false }, record.expiresAt);
    this.addToIndex(`rt:${digest}`, record);
  }

  async getRefreshToken(digest: string): Promise<RefreshTokenRecord | null> {
    const entry = this.refreshTokens.get(digest);
    return entry === undefined || entry.used ? null : structuredClone(entry.record);
  }

  async consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null> {
    return consume(this.refreshTokens.get(digest));
  }

  async revokeAccessToken(digest: string): Promise<number> {
    return this.removeMembers([`at:${digest}`]);
  }

  async revokeRefreshToken(digest: string): Promise<number> {
    return this.removeMembers([`rt:${digest}`]);
  }

  async revokeFamily(familyId: string): Promise<number> {
    return this.revokeIndexed(`family:${familyId}`, true);
  }

  async revokeUserTokens(userId: string): Promise<number> {
    return this.revokeIndexed(`user:${userId}`, false);
  }

  async revokeClientTokens(clientId: string): Promise<number> {
    return this.revokeIndexed(`client:${clientId}`, false);
  }

  async subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>> {
    this.feeds.add(feed);
    return async () => {
      this.feeds.delete(feed);
    };
  }

  async incrementCounter(key: string, windowMs: number): Promise<number> {
    const now = Date.now();
    return this.counters.increment(key, now + windowMs, now);
  }

  async decrementCounter(key: string): Promise<void> {
    this.counters.decrement(key, Date.now());
  }

  async resetCounter(key: string): Promise<void> {
    this.counters.delete(key);
  }

  async getOrCreateSecret(name: string, candidate: string): Promise<string> {
    const existing = this.secrets.get(name);
    if (existing !== undefined) return existing;
    this.secrets.set(name, candidate);
    return candidate;
  }

  async saveSession(digest: string, data: SessionRecord, ttlMs: number): Promise<void> {
    this.sessions.set(digest, structuredClone(data), Date.now() + ttlMs);
  }

  async getSession(digest: string): Promise<SessionRecord | null> {
    return cloneOrNull(this.sessions.get(digest));
  }

  async deleteSession(digest: string): Promise<void> {
    this.sessions.delete(digest);
  }

  private addToIndex(member: string, record: IndexedRecord): void {
    for (const key of indexKeys(record)) {
      let members = this.index.get(key);
      if (members === undefined) this.index.set(key, (members = new Set()));
      members.add(member);
    }
  }

  /** A token of a family revoked, or of a user or application deleted, is refused as the Redis store refuses it. */
  private bornRevoked(record: IndexedRecord): boolean {
    return indexKeys(record).some((key) => this.revokedForGood.has(key));
  }

  private revokeIndexed(indexKey: string, forGood: boolean): number {
    const members = this.index.get(indexKey);
    this.index.delete(indexKey);
    if (forGood) this.revokedForGood.set(indexKey, true, Math.max(this.lastExpiry(members), Date.now() + REVOKED_MARK_MS));
    return members === undefined ? 0 : this.removeMembers([...members]);
  }

  private lastExpiry(members: Set<string> | undefined): number {
    let last = 0;
    for (const member of members ?? []) {
      const digest = member.slice(3);
      const expiresAt = member.startsWith('at:') ? this.accessTokens.get(digest)?.expiresAt : this.refreshTokens.get(digest)?.record.expiresAt;
      last = Math.max(last, expiresAt ?? 0);
    }
    return last;
  }

  private removeMembers(members: string[]): number {
    let removed = 0;
    for (const member of members) {
      const digest = member.slice(3);
      if (member.startsWith('at:')) {
        if (this.accessTokens.has(digest)) removed += 1;
        this.accessTokens.delete(digest);
      } else {
        if (this.refreshTokens.has(digest)) removed += 1;
        this.refreshTokens.delete(digest);
      }
    }
    // Announce even digests that were already gone here: another sidecar may still cache them.
    const accessTokens = members.filter((member) => member.startsWith('at:')).map((member) => member.slice(3));
    if (accessTokens.length > 0) this.publish({ accessTokens, publishedAt: Date.now() });
    return removed;
  }

  private publish(event: RevocationEvent): void {
    for (const feed of this.feeds) feed.onRevoked(event);
  }

  private sweep(now: number): void {
    this.codes.sweep(now);
    this.accessTokens.sweep(now);
    this.refreshTokens.sweep(now);
    this.counters.sweep(now);
    this.sessions.sweep(now);
    this.revokedForGood.sweep(now);
    for (const [key, members] of this.index) {
      for (const member of members) {
        const live = member.startsWith('at:') ? this.accessTokens.has(member.slice(3)) : this.refreshTokens.has(member.slice(3));
        if (!live) members.delete(member);
      }
      if (members.size === 0) this.index.delete(key);
    }
  }
}

type IndexedRecord = { clientId: string; userId: string | null; familyId: string | null };

function indexKeys(record: IndexedRecord): string[] {
  const keys = [`client:${record.clientId}`];
  if (record.userId !== null) keys.push(`user:${record.userId}`);
  if (record.familyId !== null) keys.push(`family:${record.familyId}`);
  return keys;
}

function consume<T>(entry: { record: T; used: boolean } | undefined): Consumed<T> | null {
  if (entry === undefined) return null;
  const firstUse = !entry.used;
  entry.used = true;
  return { record: structuredClone(entry.record), firstUse };
}

function cloneOrNull<T>(value: T | undefined): T | null {
  return value === undefined ? null : structuredClone(value);
}
