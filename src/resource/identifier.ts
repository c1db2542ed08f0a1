import { isIP } from 'node:net';
import { normalizePath } from '../http/path.js';

/**
 * Resource identifiers (RFC 8707 section 2): absolute URIs without a fragment, compared as exact
 * strings wherever they appear (the config, a `resource` parameter, a token's audience). So the
 * config accepts only the one spelling a URL parser gives back: a client that sends what the
 * metadata document says sends exactly the registered string.
 */

/** Why `value` cannot identify a resource, or null when it can. */
export function identifierProblem(value: string): string | null {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `"${value}" is not an absolute URI (e.g. https://api.ticketing.example/api/public)`;
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname)))
    return `"${value}" must be https (http only on a loopback host, for development)`;
  if (url.username !== '' || url.password !== '') return `"${value}" must not embed credentials`;
  if (url.search !== '' || url.hash !== '' || value.includes('#') || value.includes('?')) return `"${value}" must not have a query or fragment`;
  if (url.pathname !== '/' && url.pathname.endsWith('/')) return `"${value}" must not end with "/"`;
  if (normalizePath(url.pathname) !== url.pathname) return `"${value}" must have a path in canonical form (no encoded slashes, dot segments or empty segments)`;
  const canonical = canonicalSpelling(url);
  if (value !== canonical) return `"${value}" must be written as ${canonical}`;
  return null;
}

/** The path of a valid identifier, as its metadata URL appends it: "" for an identifier without one. */
export function identifierPath(identifier: string): string {
  const { pathname } = new URL(identifier);
  return pathname === '/' ? '' : pathname;
}

/** RFC 9728 section 3.1: the well-known path goes between the host and the identifier's path. */
export const METADATA_PREFIX = '/.well-known/oauth-protected-resource';

/** Where the metadata document of a valid identifier is published (the `resource_metadata` of its challenges). */
export function metadataUrl(identifier: string): string {
  return `${new URL(identifier).origin}${METADATA_PREFIX}${identifierPath(identifier)}`;
}

/** A pathless identifier is written as its origin, without the trailing "/" a parser adds. */
function canonicalSpelling(url: URL): string {
  return url.pathname === '/' ? url.origin : url.href;
}

function isLoopbackHost(hostname: string): boolean {
  if (hostname === 'localhost') return true;
  if (isIP(hostname) === 4) return hostname.startsWith('127.');
  return hostname === '[::1]';
}
