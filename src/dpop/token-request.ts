import type { FastifyReply, FastifyRequest } from 'fastify';
import { TokengateError } from '../errors.js';
import type { ApplicationRecord } from '../store/store.js';
import { normalizeHtu } from './htu.js';
import type { Dpop } from './index.js';
import { verifyProof } from './proof.js';

export const DPOP_NONCE_HEADER = 'dpop-nonce';

/**
 * The DPoP proof of a token request (RFC 9449 section 5), checked before any grant is spent:
 * the thumbprint of its key, which the issued tokens are bound to, or null for a request
 * without one (refused when the application requires DPoP). The proof must be for POST to the
 * token endpoint's URL as the metadata publishes it, carry the current server nonce when
 * `dpop.tokenEndpointNonce` is on, and not have been used before on any sidecar. Every answer
 * then carries a fresh `DPoP-Nonce`.
 */
export async function tokenRequestBinding(
  request: FastifyRequest,
  reply: FastifyReply,
  dpop: Dpop,
  application: ApplicationRecord,
  tokenEndpointUrl: string,
): Promise<string | null> {
  const proofs = countProofHeaders(request.raw.rawHeaders);
  if (proofs === 0) {
    if (application.dpop === 'required') throw refused('This application must send a DPoP proof with every token request (a DPoP header).');
    return null;
  }
  if (dpop.tokenEndpointNonce) reply.header(DPOP_NONCE_HEADER, dpop.nonces.current());
  if (proofs > 1) throw refused('A token request carries exactly one DPoP header.');
  const verified = await verifyProof(request.headers.dpop as string, dpop.window);
  if (verified === 'invalid') throw refused(`The DPoP proof is not a valid dpop+jwt signed by the public key in its jwk header with an allowed algorithm.`);
  if (verified === 'stale') throw refused('The DPoP proof was made too long ago or in the future (iat); make a new one.');
  if (verified.htm !== 'POST' || normalizeHtu(verified.htu) !== normalizeHtu(tokenEndpointUrl)) {
    throw refused(`The DPoP proof must be for POST ${tokenEndpointUrl} (htm, htu).`);
  }
  if (dpop.tokenEndpointNonce && !dpop.nonces.accepts(verified.nonce)) {
    throw new TokengateError('USE_DPOP_NONCE', { headers: { [DPOP_NONCE_HEADER]: dpop.nonces.current() } });
  }
  if (!(await dpop.replay.firstUse(verified.jkt, verified.jti))) throw refused('The DPoP proof was used before (jti); make a new one for each request.');
  return verified.jkt;
}

/** Node joins repeated DPoP fields into one value: count the fields as sent. */
function countProofHeaders(rawHeaders: readonly string[]): number {
  let count = 0;
  for (let index = 0; index < rawHeaders.length; index += 2) if (rawHeaders[index]!.toLowerCase() === 'dpop') count += 1;
  return count;
}

function refused(description: string): TokengateError {
  return new TokengateError('TOKEN_REQUEST_DPOP_PROOF', { description });
}
