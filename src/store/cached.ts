import type { CacheConfig } from '../config/schema.js';
import type { Metrics } from '../observability/metrics.js';
import type { VerifiedToken } from './verified-token.js';
import type { Consumed } from './single-use.js';
import { StoreUnavailableError } from './store.js';
import { UnknownTokens, ValidTokens, type CachedToken } from './token-cache.js';
import type { AccessTokenRecord, IndexRevocation, RefreshTokenRecord, RevocationEvent, RevocationFeed, Tokens } from './tokens/port.js';

/**
 * Puts the token cache in front of the store's token port; the result is itself the token port
 * (`withTokens` in ./store.ts puts it in a store). It subscribes to the revocation feed in the
 * background: until that is up (Redis may be down at start) it reads every token from the
 * store, as it does whenever the feed is down.
 */
export function cached(tokens: Tokens, config: CacheConfig, metrics: Metrics): CachedTokens {
  return new CachedTokens(tokens, config, metrics);
}

/** A store read in flight, which concurrent misses for the same token join. */
interface PendingRead {
  promise: Promise<VerifiedToken | null>;
  /**
   * A revocation, a save or a reset happened while it was in flight: its answer still goes to
   * the callers already waiting (they asked before), but it is not cached.
   */
  outdated: boolean;
}

/**
 * The tokens as the gateway reads them: an in-process read-through LRU cache of access tokens
 * in front of the shared store's token port, kept compact (./token-cache.ts). Only getAccessToken is cached; the other methods
 * go to the port, and the revoking ones also drop here what they revoked.
 *
 * - A token is answered from the cache at most `ttlSeconds` after it was read, never past its
 *   own expiry, and only while the revocation feed is up.
 * - Concurrent misses for one token share one store call.
 * - Unknown tokens are remembered `negativeTtlSeconds` in a second, smaller LRU, so a flood of
 *   them cannot evict a valid token. A token saved through this store is accepted at once; one
 *   saved elsewhere after this sidecar found it unknown is refused here at most
 *   `negativeTtlSeconds` (the issuer saves a token before handing it out, so that takes a
 *   client presenting a token before it was issued).
 * - Revocations from any sidecar drop their entries as they arrive. While the feed is down the
 *   cache cannot know what was revoked, so every lookup asks the store first and the cache only
 *   answers when the store cannot (in a full Redis outage nothing can be revoked either); when
 *   the feed is back the whole cache is dropped, since messages may have been missed.
 * - A store failure is never taken for "unknown": it surfaces as StoreUnavailableError (503),
 *   unless the token was cached and is still within its cache life, or the
 *   `staleIfErrorSeconds` grace past it.
 *
 * Records handed out are frozen: several requests share one object.
 */
export class CachedTokens implements Tokens {
  private readonly valid: ValidTokens;
  private readonly unknown: UnknownTokens;
  private readonly pending = new Map<string, PendingRead>();
  private readonly negativeTtlMs: number;
  private feedUp = false;
  private stopped = false;
  private unsubscribe: (() => Promise<void>) | null = null;
  /** Resolves once revocations from every sidecar arrive (or the store closed first). */
  readonly subscribed: Promise<void>;

  // Metric children bound once: a cache hit costs one addition.
  private readonly hits;
  private readonly validEntries;
  private readonly unknownEntries;
  private readonly storeOk;
  private readonly storeFailed;

  constructor(
    private readonly tokens: Tokens,
    config: CacheConfig,
    private readonly metrics: Metrics,
  ) {
    this.negativeTtlMs = config.negativeTtlSeconds * 1000;
    const validEvictions = metrics.cacheEvictions.labels('valid');
    const unknownEvictions = metrics.cacheEvictions.labels('unknown');
    validEvictions.inc(0);
    unknownEvictions.inc(0);
    this.valid = new ValidTokens(config.maxEntries, config.ttlSeconds * 1000, config.staleIfErrorSeconds * 1000, () => validEvictions.inc());
    this.unknown = new UnknownTokens(config.negativeMaxEntries, () => unknownEvictions.inc());
    this.hits = metrics.cacheHits.labels();
    this.validEntries = metrics.cacheEntries.labels('valid');
    this.unknownEntries = metrics.cacheEntries.labels('unknown');
    this.storeOk = metrics.storeDuration.labels('ok');
    this.storeFailed = metrics.storeDuration.labels('error');
    this.countEntries();
    this.setFeedUp(false);
    this.subscribed = this.subscribe();
  }

  private async subscribe(): Promise<void> {
    const unsubscribe = await this.tokens
      .subscribeRevocations({
        onRevoked: (event) => this.dropRevoked(event),
        onInterrupted: () => this.setFeedUp(false),
        onReset: () => this.reset(),
      })
      .catch(() => null); // the store was closed before the subscription came up
    if (unsubscribe === null) return;
    if (this.stopped) return unsubscribe();
    this.unsubscribe = unsubscribe;
    // What was read before the subscription was up may have been revoked since, unheard.
    this.clear();
    this.setFeedUp(true);
  }

