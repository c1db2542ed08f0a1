import { decodeJwt, decodeProtectedHeader, errors, jwtVerify, type JWTPayload } from 'jose';
import { TokengateError } from '../errors.js';
import { KeySetUnavailableError } from '../identity-providers/key-set.js';
import type { TrustedProvider } from '../identity-providers/assertion.js';

/** The `typ` of a Security Event Token (RFC 8417 section 2.3). */
export const SET_TYPE = 'secevent+jwt';
/** How far the provider's clock may be from ours, for `iat` (as for its identity assertions). */
export const SET_CLOCK_LEEWAY_SECONDS = 30;
/** A SET is a short JWT: anything longer is not one. */
export const MOST_SET_BYTES = 64 * 1024;
/** SSF 1.0 puts one event in a SET; a few more are read (RFC 8417 allows extensions of one event), not any number. */
const MOST_EVENTS = 8;

/** A SET whose signature and claims checked out. */
export interface VerifiedSet {
  readonly jti: string;
  /** Epoch seconds. */
  readonly issuedAt: number;
  /** The event type URIs and their payloads, in the SET's order. */
  readonly events: ReadonlyArray<{ readonly type: string; readonly payload: Record<string, unknown> }>;
  /** The SET's `sub_id` (SSF 1.0); undefined when it has none (an event may carry its own `subject`). */
  readonly subject: unknown;
}

/** What a SET is checked against: the provider (its issuer, algorithms and key set), this receiver's audience, the oldest `iat` taken. */
export interface SetExpectation {
  readonly provider: TrustedProvider;
  readonly audience: string;
  readonly maxAgeSeconds: number;
}

/**
 * Checks a SET (RFC 8417, RFC 8935 section 2), each failure the RFC 8935 error it is: its header
 * (`typ` secevent+jwt; `alg` asymmetric and one the provider signs with, never `none`, never
 * HMAC), its issuer (before the signature: only the provider's keys are tried), then jose's
 * signature and claim checks with the provider's key set (the one its identity assertions are
 * checked with), then what a SET must hold (`jti`, `events`). The SET itself is never put in an
 * error or a log.
 */
export async function verifySet(set: string, expected: SetExpectation): Promise<VerifiedSet> {
  const { provider } = expected;
  const header = readHeader(set);
  if (typeof header.typ !== 'string' || header.typ.toLowerCase().replace(/^application\//, '') !== SET_TYPE)
    throw refusal('SET_INVALID_REQUEST', `The SET's typ is not ${SET_TYPE}.`);
  if (typeof header.alg !== 'string' || header.alg.toLowerCase() === 'none' || header.alg.toUpperCase().startsWith('HS'))
    throw refusal('SET_INVALID_KEY', 'The SET is not signed with an asymmetric algorithm (none and HMAC are never accepted).');
  if (!(provider.config.algorithms as string[]).includes(header.alg))
    throw refusal('SET_INVALID_KEY', 'The SET is signed with an algorithm this identity provider is not trusted to sign with.');
  if (readIssuer(set) !== provider.config.issuer) throw refusal('SET_INVALID_ISSUER', "The SET's iss is not this receiver's identity provider.");
  const claims = await verifySignatureAndClaims(set, expected);
  return readSet(claims);
}

function readHeader(set: string): { typ?: unknown; alg?: unknown } {
  try {
    return decodeProtectedHeader(set);
  } catch {
    throw refusal('SET_INVALID_REQUEST', 'The request body is not a signed JWT (compact serialization).');
  }
}

function readIssuer(set: string): unknown {
  try {
    return decodeJwt(set).iss;
  } catch {
    throw refusal('SET_INVALID_REQUEST', 'The request body is not a signed JWT (compact serialization).');
  }
}

async function verifySignatureAndClaims(set: string, { provider, audience, maxAgeSeconds }: SetExpectation): Promise<JWTPayload> {
  try {
    const { payload } = await jwtVerify(set, provider.keys.key, {
      algorithms: [...provider.config.algorithms],
      typ: SET_TYPE,
      issuer: provider.config.issuer,
      audience,
      clockTolerance: SET_CLOCK_LEEWAY_SECONDS,
      maxTokenAge: maxAgeSeconds,
      requiredClaims: ['iat', 'jti', 'events'],
    });
    return payload;
  } catch (error) {
    throw verificationRefusal(error);
  }
}

/** jose's error, as the RFC 8935 error it is. A key set that cannot be fetched is no verdict on the SET: it is answered 503. */
function verificationRefusal(error: unknown): TokengateError {
  if (error instanceof KeySetUnavailableError) return new TokengateError('IDENTITY_PROVIDER_UNAVAILABLE', { detail: error.reason, cause: error });
  if (error instanceof errors.JWTClaimValidationFailed || error instanceof errors.JWTExpired) {
    if (error.claim === 'aud') return refusal('SET_INVALID_AUDIENCE', "The SET's aud is not this receiver.");
    if (error.claim === 'iss') return refusal('SET_INVALID_ISSUER', "The SET's iss is not this receiver's identity provider.");
    if (error.claim === 'iat') return refusal('SET_INVALID_REQUEST', "The SET's iat is missing, in the future or older than this receiver accepts.");
    return refusal('SET_INVALID_REQUEST', `The SET's ${error.claim} is ${error.reason === 'missing' ? 'missing' : 'not valid'}.`);
  }
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys)
    return refusal('SET_INVALID_KEY', "The SET's kid names no signing key the identity provider publishes.");
  if (error instanceof errors.JOSEAlgNotAllowed)
    return refusal('SET_INVALID_KEY', 'The SET is signed with an algorithm this identity provider is not trusted to sign with.');
  if (error instanceof errors.JWSSignatureVerificationFailed)
    return refusal('SET_INVALID_KEY', "The SET's signature does not verify with the identity provider's key.");
  if (error instanceof errors.JOSEError) return refusal('SET_INVALID_REQUEST', 'The SET is not a valid JWT.');
  return error instanceof TokengateError ? error : new TokengateError('INTERNAL', { cause: error });
}

function readSet(claims: JWTPayload): VerifiedSet {
  if (typeof claims.jti !== 'string' || claims.jti === '' || claims.jti.length > 256)
    throw refusal('SET_INVALID_REQUEST', "The SET's jti is missing or not a string.");
  const events = claims.events;
  if (typeof events !== 'object' || events === null || Array.isArray(events) || Object.keys(events).length === 0)
    throw refusal('SET_INVALID_REQUEST', "The SET's events claim holds no event.");
  if (Object.keys(events).length > MOST_EVENTS) throw refusal('SET_INVALID_REQUEST', `The SET holds more than ${MOST_EVENTS} events.`);
  const read = Object.entries(events as Record<string, unknown>).map(([type, payload]) => {
    if (typeof payload !== 'object' || payload === null || Array.isArray(payload))
      throw refusal('SET_INVALID_REQUEST', 'An event of the SET is not a JSON object.');
    return { type, payload: payload as Record<string, unknown> };
  });
  return { jti: claims.jti, issuedAt: claims.iat!, events: read, subject: claims.sub_id };
}

function refusal(code: 'SET_INVALID_REQUEST' | 'SET_INVALID_KEY' | 'SET_INVALID_ISSUER' | 'SET_INVALID_AUDIENCE', description: string): TokengateError {
  return new TokengateError(code, { description });
}
