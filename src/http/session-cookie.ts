/**
 * The session cookie of the authorization pages, and its removal from what the gateway forwards.
 *
 * Over https it is `__Host-tokengate_session` with `Path=/` and `Secure`: browsers accept a
 * `__Host-` cookie only from the host itself, without `Domain`, so a sibling subdomain cannot
 * plant one (a `tokengate_session` cookie set by `evil.example.com` for `.example.com` with a
 * longer path would win over ours). The prefix requires `Path=/`, so the cookie also reaches the
 * APIs on the same host: the gateway takes it out before forwarding. Over plain http (local
 * development) browsers refuse `__Host-` without `Secure`, so the cookie is `tokengate_session`
 * with `Path=/oauth`, as reachable by a sibling as any http cookie is.
 */

export interface SessionCookie {
  readonly name: string;
  readonly path: string;
  readonly secure: boolean;
}

export const HOST_SESSION_COOKIE = '__Host-tokengate_session';
export const PLAIN_SESSION_COOKIE = 'tokengate_session';

export function sessionCookie(issuerUrl: string): SessionCookie {
  return new URL(issuerUrl).protocol === 'https:'
    ? { name: HOST_SESSION_COOKIE, path: '/', secure: true }
    : { name: PLAIN_SESSION_COOKIE, path: '/oauth', secure: false };
}

/**
 * A `Cookie` header without the session cookie's pairs (RFC 6265 5.4: `name=value` joined by
 * `; `); the header as it was when it has none, null when nothing else is left.
 */
export function withoutSessionCookie(header: string): string | null {
  if (!header.includes(HOST_SESSION_COOKIE) && !header.includes(PLAIN_SESSION_COOKIE)) return header;
  const kept = header.split(';').filter((pair) => {
    const name = pair.slice(0, pair.indexOf('=') === -1 ? pair.length : pair.indexOf('=')).trim();
    return name !== HOST_SESSION_COOKIE && name !== PLAIN_SESSION_COOKIE;
  });
  const joined = kept.map((pair) => pair.trim()).join('; ');
  return joined === '' ? null : joined;
}
