import { TokengateError } from '../errors.js';
import type { TokenKind } from '../token/kinds.js';
import type { Backend } from './backend.js';

/**
 * The token store: one interface, a memory implementation (single instance, the embedded
 * default) and a Redis one (shared by every sidecar). Both pass test/store-contract.test.ts.
 *
 * Token values never reach the store: every token-keyed method takes the SHA-256 digest from
 * `tokenDigest()`. Times are Unix epoch milliseconds. Records past `expiresAt` are gone: the
 * store expires them itself (Redis TTLs, the memory store's sweep), not only on read.
 */

export interface ApplicationRecord {
  clientId: string;
  name: string;
  /** SHA-256 (base64url) of the client secret; null for a public client. */
  secretDigest: string | null;
  redirectUris: string[];
  scopes: string[];
  confidential: boolean;
  createdAt: number;
  /** `required`: the token endpoint issues this application DPoP-bound tokens only. Absent: `allowed`. */
  dpop?: 'required' | 'allowed';
  /** Resource identifiers its tokens may be for (RFC 8707); absent or empty: every registered resource. */
  resources?: string[];
  /** The rate limit policy (tier) that meters it instead of its routes' own; absent or null: theirs. */
  rateLimit?: string | null;
}

export interface UserRecord {
  id: string;
  /** Lower-cased; unique. */
  email: string;
  /** `scrypt$N$r$p$salt$hash` from src/issuer/passwords.ts. */
  passwordHash: string;
  createdAt: number;
}

export interface AuthorizationCodeRecord {
  clientId: string;
  userId: string;
  redirectUri: string;
  scopes: string[];
  codeChallenge: string | null;
  codeChallengeMethod: 'S256' | null;
  /** The token family the tokens issued from this code belong to. */
  familyId: string;
  /** Resource identifiers the grant was authorized for (RFC 8707); absent on codes issued without resources configured. */
  audience?: string[];
  issuedAt: number;
  expiresAt: number;
  /** `dpop_jkt` of the authorization request (RFC 9449 section 10): the code is redeemed only with a proof by that key. */
  jkt?: string;
}

export interface AccessTokenRecord {
  kind: TokenKind;
  clientId: string;
  /** Null for application tokens. */
  userId: string | null;
  scopes: string[];
  /** Null for application tokens; otherwise the authorization code grant it descends from. */
  familyId: string | null;
  /** Resource identifiers the token is for (RFC 8707); absent or empty on tokens issued without resources configured. */
  audience?: string[];
  issuedAt: number;
  expiresAt: number;
  /** DPoP binding (RFC 9449 section 6): the RFC 7638 thumbprint of the key every request must prove. Absent: a Bearer token. */
  jkt?: string;
}

export interface RefreshTokenRecord {
  clientId: string;
  userId: string;
  scopes: string[];
  familyId: string;
  /** The grant's audience (RFC 8707), which a refresh may narrow for one access token but never widen. */
  audience?: string[];
  issuedAt: number;
  expiresAt: number;
  /** DPoP binding of a public client's refresh token: refreshing needs a proof by this key. */
  jkt?: string;
}

/** Result of a single-use read (authorization codes, refresh tokens). */
export interface Consumed<T> {
  record: T;
  /** False when the value was consumed before: a replay. */
  firstUse: boolean;
}

/** What a revocation removed; sent to every sidecar so each drops those cache entries. */
export interface RevocationEvent {
  /** Digests of the access tokens removed. */
  accessTokens: string[];
  /** Epoch ms when the revoking store published it (revocation delay metric). */
  publishedAt: number;
}

export interface RevocationFeed {
  /** A revocation happened somewhere (this process or another sidecar). */
  onRevoked(event: RevocationEvent): void;
  /**
   * The feed was cut (a lost Redis subscription): until onReset, revocations published
   * elsewhere do not arrive, so a cache must not trust what it holds on its own.
   */
  onInterrupted(): void;
  /**
   * The feed was interrupted and is back (a lost Redis subscription), and the store answers
   * commands again: revocations may have been missed, so a cache must drop everything it holds.
   * Not before the store answers, or the cache would drop what it could still vouch for.
   */
  onReset(): void;
}

