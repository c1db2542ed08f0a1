import { calculateJwkThumbprint, EmbeddedJWK, errors, jwtVerify, type CryptoKey, type FlattenedJWSInput, type JWK, type JWSHeaderParameters } from 'jose';
import { LRUCache } from 'lru-cache';
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

/** A proof's public key as jose imported it from the `jwk` header, and its thumbprint. */
interface ProofKey {
  readonly key: CryptoKey;
  readonly jkt: string;
}

/**
 * The keys of recent proofs, by their protected header exactly as sent (base64url): a client
 * sends the same header with every proof, so its key is imported and its thumbprint computed
 * once, not per request. Only a header jose's EmbeddedJWK accepted (a public key) gets here, and
 * identical header bytes can only hold the same key. Bounded: a flood of new keys evicts, and
 * each of those costs the import it would cost anyway.
 */
const proofKeys = new LRUCache<string, Promise<ProofKey>>({ max: 10_000 });

function proofKeyOf(protectedHeader: JWSHeaderParameters, token: FlattenedJWSInput): Promise<ProofKey> {
  const cacheKey = token.protected ?? '';
  let known = proofKeys.get(cacheKey);
  if (known === undefined) {
    known = importProofKey(protectedHeader, token);
    proofKeys.set(cacheKey, known);
    // A header jose refuses is not remembered: the next proof with it is refused the same way.
    known.catch(() => proofKeys.delete(cacheKey));
  }
  return known;
}

async function importProofKey(protectedHeader: JWSHeaderParameters, token: FlattenedJWSInput): Promise<ProofKey> {
  const key = (await EmbeddedJWK(protectedHeader, token)) as CryptoKey;
  return { key, jkt: await calculateJwkThumbprint(protectedHeader.jwk as JWK, 'sha256') };
}

/**
 * Checks a proof with `jose`: a compact JWS of `typ: dpop+jwt`, signed with an allowed
 * asymmetric algorithm by the public key in its own `jwk` header (a private or symmetric key
 * there is refused), `iat` within the window, and the claims every proof has.
 */
export async function verifyProof(proof: string, window: ProofWindow): Promise<VerifiedProof | ProofFailure> {
  if (proof.length > MAX_PROOF_LENGTH) return 'invalid';
  let verified;
  let proofKey: ProofKey | undefined;
  try {
    verified = await jwtVerify(
      proof,
      async (protectedHeader, token) => {
        proofKey = await proofKeyOf(protectedHeader, token);
        return proofKey.key;
      },
      {
        typ: 'dpop+jwt',
        algorithms: ALGORITHMS,
        maxTokenAge: window.maxAgeSeconds,
        clockTolerance: window.clockSkewSeconds,
      },
    );
  } catch (error) {
    return isIatFailure(error) ? 'stale' : 'invalid';
  }
  const { payload } = verified;
  const { jti, htm, htu, ath, nonce } = payload as Record<string, unknown>;
  if (typeof jti !== 'string' || jti === '' || jti.length > MAX_JTI_LENGTH) return 'invalid';
  if (typeof htm !== 'string' || typeof htu !== 'string') return 'invalid';
  if (ath !== undefined && typeof ath !== 'string') return 'invalid';
  if (nonce !== undefined && typeof nonce !== 'string') return 'invalid';
  return { jkt: proofKey!.jkt, jti, htm, htu, ath, nonce };
}

/**
 * jose's refusals of an `iat` timestamp: too far in the past (maxTokenAge) or in the future
 * (clockTolerance). An `iat` that is missing or not a number makes the proof malformed, not stale.
 */
function isIatFailure(error: unknown): boolean {
  const claimFailure = error instanceof errors.JWTExpired || error instanceof errors.JWTClaimValidationFailed;
  return claimFailure && error.claim === 'iat' && error.reason === 'check_failed';
}
