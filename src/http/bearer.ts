/**
 * The `Authorization: Bearer` credential (RFC 6750 section 2.1), one parser for every listener:
 *
 *   credentials = "Bearer" 1*SP b64token
 *   b64token    = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
 *
 * The scheme is case-insensitive; exactly one token follows. A header that names the Bearer
 * scheme but does not match is malformed (400 invalid_request, RFC 6750 section 3.1); a header
 * of another scheme (Basic, ...) is not a bearer credential at all.
 */

const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*)$/i;
const BEARER_SCHEME = /^bearer(?:[ \t]|$)/i;

/** A header that names the Bearer scheme without a well-formed token after it. */
export const MALFORMED_BEARER = Symbol('malformed bearer credential');

/** The token of a Bearer header; MALFORMED_BEARER for a broken one; null for another scheme. */
export function parseBearer(authorization: string): string | typeof MALFORMED_BEARER | null {
  const match = BEARER.exec(authorization);
  if (match !== null) return match[1]!;
  return authorization === '' || BEARER_SCHEME.test(authorization) ? MALFORMED_BEARER : null;
}

/** True when `value` can be sent as a bearer token (the b64token grammar). */
export function isBearerToken(value: string): boolean {
  return BEARER.test(`Bearer ${value}`);
}

const DPOP = /^DPoP +([A-Za-z0-9\-._~+/]+=*)$/i;
const DPOP_SCHEME = /^dpop(?:[ \t]|$)/i;

/**
 * The token of an `Authorization: DPoP` header (RFC 9449 section 7.1, the same token68 syntax as
 * Bearer); MALFORMED_BEARER for a broken one; null for another scheme. Only asked about a header
 * that is not Bearer, so Bearer requests never pay for it.
 */
export function parseDpopAuthorization(authorization: string): string | typeof MALFORMED_BEARER | null {
  const match = DPOP.exec(authorization);
  if (match !== null) return match[1]!;
  return DPOP_SCHEME.test(authorization) ? MALFORMED_BEARER : null;
}
