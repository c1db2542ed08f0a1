import type { ApplicationRecord } from '../store/store.js';

/**
 * Client ids that are URLs (client ID metadata documents): which strings are one, and which
 * entries of the operator's list allow which of them. Both are compared as strings, in the
 * canonical form the WHATWG URL parser gives, so that one client has one id: no second
 * spelling (`HTTPS://Claude.ai:443/x`) slips past the list or splits a client's rate limit.
 */

/** Longer ids are refused before anything is looked up: they become log fields, Redis keys and rate limit buckets. */
export const MAX_CLIENT_ID_URL_LENGTH = 512;

/** A `.` or `..` segment, also percent-encoded. */
const DOT_SEGMENT = /\/(\.|%2e){1,2}(\/|$)/i;

/** A client a metadata document describes, as the issuer sees it. */
export interface MetadataClient extends ApplicationRecord {
  readonly metadataDocument: {
    /** The client id's host (and port): what the person is shown first, whatever the document calls the client. */
    readonly host: string;
    /** The name the document gives, shown after the host; null when it gives none. */
    readonly clientName: string | null;
  };
}

export function isMetadataClient(application: ApplicationRecord): application is MetadataClient {
  return 'metadataDocument' in application;
}

/** A client id tokengate mints is base64url: one that starts so names a metadata document. */
export function isMetadataClientId(clientId: string): boolean {
  return clientId.startsWith('https://');
}

/**
 * Why `clientId` cannot name a metadata document, or null: https, a path other than `/`, no
 * dot segments, fragment, credentials or query, at most MAX_CLIENT_ID_URL_LENGTH characters,
 * written as the URL parser writes it. (That form never holds `{` or `}`: the parser
 * percent-encodes them in a path, so an id cannot pick a Redis Cluster slot as a hash tag.)
 */
export function clientIdProblem(clientId: string): string | null {
  if (clientId.length > MAX_CLIENT_ID_URL_LENGTH) return `is longer than ${MAX_CLIENT_ID_URL_LENGTH} characters`;
  const url = parse(clientId);
  if (url === null || url.protocol !== 'https:') return 'is not an https URL';
  if (url.username !== '' || url.password !== '') return 'must not contain credentials';
  if (clientId.includes('#')) return 'must not contain a fragment';
  if (clientId.includes('?')) return 'must not contain a query';
  if (url.pathname === '/') return 'must have a path';
  // The parser removes dot segments (`.`, `..`, `%2e`), so an id that had one reads back otherwise.
  if (url.href !== clientId) return DOT_SEGMENT.test(clientId) ? 'must not contain . or .. segments' : `is not written as a URL parser writes it (${url.href})`;
  return null;
}

/**
 * Why `value` cannot be an entry of the allow list, or null: an https origin, a prefix ending
 * in `/`, or one client id; no credentials, query or fragment; written as the parser writes it
 * (an origin without its trailing `/`).
 */
export function allowEntryProblem(value: string): string | null {
  const url = parse(value);
  if (url === null || url.protocol !== 'https:') return 'must be an https origin or URL prefix, e.g. https://claude.ai';
  if (url.username !== '' || url.password !== '') return 'must not contain credentials';
  if (value.includes('?') || value.includes('#')) return 'must not contain a query or fragment';
  const canonical = url.pathname === '/' ? url.origin : url.href;
  if (value !== canonical && value !== url.href) return `must be written as ${canonical}`;
  if (url.pathname !== '/' && !value.endsWith('/') && clientIdProblem(value) !== null)
    return `is neither a prefix ending in / nor a client id: it ${clientIdProblem(value)}`;
  return null;
}

/** The entry as kept and shown: an origin without its trailing `/`. */
export function canonicalAllowEntry(value: string): string {
  const url = new URL(value);
  return url.pathname === '/' ? url.origin : url.href;
}

/**
 * Whether an entry allows a client id. An origin allows every id on it and a prefix ending in
 * `/` every id under it (by whole path segments: `https://apps.example/clients/` does not allow
 * `https://apps.example/clients-evil/x`); any other entry names one client id, and allows that
 * id only: an operator who listed `https://partner.example/client.json` vouched for that
 * document, not for whatever the partner's server answers at `.../client.json/more.json`.
 */
export function allows(entry: string, clientId: string): boolean {
  if (clientId === entry) return true;
  if (entry.endsWith('/')) return clientId.startsWith(entry);
  return isOriginEntry(entry) && clientId.startsWith(`${entry}/`);
}

/** An entry that is an origin: kept without its trailing `/` (canonicalAllowEntry), so it has no path at all. */
function isOriginEntry(entry: string): boolean {
  const url = parse(entry);
  return url !== null && url.origin === entry;
}

function parse(value: string): URL | null {
  try {
    return new URL(value);
  } catch {
    return null;
  }
}
