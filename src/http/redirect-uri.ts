/** The rule every redirect URI tokengate will send a browser to is held to, wherever it was given. */

const MAX_URI_LENGTH = 2000;
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);
const CONTROL_OR_SPACE = /[\s\x00-\x1f\x7f]/;

/**
 * Redirect URIs are compared exactly at /oauth/authorize and /oauth/token, so they are checked
 * once, when an application is registered (the admin API) or a client metadata document read: absolute, https (or http on the loopback for development, RFC 8252 section 7.3), no
 * fragment (RFC 6749 section 3.1.2), no credentials, nothing a URL parser would silently strip.
 */
export function redirectUriProblem(value: string): string | null {
  if (value.length > MAX_URI_LENGTH) return `is longer than ${MAX_URI_LENGTH} characters`;
  if (CONTROL_OR_SPACE.test(value)) return 'must not contain spaces or control characters';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'is not an absolute URL';
  }
  if (value.includes('#')) return 'must not contain a fragment';
  if (url.username !== '' || url.password !== '') return 'must not contain credentials';
  if (url.protocol === 'https:') return null;
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return null;
  return 'must use https (http only on localhost, 127.0.0.1 or [::1])';
}
