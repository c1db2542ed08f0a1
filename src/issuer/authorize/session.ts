import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../../context.js';
import { sessionCookie, type SessionCookie } from '../../http/session-cookie.js';
import type { SessionRecord } from '../../store/store.js';
import { tokenDigest } from '../../token/token-value.js';
import { announceLogout } from '../logout.js';
import type { AuthorizationParameters } from './request.js';

/**
 * Sessions of the authorization page live in the store (every sidecar sees them), keyed by a
 * digest of the cookie value; the cookie carries nothing but that random value. Only a signed-in
 * user has a session in the store: before sign-in the browser holds a cookie value that names
 * nothing (the sign-in form's CSRF token is bound to it, ./sign-in-form.ts), so an anonymous
 * visit stores nothing. Sign-in sets a new value: one planted before it is worth nothing after it
 * (no session fixation).
 */

/** Authorization requests a session keeps at once (several tabs); the oldest is dropped first. */
const MAX_PENDING = 5;

/** An authorization request shown to the user and not yet answered. */
export interface PendingAuthorization {
  id: string;
  parameters: AuthorizationParameters;
}

export interface AuthorizeSessionData extends SessionRecord {
  userId: string;
  /** The e-mail the user signed in with, shown on the consent page. */
  email: string;
  /** Synchronizer token every form of this session carries. */
  csrfToken: string;
  pending: PendingAuthorization[];
  /** A message for the next account page (what the last form there did), shown once. */
  notice?: string;
}

export interface Session {
  /** Digest of the cookie value: the store key. */
  readonly key: string;
  readonly data: AuthorizeSessionData;
}

export class Sessions {
  private readonly ttlMs: number;
  readonly cookie: SessionCookie;

  constructor(private readonly context: TokengateContext) {
    this.ttlMs = context.config.issuer.sessionTtl * 1000;
    this.cookie = sessionCookie(context.config.issuer.issuerUrl);
  }

  /** The browser's cookie value when this deployment minted it; undefined otherwise. No I/O. */
  cookieValue(request: FastifyRequest): string | undefined {
    const value = request.cookies[this.cookie.name];
    // A value without this deployment's tag was never ours: no store call for it.
    return value !== undefined && this.context.minter.hasValidTag(value) ? value : undefined;
  }

  /** The request's signed-in session, or null (no cookie, a value we never minted, none stored, expired). */
  async load(request: FastifyRequest): Promise<Session | null> {
    const value = this.cookieValue(request);
    if (value === undefined) return null;
    const key = tokenDigest(value);
    const data = (await this.context.store.sessions.get(key)) as AuthorizeSessionData | null;
    if (data === null || typeof data.userId !== 'string' || !Array.isArray(data.pending) || this.remainingMs(data) <= 0) return null;
    return { key, data };
  }

  /** The browser's cookie value, a new one set on `reply` when it has none of ours. Stores nothing. */
  browserValue(request: FastifyRequest, reply: FastifyReply): string {
    const existing = this.cookieValue(request);
    if (existing !== undefined) return existing;
    const value = this.context.minter.mint();
    this.setCookie(request, reply, value);
    return value;
  }

  /** A new signed-in session with a new cookie value and CSRF token; the cookie is set on `reply`. */
  async start(request: FastifyRequest, reply: FastifyReply, user: { userId: string; email: string }): Promise<Session> {
    const value = this.context.minter.mint();
    const data: AuthorizeSessionData = {
      userId: user.userId,
      email: user.email,
      createdAt: Date.now(),
      csrfToken: randomBytes(32).toString('base64url'),
      pending: [],
    };
    const session = { key: tokenDigest(value), data };
    await this.save(session);
    this.setCookie(request, reply, value);
    return session;
  }

  /** Stores the session; its end stays where it was set at creation (an absolute lifetime). */
  async save(session: Session): Promise<void> {
    const remaining = this.remainingMs(session.data);
    if (remaining > 0) await this.context.store.sessions.save(session.key, session.data, remaining);
  }

  /** Removes the session from the store and the cookie from the browser; the applications are not told (signOut tells them). */
  async end(reply: FastifyReply, session: Session): Promise<void> {
    await this.context.store.sessions.delete(session.key);
    reply.clearCookie(this.cookie.name, { path: this.cookie.path, secure: this.cookie.secure, httpOnly: true, sameSite: 'lax' });
  }

  /**
   * Signs the user out: the one way a session ends for good (sign-out on the account page, "Use
   * another account", a new sign-in replacing it). The record goes from the store, so no sidecar
   * knows the cookie any more, the browser is told to drop the cookie, and the applications that
   * asked to hear of it are told (../logout.ts).
   */
  async signOut(reply: FastifyReply, session: Session): Promise<void> {
    await this.end(reply, session);
    announceLogout(this.context, { kind: 'session-ended', userId: session.data.userId, sessionKey: session.key });
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

  private setCookie(request: FastifyRequest, reply: FastifyReply, value: string): void {
    reply.setCookie(this.cookie.name, value, {
      path: this.cookie.path,
      httpOnly: true,
      // Lax: the cookie comes along when the application sends the user here (a top-level
      // navigation), not on cross-site POSTs or in frames.
      sameSite: 'lax',
      // An http issuer reached over https (a TLS proxy in front of a development set-up) still gets Secure.
      secure: this.cookie.secure || request.protocol === 'https',
      maxAge: Math.ceil(this.ttlMs / 1000),
    });
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
