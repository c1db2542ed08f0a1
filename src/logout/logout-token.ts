import { randomUUID } from 'node:crypto';
import type { OpenIdAlgorithm, OpenIdConnect } from '../openid/index.js';

/** The event a logout token carries (OpenID Connect Back-Channel Logout 1.0, section 2.4). */
export const BACKCHANNEL_LOGOUT_EVENT = 'http://schemas.openid.net/event/backchannel-logout';
/** Its JWT `typ` (section 2.4, as RFC 8725 section 3.11 asks: no other JWT of ours can pass for it). */
export const LOGOUT_TOKEN_TYPE = 'logout+jwt';
/**
 * How long a logout token is good for: past every retry of its delivery (./back-channel.ts), and
 * short, since it is an instruction to act now (the specification recommends at most two minutes).
 */
export const LOGOUT_TOKEN_LIFETIME_SECONDS = 120;

/** Whom a logout token names: the user (`sub`, the ID tokens'), the session (`sid`), or both. */
export interface LogoutSubject {
  sub: string;
  sid?: string;
}

/**
 * A signed logout token for one application: `iss`, `aud` (its client_id), `iat`, `exp`, a
 * unique `jti`, the back-channel logout event, `sub` and `sid` when known, and never a `nonce`
 * (section 2.4: so that it cannot be taken for an ID token).
 */
export function signLogoutToken(
  openid: OpenIdConnect,
  input: { issuer: string; clientId: string; subject: LogoutSubject; alg: OpenIdAlgorithm; now?: number },
): Promise<string> {
  const iat = Math.floor((input.now ?? Date.now()) / 1000);
  const payload = {
    iss: input.issuer,
    aud: input.clientId,
    iat,
    exp: iat + LOGOUT_TOKEN_LIFETIME_SECONDS,
    jti: randomUUID(),
    events: { [BACKCHANNEL_LOGOUT_EVENT]: {} },
    sub: input.subject.sub,
    ...(input.subject.sid === undefined ? {} : { sid: input.subject.sid }),
  };
  return openid.sign(payload, input.alg, LOGOUT_TOKEN_TYPE);
}
