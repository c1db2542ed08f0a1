import { redirectUriProblem } from '../http/redirect-uri.js';

/**
 * What tokengate takes from a client ID metadata document, once it has checked it: the client it
 * describes is public (it has no way to hold a secret we gave it), so the document must not
 * claim a secret or a secret-based authentication method; it must name itself by the URL it was
 * fetched from; and it must list the redirect URIs the client may be sent back to, each held to
 * the rules of a registered application's. Everything else it says is ignored: its scopes,
 * resources, DPoP and rate limits are the operator's to decide (the allow list's entry).
 */

export interface ClientDocument {
  /** The name the client gives itself, cleaned up for display; null when it gives none usable. */
  readonly clientName: string | null;
  /** Its usable redirect URIs; the request's must be one of them exactly. */
  readonly redirectUris: string[];
  /** When it was fetched (epoch ms). */
  readonly fetchedAt: number;
}

/** The document says something tokengate cannot accept; `message` says what, for the error page. */
export class DocumentProblem extends Error {
  override name = 'DocumentProblem';
}

const MAX_NAME_LENGTH = 100;
const SECRET_FIELDS = ['client_secret', 'client_secret_expires_at'];

export function readDocument(clientId: string, json: unknown, fetchedAt: number): ClientDocument {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new DocumentProblem('the document is not a JSON object');
  const document = json as Record<string, unknown>;
  // Simple string comparison (RFC 3986 6.2.1): another spelling of the URL is another client.
  if (document.client_id !== clientId) throw new DocumentProblem('the document names another client_id than the URL it was fetched from');
  const secret = SECRET_FIELDS.find((field) => document[field] !== undefined);
  if (secret !== undefined) throw new DocumentProblem(`the document carries ${secret}, which a client ID metadata document must not`);
  const method = document.token_endpoint_auth_method;
  // Absent, it cannot mean a secret method: the client has no secret to use. private_key_jwt is not supported.
  if (method !== undefined && method !== 'none') {
    throw new DocumentProblem(`token_endpoint_auth_method is ${JSON.stringify(method)}: only "none" (a public client, with PKCE) is accepted here`);
  }
  requireMember(document, 'grant_types', 'authorization_code');
  requireMember(document, 'response_types', 'code');
  return { clientName: displayName(document.client_name), redirectUris: usableRedirectUris(document.redirect_uris), fetchedAt };
}

/** A list the document may leave out, but that must hold `value` when it is there. */
function requireMember(document: Record<string, unknown>, field: string, value: string): void {
  const list = document[field];
  if (list === undefined) return;
  if (!Array.isArray(list) || !list.includes(value)) throw new DocumentProblem(`${field} must include "${value}"`);
}

/**
 * The redirect URIs a registered application could have (https, or http on the loopback); any
 * other (a native app's custom scheme) is left out rather than refusing the whole client.
 */
function usableRedirectUris(value: unknown): string[] {
  if (!Array.isArray(value) || value.length === 0) throw new DocumentProblem('redirect_uris must be a non-empty list of URLs');
  const usable = value.filter((uri): uri is string => typeof uri === 'string' && redirectUriProblem(uri) === null);
  if (usable.length === 0) throw new DocumentProblem('redirect_uris lists no https (or loopback http) redirect URI');
  return [...new Set(usable)];
}

/** The client's own name, shown beside (never instead of) its host: printable, trimmed, bounded. */
function displayName(value: unknown): string | null {
  if (typeof value !== 'string') return null;
  const name = value.replace(/[\x00-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g, '').trim();
  if (name === '') return null;
  return name.length > MAX_NAME_LENGTH ? `${name.slice(0, MAX_NAME_LENGTH - 1)}…` : name;
}
