import type { RequestTrace } from '../tracing/index.js';
import { StoreUnavailableError } from '../store/store.js';
import type { VerifiedToken } from '../store/verified-token.js';
import { tokenDigest } from '../token/token-value.js';
import { normalizeHtu, requestHtu } from './htu.js';
import type { Dpop } from './index.js';
import { verifyProof } from './proof.js';

/** How a token was presented: `Authorization: Bearer` (or a query or body parameter), or `Authorization: DPoP` with its proof. */
export interface PresentedToken {
  readonly token: string;
  readonly scheme: 'bearer' | 'dpop';
  /** The one `DPoP` header of a DPoP request; undefined when there is none, or more than one. */
  readonly proof: string | undefined;
}

/** The request as the client made it, for `htm` and `htu`. */
export interface ProofSubject {
  readonly method: string;
  /** `http` or `https`, as the client reached the listener (or the ingress). */
  readonly protocol: string | undefined;
  /** Host and port as the client named them. */
  readonly host: string | undefined;
  /** The request target as the client sent it (origin-form path and query). */
  readonly url: string;
}

/** Why a proof step refused: each is a denial reason of the gateway's table (src/gateway/denials.ts). */
export type ProofRefusal =
  | 'dpop_required'
  | 'dpop_token_as_bearer'
  | 'dpop_unbound_token'
  | 'dpop_proof_missing'
  | 'dpop_proof_invalid'
  | 'dpop_proof_stale'
  | 'dpop_proof_mismatch'
  | 'dpop_ath_mismatch'
  | 'dpop_key_mismatch'
  | 'dpop_proof_replayed'
  | 'store_unavailable';

/**
 * Whether the request needs the DPoP step at all: a Bearer token that is not bound, on a route
 * that does not require DPoP, does not (three field reads, nothing else, on the Bearer path).
 */
export function needsProofStep(requireDpop: boolean, presented: PresentedToken, token: Pick<VerifiedToken, 'jkt'>): boolean {
  return requireDpop || presented.scheme === 'dpop' || token.jkt !== undefined;
}

/**
 * RFC 9449 section 7.1 for a request whose token was verified: a DPoP-bound token only with
 * `Authorization: DPoP` and one proof, whose signature, age, method, URL, access token hash
 * (`ath`) and key (the token's `jkt`) all match, and whose `jti` no sidecar has seen within the
 * window. The replay mark is written last, so a proof that fails any other check costs no store
 * call. Null when the request passes.
 */
export function checkResourceProof(
  dpop: Dpop,
  requireDpop: boolean,
  presented: PresentedToken,
  token: Pick<VerifiedToken, 'jkt'>,
  subject: ProofSubject,
  trace: RequestTrace | null = null,
): ProofRefusal | null | Promise<ProofRefusal | null> {
  if (presented.scheme === 'bearer') {
    if (token.jkt !== undefined) return 'dpop_token_as_bearer';
    return requireDpop ? 'dpop_required' : null;
  }
  if (token.jkt === undefined) return 'dpop_unbound_token';
  if (presented.proof === undefined) return 'dpop_proof_missing';
  return verifyResourceProof(dpop, presented.proof, presented.token, token.jkt, subject, trace);
}

async function verifyResourceProof(
  dpop: Dpop,
  proof: string,
  accessToken: string,
  jkt: string,
  subject: ProofSubject,
  trace: RequestTrace | null,
): Promise<ProofRefusal | null> {
  const verified = await verifyProof(proof, dpop.window);
  if (verified === 'invalid') return 'dpop_proof_invalid';
  if (verified === 'stale') return 'dpop_proof_stale';
  if (verified.jkt !== jkt) return 'dpop_key_mismatch';
  if (verified.ath !== tokenDigest(accessToken)) return 'dpop_ath_mismatch';
  if (verified.htm !== subject.method) return 'dpop_proof_mismatch';
  const expected = requestHtu(subject.protocol, subject.host, subject.url);
  if (expected === null || normalizeHtu(verified.htu) !== expected) return 'dpop_proof_mismatch';
  // The replay mark is a write to the shared store: the one part of a proof check that waits on the network.
  const mark = trace?.child('tokengate.dpop.replay_mark') ?? null;
  try {
    const first = await dpop.replay.firstUse(verified.jkt, verified.jti);
    mark?.end(first ? undefined : 'dpop_proof_replayed');
    return first ? null : 'dpop_proof_replayed';
  } catch (error) {
    mark?.end(error instanceof StoreUnavailableError ? 'store_unavailable' : 'error');
    if (error instanceof StoreUnavailableError) return 'store_unavailable';
    throw error;
  }
}
