/**
 * The ASCII serialization of an origin (RFC 6454): scheme, host and a port other than the
 * scheme's default, lower-cased as the WHATWG URL parser gives it; null for a value that is not
 * an http(s) origin alone (a path, a query, user info, the opaque origin `null`).
 */
export function serializedOrigin(value: string): string | null {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '') return null;
  if (url.pathname !== '/' || /^[a-z][a-z0-9+.-]*:\/\/[^/]*\/./i.test(value)) return null;
  return url.origin;
}
