import { createHash } from 'node:crypto';
import { TokengateError } from '../errors.js';
import type { AuthorizationCodeRecord } from '../store/store.js';
import { constantTimeEqual } from '../token/constant-time.js';

/** RFC 7636 section 4.1: 43 to 128 characters of the unreserved set. */
const CODE_VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;

export function isWellFormedCodeVerifier(verifier: string): boolean {
  return CODE_VERIFIER.test(verifier);
}

/** RFC 7636 section 4.2, S256: BASE64URL(SHA256(ASCII(code_verifier))). */
export function s256CodeChallenge(verifier: string): string {
  return createHash('sha256').update(verifier, 'ascii').digest('base64url');
}

/**
 * RFC 7636 section 4.6, plus the two downgrades it leaves open: a verifier sent for a code that
 * had no challenge (RFC 9700 section 2.1.1: the server must refuse it, or an attacker could
 * strip the challenge), and a public client's code without a challenge.
 */
export function verifyCodeVerifier(code: AuthorizationCodeRecord, verifier: string | undefined, publicClient: boolean): void {
  if (code.codeChallenge === null) {
    if (verifier !== undefined)
      throw new TokengateError('INVALID_GRANT', { description: 'A code_verifier was sent, but the authorization request had no code_challenge.' });
    if (publicClient)
      throw new TokengateError('INVALID_GRANT', { description: 'Public clients must use PKCE: the authorization request had no code_challenge.' });
    return;
  }
  if (verifier === undefined) throw new TokengateError('INVALID_GRANT', { description: 'Missing code_verifier: the authorization request used PKCE.' });
  if (!constantTimeEqual(s256CodeChallenge(verifier), code.codeChallenge)) {
    throw new TokengateError('INVALID_GRANT', { description: 'The code_verifier does not match the code_challenge.' });
  }
}
