import type { TokengateContext } from '../context.js';

/**
 * What sign-out needs of OpenID Connect (../openid/): checking an id_token_hint, the `sid` of a
 * session, signing a logout token. Null when OpenID Connect is off: then no hint verifies and no
 * logout token can be signed.
 */
export interface OpenIdForLogout {
  sign(payload: Record<string, unknown>, alg: 'RS256' | 'ES256', typ: string): Promise<string>;
  verifyIdTokenHint(token: string): Promise<{ sub: string; aud: string[]; sid?: string } | null>;
  sessionId(sessionKey: string): string;
}

export function openIdOf(context: TokengateContext): OpenIdForLogout | null {
  return (context as TokengateContext & { openid?: OpenIdForLogout | null }).openid ?? null;
}