export type StoreHealth = 'up' | 'down';

/**
 * How long a revoked token family, or a deleted user's or application's tokens, stay marked so
 * that a token of theirs saved afterwards is born revoked, counted past their last token's
 * expiry: longer than any grant can be in flight.
 */
export const REVOKED_MARK_MS = 10 * 60_000;

export interface Store {
  /** Where the data lives: the rooms that keep keys of their own build on it (./backend.ts). */
  readonly backend: Backend;

  /** Resolves when the store answers; rejects with StoreUnavailableError otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;

  putApplication(app: ApplicationRecord): Promise<void>;
  getApplication(clientId: string): Promise<ApplicationRecord | null>;
  listApplications(): Promise<ApplicationRecord[]>;
  /** Deletes the application and revokes every token issued to it. */
  deleteApplication(clientId: string): Promise<boolean>;

  /** False when the e-mail is taken. */
  createUser(user: UserRecord): Promise<boolean>;
  getUser(id: string): Promise<UserRecord | null>;
  findUserByEmail(email: string): Promise<UserRecord | null>;
  listUsers(): Promise<UserRecord[]>;
  /** Deletes the user and revokes every token issued for them. */
  deleteUser(id: string): Promise<boolean>;

  saveAuthorizationCode(digest: string, record: AuthorizationCodeRecord): Promise<void>;
  /** Atomic single use: the first caller gets firstUse true; later ones (replays) false. */
  consumeAuthorizationCode(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null>;

  saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void>;
  getAccessToken(digest: string): Promise<AccessTokenRecord | null>;
  saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void>;
  getRefreshToken(digest: string): Promise<RefreshTokenRecord | null>;
  /** Atomic single use, as consumeAuthorizationCode: rotation and reuse detection. */
  consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null>;

  /** Each revoke* removes the tokens and publishes a RevocationEvent. They return how many went. */
  revokeAccessToken(digest: string): Promise<number>;
  revokeRefreshToken(digest: string): Promise<number>;
  revokeFamily(familyId: string): Promise<number>;
  revokeUserTokens(userId: string): Promise<number>;
  revokeClientTokens(clientId: string): Promise<number>;

  /** Starts delivering revocations from every sidecar. Resolves with an unsubscribe function. */
  subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>>;

  /** Increments a counter that lives `windowMs` from its first increment; returns the new value. */
  incrementCounter(key: string, windowMs: number): Promise<number>;
  /**
   * Takes back one increment of a live counter (an attempt counted up front that turned out not
   * to count); a counter already gone stays gone. The window's end does not move.
   */
  decrementCounter(key: string): Promise<void>;
  resetCounter(key: string): Promise<void>;

  /** Returns the secret stored under `name`, storing `candidate` first if there is none (shared by all sidecars). */
  getOrCreateSecret(name: string, candidate: string): Promise<string>;

  /** Server-side sessions of the authorization page, keyed by a digest of the session cookie. */
  saveSession(digest: string, data: SessionRecord, ttlMs: number): Promise<void>;
  getSession(digest: string): Promise<SessionRecord | null>;
  deleteSession(digest: string): Promise<void>;
}

export interface SessionRecord {
  userId: string | null;
  createdAt: number;
  [key: string]: unknown;
}

/** The store could not be reached or did not answer in time: callers answer 503, never 401. `detail` says what failed, for the log. */
export class StoreUnavailableError extends TokengateError {
  constructor(detail: string, options: { cause?: unknown } = {}) {
    super('STORE_UNAVAILABLE', { detail, cause: options.cause });
    this.name = 'StoreUnavailableError';
  }
}
