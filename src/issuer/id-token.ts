import { createHash } from 'node:crypto';
import type { TokengateContext } from '../context.js';
import { ID_TOKEN_TYPE } from '../openid/index.js';
import type { ApplicationRecord, OpenIdSignIn } from '../store/store.js';

/**
 * OpenID Connect's ID token (Core 1.0 section 2) and the claims of the scopes granted, which
 * UserInfo answers too. Only for grants with `openid`: ID-JAG and token exchange issue access
 * tokens alone (their clients never took part in a sign-in the token could describe).
 */

/** The scope that makes a grant an OpenID Connect one, and the scopes whose claims tokengate knows. */
export const OPENID_SCOPE = 'openid';
export const OPENID_SCOPES = [OPENID_SCOPE, 'email', 'profile'] as const;
/** The claims an ID token or UserInfo may carry, for the discovery document. */
export const CLAIMS_SUPPORTED = ['sub', 'iss', 'aud', 'exp', 'iat', 'auth_time', 'nonce', 'sid', 'at_hash', 'azp', 'email', 'email_verified'] as const;

/** Whether these scopes make an OpenID Connect grant here. */
export function isOpenIdGrant(context: TokengateContext, scopes: readonly string[]): boolean {
  return context.openid !== null && scopes.includes(OPENID_SCOPE);
}

/**
 * The user's claims for the scopes granted: `email` and `email_verified` with `email` (the users
 * of the store: their address; the user service's: the one they signed in with, when the sign-in
 * is known); `profile` names no claim either source knows. `email_verified` is false: neither
 * source tells tokengate that anyone proved the address is theirs.
 */
export async function userClaims(context: TokengateContext, userId: string, scopes: readonly string[], signIn: Pick<OpenIdSignIn, 'email'> | undefined) {
  const claims: Record<string, unknown> = { sub: userId };
  if (scopes.includes('email')) {
    const email = context.config.issuer.users.source === 'store' ? (await context.store.users.get(userId))?.email : signIn?.email;
    if (email !== undefined) Object.assign(claims, { email, email_verified: false });
  }
  return claims;
}

/** `at_hash` (Core 1.0 section 3.1.3.6): the left half of the SHA-256 of the access token (RS256 and ES256 both hash with SHA-256), base64url. */
export function accessTokenHash(accessToken: string): string {
  return createHash('sha256').update(accessToken, 'ascii').digest().subarray(0, 16).toString('base64url');
}

/** The ID token of a grant: signed with the application's algorithm by the key signing now. */
export async function signIdToken(
  context: TokengateContext,
  application: ApplicationRecord,
  grant: { userId: string; scopes: readonly string[]; signIn: OpenIdSignIn; accessToken: string },
): Promise<string> {
  const openid = context.openid!;
  const now = Math.floor(Date.now() / 1000);
  const { signIn } = grant;
  const payload = {
    ...(await userClaims(context, grant.userId, grant.scopes, signIn)),
    iss: openid.issuer,
    aud: application.clientId,
    iat: now,
    exp: now + context.config.openidConnect.idTokenLifetimeSeconds,
    auth_time: signIn.authTime,
    ...(signIn.nonce === undefined ? {} : { nonce: signIn.nonce }),
    sid: signIn.sid,
    at_hash: accessTokenHash(grant.accessToken),
  };
  return openid.sign(payload, application.idTokenSignedResponseAlg ?? 'RS256', ID_TOKEN_TYPE);
}
