import { decodeJwt, decodeProtectedHeader, errors, jwtVerify, type JWTPayload } from 'jose';
import type { IdentityProviderConfig } from '../config/schema.js';
import { TokengateError } from '../errors.js';
import { KeySetUnavailableError, type ProviderKeySet } from './key-set.js';

/** The `typ` of an Identity Assertion JWT Authorization Grant (draft-ietf-oauth-identity-assertion-authz-grant). */
export const ID_JAG_TYPE = 'oauth-id-jag+jwt';
/** How far the provider's clock may be from ours, for `exp`, `nbf` and `iat`. */
export const CLOCK_LEEWAY_SECONDS = 30;

/** What a checked assertion says. */
export interface IdentityAssertion {
  readonly issuer: string;
  readonly subject: string;
  readonly jti: string;
  /** Epoch seconds. */
  readonly issuedAt: number;
  /** Epoch seconds. */
  readonly expiresAt: number;
  /** The `resource` claim, each a string; empty when the assertion has none. */
  readonly resources: string[];
  /** The `scope` claim split; undefined when the assertion has none. */
  readonly scopes: string[] | undefined;
  readonly claims: JWTPayload;
}

/** What the token request expects of the assertion. */
export interface AssertionExpectation {
  /** This issuer's identifier: the assertion's `aud`. */
  readonly audience: string;
  /** The authenticated client: the assertion's `client_id`. */
  readonly clientId: string;
}

export interface TrustedProvider {
  readonly config: IdentityProviderConfig;
  readonly keys: ProviderKeySet;
}

/** invalid_grant naming the claim that failed; never the assertion or a claim's value. */
export function refused(claim: string, why: string): TokengateError {
  return new TokengateError('INVALID_GRANT', { description: `The identity assertion's ${claim} ${why}.` });
}

/**
 * Checks an ID-JAG, in the order that lets each failure name its claim: its header (`typ`,
 * `alg`), its issuer (unverified, only to pick the provider and its keys), then the signature
 * and the registered claims by jose, then what this grant adds (`client_id`, lifetime, `jti`
 * present). What a claim means for this issuer (resource, scope, subject) is the grant's.
 */
export async function checkAssertion(
  assertion: string,
  findProvider: (issuer: string) => TrustedProvider | undefined,
  expected: AssertionExpectation,
): Promise<IdentityAssertion> {
  const header = readHeader(assertion);
  if (header.typ?.toLowerCase() !== ID_JAG_TYPE) throw refused('typ', `is not ${ID_JAG_TYPE}`);
  if (typeof header.alg !== 'string' || header.alg === 'none' || header.alg.startsWith('HS'))
    throw refused('alg', 'is not an asymmetric signature algorithm (none and HMAC are never accepted)');
  const issuer = readIssuer(assertion);
  const provider = findProvider(issuer);
  if (provider === undefined) throw refused('iss', 'is not a trusted identity provider');
  if (!(provider.config.algorithms as string[]).includes(header.alg)) throw refused('alg', 'is not one this identity provider is trusted to sign with');

  const claims = await verifySignatureAndTimes(assertion, provider, expected.audience);
  return checkGrantClaims(claims, provider.config, expected.clientId, issuer);
}

function readHeader(assertion: string): { typ?: string; alg?: string } {
  try {
    return decodeProtectedHeader(assertion);
  } catch {
    throw new TokengateError('INVALID_GRANT', { description: 'The assertion is not a signed JWT (compact serialization).' });
  }
}

function readIssuer(assertion: string): string {
  let claims: JWTPayload;
  try {
    claims = decodeJwt(assertion);
  } catch {
    throw new TokengateError('INVALID_GRANT', { description: 'The assertion is not a signed JWT (compact serialization).' });
  }
  if (typeof claims.iss !== 'string') throw refused('iss', 'is missing');
  return claims.iss;
}

async function verifySignatureAndTimes(assertion: string, provider: TrustedProvider, audience: string): Promise<JWTPayload> {
  try {
    const { payload } = await jwtVerify(assertion, provider.keys.key, {
      algorithms: [...provider.config.algorithms],
      typ: ID_JAG_TYPE,
      issuer: provider.config.issuer,
      audience,
      clockTolerance: CLOCK_LEEWAY_SECONDS,
      requiredClaims: ['exp', 'iat', 'jti', 'sub', 'client_id'],
    });
    return payload;
  } catch (error) {
    throw verificationRefusal(error);
  }
}

/** jose's error, as the claim it concerns. */
function verificationRefusal(error: unknown): TokengateError {
  if (error instanceof KeySetUnavailableError) return new TokengateError('IDENTITY_PROVIDER_UNAVAILABLE', { detail: error.reason, cause: error });
  if (error instanceof errors.JWTExpired) return refused('exp', 'has passed');
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === 'nbf') return refused('nbf', 'is in the future');
    if (error.claim === 'iat') return refused('iat', 'is not a valid time');
    if (error.reason === 'missing') return refused(error.claim, 'is missing');
    return refused(error.claim, error.claim === 'aud' ? 'is not this issuer' : 'is not valid');
  }
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys)
    return refused('kid', 'names no signing key the identity provider publishes');
  if (error instanceof errors.JOSEAlgNotAllowed) return refused('alg', 'is not one this identity provider is trusted to sign with');
  if (error instanceof errors.JWSSignatureVerificationFailed) return refused('signature', "does not verify with the identity provider's key");
  if (error instanceof errors.JWTInvalid || error instanceof errors.JWSInvalid) return refused('payload', 'is not a valid JWT');
  if (error instanceof errors.JOSEError) return refused('signature', 'could not be verified');
  return error instanceof TokengateError ? error : new TokengateError('INTERNAL', { cause: error });
}

function checkGrantClaims(claims: JWTPayload, config: IdentityProviderConfig, clientId: string, issuer: string): IdentityAssertion {
  const now = Math.floor(Date.now() / 1000);
  const iat = claims.iat!;
  const exp = claims.exp!;
  if (iat > now + CLOCK_LEEWAY_SECONDS) throw refused('iat', 'is in the future');
  if (exp - iat > config.maxAssertionLifetimeSeconds)
    throw refused('exp', `makes a lifetime (exp - iat) longer than the ${config.maxAssertionLifetimeSeconds} s accepted from this identity provider`);
  if (claims.client_id !== clientId) throw refused('client_id', 'is not the authenticated client');
  if (typeof claims.sub !== 'string' || claims.sub === '') throw refused('sub', 'is missing');
  if (typeof claims.jti !== 'string' || claims.jti === '') throw refused('jti', 'is missing');
  return {
    issuer,
    subject: claims.sub,
    jti: claims.jti,
    issuedAt: iat,
    expiresAt: exp,
    resources: readResources(claims.resource),
    scopes: readScopes(claims.scope),
    claims,
  };
}

function readResources(value: unknown): string[] {
  if (value === undefined) return [];
  const values = Array.isArray(value) ? value : [value];
  if (!values.every((item): item is string => typeof item === 'string' && item !== '')) throw refused('resource', 'is not a resource identifier');
  return [...new Set(values)];
}

function readScopes(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw refused('scope', 'is not a space-separated list of scopes');
  return value.split(' ').filter((scope) => scope !== '');
}
