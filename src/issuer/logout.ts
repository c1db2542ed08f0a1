import type { TokengateContext } from '../context.js';

/**
 * What ends a user's relationship with applications, in one place: a tokengate session signed
 * out (sign-out, "Use another account", a new sign-in replacing it), or a grant ended
 * (Disconnect on the account page, the operator revoking it). Each calls `announceLogout` after
 * the fact, and the applications that asked to hear of it are told from here (OpenID Connect
 * Back-Channel Logout 1.0: a logout token to each application's `backchannel_logout_uri`, sent
 * in the background, retried, never keeping the user's page waiting).
 */
export type LogoutEvent =
  /** A signed-in session ended; `sessionKey` is the store key of the session (the digest of its cookie value). */
  | { kind: 'session-ended'; userId: string; sessionKey: string }
  /** The user's grant to the application ended: its tokens are revoked. */
  | { kind: 'grant-ended'; userId: string; clientId: string };

/**
 * The hook of back-channel logout: called on every session end and every grant end, after it
 * happened. Nothing registers a back-channel logout URI yet, so nothing is sent; it must return
 * at once whatever it sends (the user's page waits on its caller).
 */
export function announceLogout(_context: TokengateContext, _event: LogoutEvent): void {}
