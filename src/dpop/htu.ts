/**
 * The `htu` of a DPoP proof against the URL of the request it came with (RFC 9449 section 4.3):
 * both without query and fragment, compared after the normalizations of RFC 3986 sections 6.2.2
 * and 6.2.3 (case of scheme and host, default port, dot segments, percent-encoding of
 * unreserved characters and the case of the hex digits), so a client that spells its URL
 * differently from how the request line arrived is still recognised.
 */

const PERCENT_ENCODED = /%[0-9A-Fa-f]{2}/g;
const UNRESERVED = /[A-Za-z0-9\-._~]/;

/** The normalized http(s) URL without query and fragment; null for anything else. */
export function normalizeHtu(value: string): string | null {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return null;
  if (url.username !== '' || url.password !== '') return null;
  return `${url.protocol}//${url.host}${url.pathname.replace(PERCENT_ENCODED, normalizePercentEncoding)}`;
}

/**
 * The URL the client asked for: `protocol` and `host` as the client reached the listener (from
 * the connection, trusted forwarding headers, or the ingress), `target` the request target as
 * sent (origin-form). Null when scheme or host are unknown.
 */
export function requestHtu(protocol: string | undefined, host: string | undefined, target: string): string | null {
  if (protocol === undefined || protocol === '' || host === undefined || host === '' || !target.startsWith('/')) return null;
  return normalizeHtu(`${protocol}://${host}${target}`);
}

function normalizePercentEncoding(encoded: string): string {
  const character = String.fromCharCode(Number.parseInt(encoded.slice(1), 16));
  return UNRESERVED.test(character) ? character : encoded.toUpperCase();
}
