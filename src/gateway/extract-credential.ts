import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import type { RouteDenialReason } from './denials.js';

/**
 * RFC 6750 section 2: the access token comes from exactly one of
 * - the `Authorization: Bearer <b64token>` header (2.1; scheme case-insensitive, one or more
 *   spaces, exactly one token). A malformed Bearer header is 400 invalid_request (3.1); a header
 *   of another scheme (Basic...) is not a bearer credential and is only removed;
 * - the `access_token` query parameter (2.3), on GET and HEAD requests only: the published API
 *   names GET, and a token in the URL of a state-changing request is refused rather than
 *   silently stripped;
 * - the `access_token` parameter of an `application/x-www-form-urlencoded` (2.2) or
 *   `application/json` body of a POST request, on routes that accept body tokens. Only such a
 *   body is read (up to server.bodyLimit); every other body streams to the upstream untouched.
 * Two methods at once, a repeated parameter or two Authorization headers: 400 invalid_request.
 */
export interface Credential {
  readonly token: string;
  /** The query string to forward (without `?`): the request's, minus every access_token parameter. */
  readonly query: string;
  /** The body to forward when it had to be read (re-encoded without access_token), else undefined. */
  readonly body: Buffer | undefined;
}

export type ExtractionFailure = Extract<
  RouteDenialReason,
  'token_missing' | 'malformed_credential' | 'multiple_credentials' | 'query_token_not_allowed' | 'query_token_wrong_method' | 'invalid_body' | 'body_too_large'
>;

interface ExtractionRoute {
  readonly allowQueryToken: boolean;
  readonly allowBodyToken: boolean;
}

const TOKEN_PARAMETER = 'access_token';
/** RFC 6750 2.1: credentials = "Bearer" 1*SP b64token. */
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*)$/i;
/** A header that names the Bearer scheme but does not match BEARER is malformed, not another scheme. */
const BEARER_SCHEME = /^bearer(?:[ \t]|$)/i;
const FORM = 'application/x-www-form-urlencoded';
const JSON_TYPE = 'application/json';

export function extractCredential(
  request: FastifyRequest,
  route: ExtractionRoute,
  rawQuery: string,
  bodyLimit: number,
): Credential | ExtractionFailure | Promise<Credential | ExtractionFailure> {
  let token: string | undefined;
  const authorization = request.headers.authorization;
  if (authorization !== undefined) {
    // Node keeps only the first of repeated Authorization headers: refuse the ambiguity instead.
    if (countHeader(request.raw.rawHeaders, 'authorization') > 1) return 'multiple_credentials';
    const bearer = BEARER.exec(authorization);
    if (bearer !== null) token = bearer[1];
    else if (authorization === '' || BEARER_SCHEME.test(authorization)) return 'malformed_credential';
  }

  let query = rawQuery;
  const fromQuery = rawQuery === '' ? null : takeParameter(rawQuery, TOKEN_PARAMETER);
  if (fromQuery !== null) {
    if (!route.allowQueryToken) return 'query_token_not_allowed';
    if (request.method !== 'GET' && request.method !== 'HEAD') return 'query_token_wrong_method';
    if (token !== undefined || fromQuery.values.length > 1) return 'multiple_credentials';
    token = fromQuery.values[0];
    if (token === undefined || token === '') return 'malformed_credential';
    query = fromQuery.rest;
  }

  if (route.allowBodyToken && request.method === 'POST') {
    const type = mediaType(request.headers['content-type']);
    if (type === FORM || type === JSON_TYPE) return extractFromBody(request, type, token, query, bodyLimit);
  }
  return token === undefined ? 'token_missing' : { token, query, body: undefined };
}

