import { cloneOrNull, ExpiringMap } from '../expiring-map.js';
import { consume, type Consumed } from '../single-use.js';
import {
  exchangeIndex,
  exchangeIndexes,
  identityEmailIndex,
  identityIndexes,
  identityIssuerIndex,
  identitySubjectIndex,
  REVOKED_MARK_MS,
  userClientIndex,
  type IdentityOrigin,
  type AccessTokenRecord,
  type IndexRevocation,
  type RefreshTokenRecord,
  type RevocationEvent,
  type RevocationFeed,
  type Tokens,
} from './port.js';

type IndexedRecord = { clientId: string; userId: string | null; familyId: string | null; identity?: IdentityOrigin; exchangedFrom?: string[] };

/** The tokens of a single instance, with the same indexes and revocation rules as the Redis ones. */
export class MemoryTokens implements Tokens {
  private readonly accessTokens = new ExpiringMap<AccessTokenRecord>();
  private readonly refreshTokens = new ExpiringMap<{ record: RefreshTokenRecord; used: boolean }>();
  /** `user:ID`, `client:ID`, `family:ID`, `grant:DIGEST`... -> the access (`at:`) and refresh (`rt:`) digests under it. */
  private readonly index = new Map<string, Set<string>>();
  /** Index keys revoked for good (a family, a deleted user or application) -> until when a token of them is refused. */
  private readonly revokedForGood = new ExpiringMap<true>();
  private readonly feeds = new Set<RevocationFeed>();

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
    return this.removeMembers([`at:${digest}`]) + this.revokeIndexed(exchangeIndex(digest), true);
  }

  async revokeRefreshToken(digest: string): Promise<number> {
    return this.removeMembers([`rt:${digest}`]);
  }

  async revokeFamily(familyId: string): Promise<number> {
    return this.revokeIndexed(`family:${familyId}`, true);
  }

  async revokeUserTokens(userId: string, options: IndexRevocation = {}): Promise<number> {
    return this.revokeIndexed(`user:${userId}`, options.forGood === true);
  }

  async revokeClientTokens(clientId: string, options: IndexRevocation = {}): Promise<number> {
    return this.revokeIndexed(`client:${clientId}`, options.forGood === true);
  }

  async revokeUserClientTokens(userId: string, clientId: string): Promise<number> {
    return this.revokeIndexed(userClientIndex(userId, clientId), false);
  }

  async revokeIdentityTokens(issuer: string, subject?: string): Promise<number> {
    return this.revokeIndexed(subject === undefined ? identityIssuerIndex(issuer) : identitySubjectIndex(issuer, subject), false);
  }

  async revokeIdentityEmailTokens(issuer: string, email: string): Promise<number> {
    return this.revokeIndexed(identityEmailIndex(issuer, email), false);
  }

  async subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>> {
    this.feeds.add(feed);
    return async () => {
      this.feeds.delete(feed);
    };
  }

  /** Drops the expired tokens and the index entries that named them. */
  sweep(now: number): void {
    this.accessTokens.sweep(now);
    this.refreshTokens.sweep(now);
    this.revokedForGood.sweep(now);
    for (const [key, members] of this.index) {
      for (const member of members) {
        const live = member.startsWith('at:') ? this.accessTokens.has(member.slice(3)) : this.refreshTokens.has(member.slice(3));
        if (!live) members.delete(member);
      }
      if (members.size === 0) this.index.delete(key);
    }
  }

  /** No feed is told anything any more. */
  close(): void {
    this.feeds.clear();
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
}

function indexKeys(record: IndexedRecord): string[] {
  const keys = [`client:${record.clientId}`];
  if (record.userId !== null) keys.push(`user:${record.userId}`, userClientIndex(record.userId, record.clientId));
  if (record.familyId !== null) keys.push(`family:${record.familyId}`);
  if (record.identity !== undefined) keys.push(...identityIndexes(record.identity));
  keys.push(...exchangeIndexes(record.exchangedFrom));
  return keys;
}
