import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { MALFORMED_BEARER, parseBearer, parseDpopAuthorization } from '../http/bearer.js';
import { parameterTaker } from '../http/form.js';
import { takeJsonMember } from '../http/json-member.js';
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
 *   body is read (up to server.bodyLimit); a `multipart/form-data` POST body is refused there;
 *   every other body streams to the upstream untouched.
 * - the `Authorization: DPoP <token>` header of RFC 9449 section 7.1, with the request's `DPoP`
 *   proof header (checked after the token, see src/dpop/resource-proof.ts).
 * Two methods at once, a repeated parameter or two Authorization headers: 400 invalid_request.
 * So is a query or form parameter that frameworks read as `access_token` although it is
 * spelled otherwise (`ACCESS_TOKEN`, `access_token[]`, or after a `;`): it would reach the
 * upstream unchecked.
 */
export interface Credential {
  readonly token: string;
  /** `dpop` for `Authorization: DPoP`; `bearer` for every other way a token is sent. */
  readonly scheme: 'bearer' | 'dpop';
  /** The one `DPoP` header of a DPoP credential; undefined otherwise (none, or more than one). */
  readonly proof: string | undefined;
  /** The query string to forward (without `?`): the request's, minus every access_token parameter. */
  readonly query: string;
  /** The body to forward when it had to be read (without access_token), else undefined. */
  readonly body: Buffer | undefined;
}

export type ExtractionFailure = Extract<
  RouteDenialReason,
  | 'token_missing'
  | 'malformed_credential'
  | 'multiple_credentials'
  | 'credential_lookalike'
  | 'multipart_body'
  | 'query_token_not_allowed'
  | 'query_token_wrong_method'
  | 'invalid_body'
  | 'body_too_large'
>;

interface ExtractionRoute {
  readonly allowQueryToken: boolean;
  readonly allowBodyToken: boolean;
}

/** The parts of a request a credential can be in. */
export interface CredentialSource {
  readonly method?: string | undefined;
  readonly headers: IncomingHttpHeaders;
  readonly rawHeaders: readonly string[];
}

const TOKEN_PARAMETER = 'access_token';
const takeTokenParameter = parameterTaker(TOKEN_PARAMETER);
const FORM = 'application/x-www-form-urlencoded';
const JSON_TYPE = 'application/json';
const MULTIPART = 'multipart/form-data';

/**
 * The one credential of a request, or why there is none. Synchronous unless a body has to be
 * read (`body`: the request body, on a route that accepts body tokens; null where bodies are
 * never read).
 */
export function extractCredential(
  route: ExtractionRoute,
  request: CredentialSource,
  rawQuery: string,
  body: Readable | null,
  bodyLimit: number,
): Credential | ExtractionFailure | Promise<Credential | ExtractionFailure> {
  let token: string | undefined;
  let scheme: Credential['scheme'] = 'bearer';
  let proof: string | undefined;
  const authorization = request.headers.authorization;
  if (authorization !== undefined) {
    // Node keeps only the first of repeated Authorization headers: refuse the ambiguity instead.
    if (countHeader(request.rawHeaders, 'authorization') > 1) return 'multiple_credentials';
    const bearer = parseBearer(authorization);
    if (bearer === MALFORMED_BEARER) return 'malformed_credential';
    if (bearer !== null) token = bearer;
    else {
      const dpop = parseDpopAuthorization(authorization);
      if (dpop === MALFORMED_BEARER) return 'malformed_credential';
      if (dpop !== null) {
        token = dpop;
        scheme = 'dpop';
        // Node joins repeated DPoP fields with ", ": exactly one is accepted (RFC 9449 section 4.3).
        proof = countHeader(request.rawHeaders, 'dpop') === 1 ? (request.headers.dpop as string) : undefined;
      }
    }
  }

  let query = rawQuery;
  const fromQuery = rawQuery === '' ? null : takeTokenParameter(rawQuery);
  if (fromQuery !== null) {
    if (fromQuery.lookalike) return 'credential_lookalike';
    if (!route.allowQueryToken) return 'query_token_not_allowed';
    if (request.method !== 'GET' && request.method !== 'HEAD') return 'query_token_wrong_method';
    if (token !== undefined || fromQuery.values.length > 1) return 'multiple_credentials';
    token = fromQuery.values[0];
    if (token === undefined || token === '') return 'malformed_credential';
    query = fromQuery.rest;
  }

  if (body !== null && route.allowBodyToken && request.method === 'POST') {
    const type = mediaType(request.headers['content-type']);
    // Servers read multipart fields as parameters too (Rack, PHP, Django): an access_token field in
    // one would reach the upstream unchecked, and multipart is not read here (no parser on the
    // forwarding path, and uploads would be held to server.bodyLimit). Such routes refuse it.
    if (type === MULTIPART) return 'multipart_body';
    if (type === FORM || type === JSON_TYPE)
      return extractFromBody(request, body, type, token === undefined ? undefined : { token, scheme, proof }, query, bodyLimit);
  }
  return token === undefined ? 'token_missing' : { token, scheme, proof, query, body: undefined };
}

async function extractFromBody(
  request: CredentialSource,
  body: Readable,
  type: string,
  earlier: Pick<Credential, 'token' | 'scheme' | 'proof'> | undefined,
  query: string,
  bodyLimit: number,
): Promise<Credential | ExtractionFailure> {
  if (Number(request.headers['content-length']) > bodyLimit) return 'body_too_large';
  const raw = await readBody(body, bodyLimit);
  if (typeof raw === 'string') return raw;
  const taken = type === FORM ? takeFormToken(raw) : takeJsonToken(raw);
  if (typeof taken === 'string') return taken;
  if (taken === null) return earlier === undefined ? 'token_missing' : { ...earlier, query, body: raw };
  if (earlier !== undefined || taken.values.length > 1) return 'multiple_credentials';
  const token = taken.values[0];
  if (token === undefined || token === '') return 'malformed_credential';
  return { token, scheme: 'bearer', proof: undefined, query, body: taken.body };
}

type TakenToken = { values: ReadonlyArray<string | undefined>; body: Buffer } | null;

/** The form body without its access_token pairs; the other pairs keep their bytes. */
function takeFormToken(raw: Buffer): TakenToken | 'credential_lookalike' {
  // latin1 maps bytes 1:1, so pairs that are not touched are forwarded byte for byte.
  const taken = takeTokenParameter(raw.toString('latin1'));
  if (taken === null) return null;
  if (taken.lookalike) return 'credential_lookalike';
  return { values: taken.values, body: Buffer.from(taken.rest, 'latin1') };
}

/** The JSON body without its top-level access_token member, every other byte as sent; null when it has none. */
function takeJsonToken(raw: Buffer): TakenToken | 'invalid_body' {
  const taken = takeJsonMember(raw, TOKEN_PARAMETER);
  if (taken === 'invalid') return 'invalid_body';
  return taken === null ? null : { values: taken.values, body: taken.rest };
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