async function extractFromBody(
  request: FastifyRequest,
  type: string,
  earlier: string | undefined,
  query: string,
  bodyLimit: number,
): Promise<Credential | ExtractionFailure> {
  if (Number(request.headers['content-length']) > bodyLimit) return 'body_too_large';
  const raw = request.body === undefined ? Buffer.alloc(0) : await readBody(request.body as Readable, bodyLimit);
  if (typeof raw === 'string') return raw;
  const taken = type === FORM ? takeFormToken(raw) : takeJsonToken(raw);
  if (typeof taken === 'string') return taken;
  if (taken === null) return earlier === undefined ? 'token_missing' : { token: earlier, query, body: raw };
  if (earlier !== undefined || taken.values.length > 1) return 'multiple_credentials';
  const token = taken.values[0];
  if (token === undefined || token === '') return 'malformed_credential';
  return { token, query, body: taken.body };
}

/** The form body without its access_token pairs; the other pairs keep their bytes. */
function takeFormToken(raw: Buffer): { values: Array<string | undefined>; body: Buffer } | null {
  // latin1 maps bytes 1:1, so pairs that are not touched are forwarded byte for byte.
  const taken = takeParameter(raw.toString('latin1'), TOKEN_PARAMETER);
  return taken === null ? null : { values: taken.values, body: Buffer.from(taken.rest, 'latin1') };
}

/** The JSON body without its top-level access_token member, re-encoded; null when it has none. */
function takeJsonToken(raw: Buffer): { values: Array<string | undefined>; body: Buffer } | null | 'invalid_body' {
  let value: unknown;
  try {
    value = JSON.parse(raw.toString('utf8'));
  } catch {
    return 'invalid_body';
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value) || !Object.hasOwn(value, TOKEN_PARAMETER)) return null;
  const { [TOKEN_PARAMETER]: token, ...rest } = value as Record<string, unknown>;
  return { values: [typeof token === 'string' ? token : undefined], body: Buffer.from(JSON.stringify(rest)) };
}

/**
 * Splits an `application/x-www-form-urlencoded` string (a query or a form body) into the decoded
 * values of parameter `name` and the remaining pairs, joined as they were. Names are compared
 * after decoding, so `access%5Ftoken` is `access_token` too. A value that does not decode is
 * undefined (malformed). Null when `name` does not occur.
 */
function takeParameter(encoded: string, name: string): { values: Array<string | undefined>; rest: string } | null {
  // Without the name spelled out or any escape, the parameter cannot be there: the common case costs two scans.
  if (!encoded.includes(name) && !encoded.includes('%')) return null;
  const values: Array<string | undefined> = [];
  const kept: string[] = [];
  for (const pair of encoded.split('&')) {
    const equals = pair.indexOf('=');
    const pairName = equals === -1 ? pair : pair.slice(0, equals);
    if (decodeFormComponent(pairName) === name) values.push(equals === -1 ? '' : decodeFormComponent(pair.slice(equals + 1)));
    else kept.push(pair);
  }
  return values.length === 0 ? null : { values, rest: kept.join('&') };
}

function decodeFormComponent(value: string): string | undefined {
  try {
    return decodeURIComponent(value.replace(/\+/g, ' '));
  } catch {
    return undefined;
  }
}

/** The body, or why it is refused; reading stops at `limit` bytes. */
async function readBody(stream: Readable, limit: number): Promise<Buffer | 'body_too_large' | 'invalid_body'> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    // Stopping early must not destroy the request (and its socket): the 413 still has to be sent.
    for await (const chunk of stream.iterator({ destroyOnReturn: false })) {
      size += (chunk as Buffer).length;
      if (size > limit) return 'body_too_large';
      chunks.push(chunk as Buffer);
    }
  } catch {
    // The client aborted or sent a broken chunked body.
    return 'invalid_body';
  }
  return Buffer.concat(chunks, size);
}

function mediaType(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const semicolon = contentType.indexOf(';');
  return (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase();
}

function countHeader(rawHeaders: readonly string[], lowerCaseName: string): number {
  let count = 0;
  for (let index = 0; index < rawHeaders.length; index += 2) {
    const name = rawHeaders[index]!;
    if (name.length === lowerCaseName.length && name.toLowerCase() === lowerCaseName) count += 1;
  }
  return count;
}
