import { hash } from 'node:crypto';
import type { OpenIdSignIn } from '../codes.js';
import type { TokenKind } from '../../token/kinds.js';
import type { Consumed } from '../single-use.js';

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
  /** The identity provider's subject an identity assertion (ID-JAG) named; absent for tokens of other grants. */
  identity?: IdentityOrigin;
  /** For a token from a token exchange (RFC 8693): the party acting for the user (the `act` claim). */
  act?: ActingParty;
  /**
   * For a token from a token exchange: the digests of the access tokens it descends from, the
   * subject token first, then the one that token was exchanged from, and so on. It is indexed
   * under each (`exchanged:<digest>`), so revoking any of them revokes it.
   */
  exchangedFrom?: string[];
}

/** RFC 8693 section 4.1: who acts; `act` nested inside: who acted before it, in a chain of exchanges. */
export interface ActingParty {
  clientId: string;
  act?: ActingParty;
}

/** The index names (after `idx:`) of a token exchanged from others: one per token it descends from. */
export function exchangeIndexes(exchangedFrom: readonly string[] | undefined): string[] {
  return (exchangedFrom ?? []).map(exchangeIndex);
}

export function exchangeIndex(subjectDigest: string): string {
  return `exchanged:${subjectDigest}`;
}

/**
 * The index name (after `idx:`) of every token of one user at one application: what
 * disconnecting the application, or revoking the user's grant to it, revokes. Hashed: a client
 * id may be a long URL (a metadata document's).
 */
export function userClientIndex(userId: string, clientId: string): string {
  return `grant:${hash('sha256', `${userId}\n${clientId}`, 'base64url')}`;
}

/** Who, at which identity provider, a token was issued for. */
export interface IdentityOrigin {
  /** The provider's `iss`. */
  issuer: string;
  /** Its `sub`. */
  subject: string;
  /**
   * The e-mail address (lower-cased) the assertion named its user by: the provider may name the
   * same person by it (a Shared Signals subject of format `email`). Absent on tokens issued before it was kept.
   */
  email?: string;
}

/**
 * The index names (after `idx:`) of a token issued from an identity assertion: one of every
 * token of the subject, one of every token of the provider (revoked when it is no longer
 * trusted), and one of every token of the subject's e-mail address at that provider. Hashed: an
 * issuer URL or a subject may be long, and holds characters a key should not.
 */
export function identityIndexes(identity: IdentityOrigin): string[] {
  const indexes = [identitySubjectIndex(identity.issuer, identity.subject), identityIssuerIndex(identity.issuer)];
  if (identity.email !== undefined) indexes.push(identityEmailIndex(identity.issuer, identity.email));
  return indexes;
}

export function identityEmailIndex(issuer: string, email: string): string {
  return `idp-email:${hash('sha256', `${issuer}\n${email}`, 'base64url')}`;
}

export function identitySubjectIndex(issuer: string, subject: string): string {
  return `idp-subject:${hash('sha256', `${issuer}\n${subject}`, 'base64url')}`;
}

export function identityIssuerIndex(issuer: string): string {
  return `idp:${hash('sha256', issuer, 'base64url')}`;
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
  /** The id of the user's grant to the application it was issued under (../grants.ts); absent on refresh tokens from before grants were kept. */
  grantId?: string;
  /** The OpenID Connect sign-in of its grant, for the ID token of each refresh (never its nonce). */
  openid?: Omit<OpenIdSignIn, 'nonce'>;
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

/**
 * `forGood`: the user or application is gone for good (deleted), so a token of theirs saved
 * afterwards (a grant in flight) is born revoked, as every token of a revoked family is.
 */
export interface IndexRevocation {
  forGood?: boolean;
}

/**
 * How long a revoked token family, or a deleted user's or application's tokens, stay marked so
 * that a token of theirs saved afterwards is born revoked, counted past their last token's
 * expiry: longer than any grant can be in flight.
 */
export const REVOKED_MARK_MS = 10 * 60_000;

/**
 * Access and refresh tokens, keyed by their digest, indexed by application, user and token
 * family for revocation, and the feed that tells every sidecar what was revoked. One port, not
 * two: both kinds live in the same indexes, and revoking a family or a user removes both.
 */
export interface Tokens {
  saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void>;
  getAccessToken(digest: string): Promise<AccessTokenRecord | null>;
  saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void>;
  getRefreshToken(digest: string): Promise<RefreshTokenRecord | null>;
  /** Atomic single use, as authorization codes: rotation and reuse detection. */
  consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null>;

  /**
   * Each revoke* removes the tokens and publishes a RevocationEvent. They return how many went.
   * Revoking an access token revokes the tokens exchanged from it too, for good: one exchanged
   * from it while it was being revoked is born revoked.
   */
  revokeAccessToken(digest: string): Promise<number>;
  revokeRefreshToken(digest: string): Promise<number>;
  /** A family revoked is revoked for good: a token of it saved later is born revoked. */
  revokeFamily(familyId: string): Promise<number>;
  revokeUserTokens(userId: string, options?: IndexRevocation): Promise<number>;
  revokeClientTokens(clientId: string, options?: IndexRevocation): Promise<number>;
  /**
   * Every token of one user at one application, whatever grant type issued it. Never for good:
   * the user may connect the application again at once (what keeps a token issued during the
   * revocation from outliving it is the grant's own check, src/issuer/grant-types/grant-check.ts).
   */
  revokeUserClientTokens(userId: string, clientId: string): Promise<number>;
  /** Every token issued from the identity assertions of one subject of a provider, or, without a subject, of the whole provider. */
  revokeIdentityTokens(issuer: string, subject?: string): Promise<number>;
  /** Every token issued from the identity assertions of a provider that named their user by this e-mail address (lower-cased). */
  revokeIdentityEmailTokens(issuer: string, email: string): Promise<number>;

  /** Starts delivering revocations from every sidecar. Resolves with an unsubscribe function. */
  subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>>;
}
