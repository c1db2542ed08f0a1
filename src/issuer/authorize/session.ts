import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../../context.js';
import type { SessionRecord } from '../../store/store.js';
import { tokenDigest } from '../../token/token-value.js';
import type { AuthorizationParameters } from './request.js';

/**
 * Sessions of the authorization page live in the store (every sidecar sees them), keyed by a
 * digest of the cookie value; the cookie carries nothing but that random value. A session
 * starts at the first visit, anonymous, so the login form already has a CSRF token to carry,
 * and is replaced by a new one at login: a session id planted before login is worth nothing
 * after it (no session fixation).
 */

export const SESSION_COOKIE = 'tokengate_session';
/** The cookie goes to the authorization pages only, never to the APIs behind the gateway. */
const COOKIE_PATH = '/oauth';
/** Authorization requests a session keeps at once (several tabs); the oldest is dropped first. */
const MAX_PENDING = 5;

/** An authorization request shown to the user and not yet answered. */
export interface PendingAuthorization {
  id: string;
  parameters: AuthorizationParameters;
}

export interface AuthorizeSessionData extends SessionRecord {
  /** Null until the user has signed in. */
  userId: string | null;
  /** The e-mail the user signed in with, shown on the consent page. */
  email: string | null;
  /** Synchronizer token every form of this session carries. */
  csrfToken: string;
  pending: PendingAuthorization[];
}

export interface Session {
  /** Digest of the cookie value: the store key. */
  readonly key: string;
  readonly data: AuthorizeSessionData;
}

export class Sessions {
  private readonly ttlMs: number;
  private readonly alwaysSecure: boolean;

  constructor(private readonly context: TokengateContext) {
    this.ttlMs = context.config.issuer.sessionTtl * 1000;
    this.alwaysSecure = new URL(context.config.issuer.issuerUrl).protocol === 'https:';
  }

  /** The request's live session, or null (no cookie, a value we never minted, expired). */
  async load(request: FastifyRequest): Promise<Session | null> {
    const value = request.cookies[SESSION_COOKIE];
    // A value without this deployment's tag was never a session: no store call for it.
    if (value === undefined || !this.context.minter.hasValidTag(value)) return null;
    const key = tokenDigest(value);
    const data = (await this.context.store.sessions.get(key)) as AuthorizeSessionData | null;
    if (data === null || !Array.isArray(data.pending) || this.remainingMs(data) <= 0) return null;
    return { key, data };
  }

  /** A new session with a new id and CSRF token; the cookie is set on `reply`. */
  async start(request: FastifyRequest, reply: FastifyReply, user: { userId: string; email: string } | null): Promise<Session> {
    const value = this.context.minter.mint();
    const data: AuthorizeSessionData = {
      userId: user?.userId ?? null,
      email: user?.email ?? null,
      createdAt: Date.now(),
      csrfToken: randomBytes(32).toString('base64url'),
      pending: [],
    };
    const session = { key: tokenDigest(value), data };
    await this.save(session);
    reply.setCookie(SESSION_COOKIE, value, {
      path: COOKIE_PATH,
      httpOnly: true,
      // Lax: the cookie comes along when the application sends the user here (a top-level
      // navigation), not on cross-site POSTs or in frames.
      sameSite: 'lax',
      secure: this.alwaysSecure || request.protocol === 'https',
      maxAge: Math.ceil(this.ttlMs / 1000),
    });
    return session;
  }

  /** Stores the session; its end stays where it was set at creation (an absolute lifetime). */
  async save(session: Session): Promise<void> {
    const remaining = this.remainingMs(session.data);
    if (remaining > 0) await this.context.store.sessions.save(session.key, session.data, remaining);
  }

  async end(reply: FastifyReply, session: Session): Promise<void> {
    await this.context.store.sessions.delete(session.key);
    reply.clearCookie(SESSION_COOKIE, { path: COOKIE_PATH });
  }

  /** Remembers an authorization request the user is about to answer; returns it with its id. */
  async addPending(session: Session, parameters: AuthorizationParameters): Promise<PendingAuthorization> {
    const pending = { id: randomUUID(), parameters };
    session.data.pending = [...session.data.pending, pending].slice(-MAX_PENDING);
    await this.save(session);
    return pending;
  }

  findPending(session: Session, id: string | undefined): PendingAuthorization | null {
    return session.data.pending.find((candidate) => candidate.id === id) ?? null;
  }

  /** Takes a pending request out of the session: each is answered once. */
  async takePending(session: Session, id: string | undefined): Promise<PendingAuthorization | null> {
    const pending = this.findPending(session, id);
    if (pending === null) return null;
    session.data.pending = session.data.pending.filter((candidate) => candidate.id !== id);
    await this.save(session);
    return pending;
  }

  private remainingMs(data: AuthorizeSessionData): number {
    return data.createdAt + this.ttlMs - Date.now();
  }
}

/**
 * Constant-time comparison of the presented CSRF token with the session's. Both sides are
 * hashed first so that neither the length nor any prefix of the real token shows in timing.
 */
export function csrfTokenMatches(session: Session, presented: string | undefined): boolean {
  if (presented === undefined) return false;
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(presented), digest(session.data.csrfToken));
}
