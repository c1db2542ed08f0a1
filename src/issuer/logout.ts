import type { TokengateContext } from '../context.js';
import { tellApplications } from '../logout/back-channel.js';

/**
 * What ends a user's relationship with applications, in one place: a tokengate session signed
 * out (sign-out on the account page or at an application's request, "Use another account", a
 * new sign-in replacing it), or a grant ended (Disconnect on the account page, the operator
 * revoking it). Each calls `announceLogout` after the fact, and the applications that asked to
 * hear of it are told from here (OpenID Connect Back-Channel Logout 1.0: a logout token to each
 * application's `backchannel_logout_uri`, sent in the background, retried, never keeping the
 * user's page waiting: ../logout/back-channel.ts).
 */
export type LogoutEvent =
  /** A signed-in session ended; `sessionKey` is the store key of the session (the digest of its cookie value). Every application the user connected is told, with the session's `sid`. */
  | { kind: 'session-ended'; userId: string; sessionKey: string }
  /** The user's grant to the application ended: its tokens are revoked, and it is told. `sessionKey`: the session the user ended it from, when there was one. */
  | { kind: 'grant-ended'; userId: string; clientId: string; sessionKey?: string };

/**
 * The hook of back-channel logout: called on every session end and every grant end, after it
 * happened. It returns at once whatever it sends (the user's page waits on its caller).
 */
export function announceLogout(context: TokengateContext, event: LogoutEvent): void {
  tellApplications(context, event);
}
