/** Scope strings per RFC 6749 section 3.3: space-delimited, case-sensitive, printable ASCII. */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;

/** Splits a scope parameter; returns null when it is malformed. Duplicates are folded. */
export function parseScope(value: string): string[] | null {
  const parts = value.split(' ').filter((part) => part.length > 0);
  if (!parts.every((part) => SCOPE_TOKEN.test(part))) return null;
  return [...new Set(parts)];
}

export function formatScope(scopes: readonly string[]): string {
  return scopes.join(' ');
}

/** True when every scope in `required` is in `granted`. */
export function hasScopes(granted: readonly string[], required: readonly string[]): boolean {
  // A loop, not every(): this runs on every gateway request.
  for (const scope of required) if (!granted.includes(scope)) return false;
  return true;
}

export function isScopeToken(value: string): boolean {
  return SCOPE_TOKEN.test(value);
}

export type ScopeResolution = { ok: true; scopes: string[] } | { ok: false; reason: string };

/**
 * The scopes a grant receives: the requested ones (or the defaults when none are requested),
 * each of which the issuer must know and the application must be allowed. Used by
 * /oauth/authorize and the token endpoint alike, so both refuse the same requests.
 */
export function resolveScopes(
  requested: string | undefined,
  allowedForApplication: readonly string[],
  known: readonly string[],
  defaults: readonly string[],
): ScopeResolution {
  const wanted = requested === undefined || requested.trim() === '' ? [...defaults] : parseScope(requested);
  if (wanted === null) return { ok: false, reason: 'The scope parameter is malformed.' };
  const unknown = wanted.filter((scope) => !known.includes(scope));
  if (unknown.length > 0) return { ok: false, reason: `Unknown scope: ${unknown.join(' ')}.` };
  const refused = wanted.filter((scope) => !allowedForApplication.includes(scope));
  if (refused.length > 0) return { ok: false, reason: `The application may not request: ${refused.join(' ')}.` };
  return { ok: true, scopes: wanted };
}