  /** Stops listening and empties the cache; the store stays open (its owner closes it). */
  async stop(): Promise<void> {
    this.stopped = true;
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    this.setFeedUp(false);
    this.clear();
    await unsubscribe?.();
  }

  /**
   * The gateway's lookup, in two halves so that a hit costs one LRU read and no promise:
   * `peek` finds the entry, `answers` says whether the cache answers for it by itself (fresh,
   * revocation feed up; a hit is counted). Otherwise `miss(digest, peeked)` goes on from what
   * `peek` found. Every entry was read for a value that passed the tag check (the gateway and the
   * issuer check it before any lookup), so a hit needs no second check.
   */
  peek(digest: string): CachedToken | undefined {
    return this.valid.get(digest);
  }

  answers(entry: CachedToken): boolean {
    if (!(Date.now() < entry.freshUntil && this.feedUp)) return false;
    this.hits.inc();
    return true;
  }

  /** The issuer's lookup (the gateway's is peek, answers, miss): the cached token itself, frozen, a record with more fields. */
  getAccessToken(digest: string): Promise<VerifiedToken | null> {
    const entry = this.valid.get(digest);
    return entry !== undefined && this.answers(entry) ? Promise.resolve(entry) : this.miss(digest, entry);
  }

  /**
   * The store's own record, past the cache: the whole of it (the cache keeps what the gateway
   * needs, not a token's lineage), and never one revoked a moment ago on another sidecar. For the
   * issuer's rare reads that act on a token's record (a token exchange's subject token).
   */
  storedAccessToken(digest: string): Promise<AccessTokenRecord | null> {
    return this.tokens.getAccessToken(digest);
  }

  /** Whether the cache holds `digest` as a token the store did not know, a moment ago (a trace says so). */
  knowsUnknown(digest: string): boolean {
    const unknownUntil = this.unknown.get(digest);
    return unknownUntil !== undefined && Date.now() < unknownUntil;
  }

  /**
   * Keeps `value` with the cached entry of `digest` under `key`, for something derived from the
   * token that costs to make again (a signed identity assertion per audience and key id): it is
   * dropped with the entry (evicted, revoked, replaced, cleared on a feed reset). Nothing is kept
   * for a token that is not cached.
   */
  attach(digest: string, key: string, value: object | string): void {
    this.valid.attach(digest, key, value);
  }

  /** What was attached to the cached entry of `digest` under `key`, while the entry lasts. */
  attached(digest: string, key: string): object | string | undefined {
    return this.valid.attached(digest, key);
  }

  /** What the cache cannot answer by itself: a known-expired or known-unknown token, or a store read. */
  miss(digest: string, entry: CachedToken | undefined): Promise<VerifiedToken | null> {
    const now = Date.now();
    if (entry !== undefined) {
      if (now >= entry.expiresAt) {
        // Known expired: no store can make it valid again.
        this.valid.delete(digest);
        this.countEntries();
        return Promise.resolve(null);
      }
    } else {
      const unknownUntil = this.unknown.get(digest);
      if (unknownUntil !== undefined && now < unknownUntil) {
        this.metrics.cacheNegativeHits.inc();
        return Promise.resolve(null);
      }
    }
    return this.readThrough(digest, entry);
  }

  private async readThrough(digest: string, entry: CachedToken | undefined): Promise<VerifiedToken | null> {
    try {
      return await this.read(digest);
    } catch (error) {
      if (!(error instanceof StoreUnavailableError) || entry === undefined || !this.valid.holds(digest, entry)) throw error;
      // A token read before stays good while the store cannot answer, within its cache life or
      // the configured grace past it, and never past its own expiry (which may pass while the
      // store is being asked: then it is known invalid, store or not).
      const now = Date.now();
      if (now >= entry.expiresAt) return null;
      if (now >= entry.staleUntil) throw error;
      this.metrics.cacheStaleHits.inc();
      return entry;
    }
  }

  private read(digest: string): Promise<VerifiedToken | null> {
    const inFlight = this.pending.get(digest);
    if (inFlight !== undefined) {
      this.metrics.cacheSharedMisses.inc();
      return inFlight.promise;
    }
    this.metrics.cacheMisses.inc();
    const pending = { outdated: false } as PendingRead;
    pending.promise = this.fetch(digest, pending);
    this.pending.set(digest, pending);
    return pending.promise;
  }

  private async fetch(digest: string, pending: PendingRead): Promise<VerifiedToken | null> {
    const started = performance.now();
    let record: AccessTokenRecord | null;
    try {
      record = await this.tokens.getAccessToken(digest);
    } catch (error) {
      this.storeFailed.observe((performance.now() - started) / 1000);
      if (error instanceof StoreUnavailableError) this.metrics.storeUp.set(0);
      throw error;
    } finally {
      if (this.pending.get(digest) === pending) this.pending.delete(digest);
    }
    this.storeOk.observe((performance.now() - started) / 1000);
    this.metrics.storeUp.set(1);
    const now = Date.now();
    const entry = record === null || record.expiresAt <= now ? null : this.valid.entryFor(record, now);
    if (!pending.outdated) this.remember(digest, entry, now);
    return entry;
  }

