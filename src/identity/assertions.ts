import { SignJWT } from 'jose';
import type { VerifiedToken } from '../store/verified-token.js';
import type { KeyRing } from './key-ring.js';

/** The JOSE `typ` of an identity assertion (RFC 8725 section 3.11): a verifier can tell it from any other JWT signed by a key it trusts. */
export const ASSERTION_TYPE = 'tokengate-identity+jwt';

/** An assertion that would be larger than `signedIdentity.maxBytes` (a user id longer than the config check assumed). */
export const TOO_LARGE = Symbol('identity assertion too large');

/** One assertion held for one token and audience, and the key that signed it. */
interface HeldAssertion {
  readonly kid: string;
  /** The compact JWT; '' while it is being signed. */
  value: string | typeof TOO_LARGE;
  /** Epoch ms from which the next request gets a new one. */
  renewAt: number;
  /** The signature in flight, which concurrent requests join. */
  pending: Promise<string | typeof TOO_LARGE> | null;
}

export interface SignerSettings {
  readonly issuer: string;
  readonly lifetimeSeconds: number;
  readonly maxBytes: number;
}

/** Where assertions are held: the token cache's attachments, which go with the token's entry. */
export interface AssertionHolder {
  attach(digest: string, key: string, value: object): void;
  attached(digest: string, key: string): object | string | undefined;
}

/**
 * Signs each token's identity once, not per request. An assertion is held with the token's entry
 * in the token cache (an attachment of the entry, per audience), with the id of the key that
 * signed it: a request gets the held one while its key is the one signing now and it is not near
 * its expiry. So an assertion leaves with its token's cache entry: a revoked token is dropped
 * from the cache, its next request reads the store, finds nothing (401) and never reaches this
 * step; and a rotation gets a new assertion under the new key at the first request after the
 * switch, never one a resource service could not match to a published key.
 *
 * Without the token cache (`cache.enabled: false`) nothing is held, so every request is signed.
 */
export class AssertionSigner {
  /** Re-signed this long before its expiry, so an assertion handed out has at least this long to live. */
  private readonly renewBeforeMs: number;

  constructor(
    private readonly ring: KeyRing,
    private readonly settings: SignerSettings,
  ) {
    this.renewBeforeMs = Math.ceil(settings.lifetimeSeconds / 4) * 1000;
  }

  /** The assertion of `token` (whose digest is `digest`) for `audience`: held by `holder`, or being signed (a promise). */
  assertion(
    holder: AssertionHolder | null,
    digest: string,
    token: VerifiedToken,
    audience: string,
  ): string | typeof TOO_LARGE | Promise<string | typeof TOO_LARGE> {
    const now = Date.now();
    const key = this.ring.signingKey(now);
    const held = holder?.attached(digest, audience) as HeldAssertion | undefined;
    if (held !== undefined && held.kid === key.kid) {
      if (held.pending !== null) return held.pending;
      if (now < held.renewAt) return held.value;
    }
    const signing: HeldAssertion = { kid: key.kid, value: '', renewAt: 0, pending: null };
    signing.pending = this.sign(token, audience, now, signing);
    holder?.attach(digest, audience, signing);
    return signing.pending;
  }

  private async sign(token: VerifiedToken, audience: string, now: number, into: HeldAssertion): Promise<string | typeof TOO_LARGE> {
    const key = this.ring.signingKey(now);
    const issuedAt = Math.floor(now / 1000);
    const tokenEnds = Math.floor(token.expiresAt / 1000);
    // Never valid longer than the token it speaks for.
    const expires = Math.min(issuedAt + this.settings.lifetimeSeconds, tokenEnds);
    const claims: Record<string, unknown> = {
      iss: this.settings.issuer,
      aud: audience,
      sub: token.userId ?? token.clientId,
      client_id: token.clientId,
      token_kind: token.kind,
      scope: token.scope,
      iat: issuedAt,
      exp: expires,
    };
    if (token.jkt !== undefined && token.jkt !== null) claims.cnf = { jkt: token.jkt };
    // RFC 8693 section 4.1: the service acting for the user. Only the one acting now, not those
    // before it in a chain of exchanges (introspection shows the chain): the assertion's size
    // stays bounded, as the config check counts it.
    if (token.act !== undefined) claims.act = { client_id: token.act.clientId };
    try {
      const jwt = await new SignJWT(claims).setProtectedHeader({ alg: key.alg, kid: key.kid, typ: ASSERTION_TYPE }).sign(key.privateKey);
      into.value = jwt.length > this.settings.maxBytes ? TOO_LARGE : jwt;
      // One that ends with its token is never renewed: the token ends then too.
      into.renewAt = expires === tokenEnds ? Infinity : expires * 1000 - this.renewBeforeMs;
      return into.value;
    } finally {
      into.pending = null;
    }
  }
}
