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
  return required.every((scope) => granted.includes(scope));
}

export function isScopeToken(value: string): boolean {
  return SCOPE_TOKEN.test(value);
}