  private remember(digest: string, entry: CachedToken | null, now: number): void {
    if (entry === null) {
      this.valid.delete(digest);
      if (this.negativeTtlMs > 0) this.unknown.set(digest, now + this.negativeTtlMs);
    } else {
      this.valid.remember(digest, entry, now);
      this.unknown.delete(digest);
    }
    this.countEntries();
  }

  /** Drops everything known about one token, including a read in flight for it. */
  private forget(digest: string): void {
    this.valid.delete(digest);
    this.unknown.delete(digest);
    const inFlight = this.pending.get(digest);
    if (inFlight !== undefined) {
      inFlight.outdated = true;
      this.pending.delete(digest);
    }
  }

  private dropRevoked(event: RevocationEvent): void {
    for (const digest of event.accessTokens) this.forget(digest);
    this.countEntries();
    this.metrics.revocationMessages.inc();
    if (Number.isFinite(event.publishedAt)) this.metrics.revocationDelay.observe(Math.max(0, Date.now() - event.publishedAt) / 1000);
  }

  /** The feed is back after an interruption: whatever was revoked meanwhile went unheard. */
  private reset(): void {
    this.clear();
    this.metrics.cacheResets.inc();
    this.setFeedUp(true);
  }

  private clear(): void {
    this.valid.clear();
    this.unknown.clear();
    this.outdatePendingReads();
    this.countEntries();
  }

  private outdatePendingReads(): void {
    for (const inFlight of this.pending.values()) inFlight.outdated = true;
    this.pending.clear();
  }

  /**
   * After revoking by user, application or token family: the cache does not know the digests
   * the store removed (their messages follow on the feed), so it drops every entry whose record
   * matches, at once, and keeps no read that was in flight meanwhile.
   */
  private async dropMatching<T>(revocation: Promise<T>, field: 'userId' | 'familyId' | 'clientId', value: string): Promise<T> {
    const result = await revocation;
    this.valid.deleteMatching(field, value);
    this.outdatePendingReads();
    this.countEntries();
    return result;
  }

  /** As dropMatching, for the tokens of one user at one application. */
  private async dropRevokedOf<T>(revocation: Promise<T>, userId: string, clientId: string): Promise<T> {
    const result = await revocation;
    this.valid.deleteUserClient(userId, clientId);
    this.outdatePendingReads();
    this.countEntries();
    return result;
  }

  private countEntries(): void {
    this.validEntries.set(this.valid.size);
    this.unknownEntries.set(this.unknown.size);
  }

  private setFeedUp(up: boolean): void {
    this.feedUp = up;
    this.metrics.revocationFeedUp.set(up ? 1 : 0);
  }

  // Writes that change what a lookup must answer.

  async saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void> {
    await this.tokens.saveAccessToken(digest, record);
    // It may have been looked up as unknown a moment ago; that answer is void now.
    this.forget(digest);
    this.countEntries();
  }

  async revokeAccessToken(digest: string): Promise<number> {
    const removed = await this.tokens.revokeAccessToken(digest);
    this.forget(digest);
    this.countEntries();
    return removed;
  }

  revokeFamily(familyId: string): Promise<number> {
    return this.dropMatching(this.tokens.revokeFamily(familyId), 'familyId', familyId);
  }

  revokeUserTokens(userId: string, options?: IndexRevocation): Promise<number> {
    return this.dropMatching(this.tokens.revokeUserTokens(userId, options), 'userId', userId);
  }

  revokeClientTokens(clientId: string, options?: IndexRevocation): Promise<number> {
    return this.dropMatching(this.tokens.revokeClientTokens(clientId, options), 'clientId', clientId);
  }

  revokeUserClientTokens(userId: string, clientId: string): Promise<number> {
    return this.dropRevokedOf(this.tokens.revokeUserClientTokens(userId, clientId), userId, clientId);
  }

  /**
   * The cache does not keep a token's identity provider subject: the revocation feed, which
   * names every access token removed, drops them here as on every other sidecar.
   */
  revokeIdentityTokens(issuer: string, subject?: string): Promise<number> {
    return this.tokens.revokeIdentityTokens(issuer, subject);
  }

  revokeIdentityEmailTokens(issuer: string, email: string): Promise<number> {
    return this.tokens.revokeIdentityEmailTokens(issuer, email);
  }

  // The rest of the port: nothing the cache holds depends on them (a refresh token is never cached, and revoking one announces no access token).

  saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void> {
    return this.tokens.saveRefreshToken(digest, record);
  }
  getRefreshToken(digest: string): Promise<RefreshTokenRecord | null> {
    return this.tokens.getRefreshToken(digest);
  }
  consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null> {
    return this.tokens.consumeRefreshToken(digest);
  }
  revokeRefreshToken(digest: string): Promise<number> {
    return this.tokens.revokeRefreshToken(digest);
  }
  subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>> {
    return this.tokens.subscribeRevocations(feed);
  }
}
