import { calculateJwkThumbprint, EmbeddedJWK, errors, jwtVerify, type JWK } from 'jose';
import { DPOP_SIGNING_ALGORITHMS } from './algorithms.js';

/** A DPoP proof whose signature, type, algorithm and age were checked (RFC 9449 section 4.3, steps 1-9 less the request's own). */
export interface VerifiedProof {
  /** RFC 7638 thumbprint (SHA-256, base64url) of the public key that signed it. */
  readonly jkt: string;
  readonly jti: string;
  readonly htm: string;
  readonly htu: string;
  readonly ath: string | undefined;
  readonly nonce: string | undefined;
}

/** `stale`: its `iat` is outside the accepted window; `invalid`: anything else. */
export type ProofFailure = 'invalid' | 'stale';

export interface ProofWindow {
  /** How old a proof may be, in seconds. */
  readonly maxAgeSeconds: number;
  /** How far ahead of this clock a proof's `iat` may be, in seconds. */
  readonly clockSkewSeconds: number;
}

/** Longest proof accepted, in characters: an RSA-4096 key and every claim fit well within it. */
const MAX_PROOF_LENGTH = 8_192;
/** Longest `jti` accepted: RFC 9449 asks for 96 bits of randomness; 256 characters leave room for any encoding. */
const MAX_JTI_LENGTH = 256;
const ALGORITHMS: string[] = [...DPOP_SIGNING_ALGORITHMS];

/**
 * Checks a proof with `jose`: a compact JWS of `typ: dpop+jwt`, signed with an allowed
 * asymmetric algorithm by the public key in its own `jwk` header (a private or symmetric key
 * there is refused), `iat` within the window, and the claims every proof has.
 */
export async function verifyProof(proof: string, window: ProofWindow): Promise<VerifiedProof | ProofFailure> {
  if (proof.length > MAX_PROOF_LENGTH) return 'invalid';
  let verified;
  try {
    verified = await jwtVerify(proof, EmbeddedJWK, {
      typ: 'dpop+jwt',
      algorithms: ALGORITHMS,
      maxTokenAge: window.maxAgeSeconds,
      clockTolerance: window.clockSkewSeconds,
    });
  } catch (error) {
    return isIatFailure(error) ? 'stale' : 'invalid';
  }
  const { payload, protectedHeader } = verified;
  const { jti, htm, htu, ath, nonce } = payload as Record<string, unknown>;
  if (typeof jti !== 'string' || jti === '' || jti.length > MAX_JTI_LENGTH) return 'invalid';
  if (typeof htm !== 'string' || typeof htu !== 'string') return 'invalid';
  if (ath !== undefined && typeof ath !== 'string') return 'invalid';
  if (nonce !== undefined && typeof nonce !== 'string') return 'invalid';
  const jkt = await calculateJwkThumbprint(protectedHeader.jwk as JWK, 'sha256');
  return { jkt, jti, htm, htu, ath, nonce };
}

/** jose's refusals of `iat`: too far in the past (maxTokenAge) or in the future (clockTolerance). */
function isIatFailure(error: unknown): boolean {
  if (error instanceof errors.JWTExpired) return true;
  return error instanceof errors.JWTClaimValidationFailed && error.claim === 'iat' && error.reason !== 'missing';
}
