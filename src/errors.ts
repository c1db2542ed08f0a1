import { STATUS_CODES } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Every error tokengate answers with, in one table. Each entry has a stable `code` (the key),
 * the HTTP status, the RFC error string sent on the wire and a public description. Callers
 * raise `new TokengateError('CODE')`, optionally with a more precise public description and a
 * private `detail` for logs; nobody builds an ad-hoc error body.
 */
export const ERRORS = {
  // RFC 6749 section 5.2 (token endpoint) and 4.1.2.1 (authorization endpoint)
  INVALID_REQUEST: {
    status: 400,
    error: 'invalid_request',
    description: 'The request is missing a required parameter, includes an unsupported parameter value, repeats a parameter, or is otherwise malformed.',
  },
  INVALID_CLIENT: {
    status: 401,
    error: 'invalid_client',
    description: 'Client authentication failed due to unknown client, no client authentication included, or unsupported authentication method.',
  },
  INVALID_GRANT: {
    status: 400,
    error: 'invalid_grant',
    description:
      'The provided authorization grant is invalid, expired, revoked, does not match the redirection URI used in the authorization request, or was issued to another client.',
  },
  UNAUTHORIZED_CLIENT: { status: 400, error: 'unauthorized_client', description: 'The client is not authorized to use this authorization grant type.' },
  UNSUPPORTED_GRANT_TYPE: {
    status: 400,
    error: 'unsupported_grant_type',
    description: 'The authorization grant type is not supported by the authorization server.',
  },
  INVALID_SCOPE: { status: 400, error: 'invalid_scope', description: 'The requested scope is invalid, unknown, or malformed.' },
  // RFC 8707 section 2: a `resource` parameter the issuer does not know or the application may not use
  INVALID_TARGET: { status: 400, error: 'invalid_target', description: 'The requested resource is invalid, unknown, or not permitted for this application.' },
  UNSUPPORTED_RESPONSE_TYPE: {
    status: 400,
    error: 'unsupported_response_type',
    description: 'The authorization server does not support obtaining an authorization code using this method.',
  },
  ACCESS_DENIED: { status: 400, error: 'access_denied', description: 'The resource owner or authorization server denied the request.' },
  // OpenID Connect Core 1.0 section 3.1.2.6: what a request with prompt=none is answered with when the user would have to act.
  LOGIN_REQUIRED: { status: 400, error: 'login_required', description: 'The user must sign in, and prompt=none allows no page.' },
  CONSENT_REQUIRED: { status: 400, error: 'consent_required', description: 'The user must approve the request, and prompt=none allows no page.' },
  INTERACTION_REQUIRED: {
    status: 400,
    error: 'interaction_required',
    description: 'The user must confirm this request on a page each time, and prompt=none allows no page.',
  },
  UNSUPPORTED_TOKEN_TYPE: {
    status: 400,
    error: 'unsupported_token_type',
    description: 'The authorization server does not support the revocation of the presented token type.',
  },
  UNSUPPORTED_MEDIA_TYPE: {
    status: 415,
    error: 'invalid_request',
    description: 'The request body must be application/x-www-form-urlencoded or application/json.',
  },
  BODY_TOO_LARGE: { status: 413, error: 'invalid_request', description: 'The request body is too large.' },
  HEADERS_TOO_LARGE: { status: 431, error: 'invalid_request', description: 'The request headers are too large.' },
  REQUEST_TIMEOUT: { status: 408, error: 'invalid_request', description: 'The request was not received in time.' },
  // authorization page: shown as an HTML page, never sent to the redirect_uri (RFC 6749 4.1.2.1)
  UNKNOWN_CLIENT: {
    status: 400,
    error: 'invalid_client',
    description: 'The application asking you to sign in is not registered here (its client_id is missing or unknown).',
  },
  INVALID_REDIRECT_URI: {
    status: 400,
    error: 'invalid_request',
    description: 'The application gave a redirect_uri that is missing or not registered for it, so you cannot be sent back to it.',
  },
  FORM_EXPIRED: {
    status: 403,
    error: 'invalid_request',
    description: 'This form has expired or did not come from this page. Go back to the application and start again.',
  },
  AUTHORIZATION_REQUEST_EXPIRED: {
    status: 400,
    error: 'invalid_request',
    description: 'This sign-in request has expired or was already answered. Go back to the application and start again.',
  },
  // client ID metadata documents (docs/client-metadata.md): pages at /oauth/authorize, invalid_client at the back channel
  CLIENT_NOT_ALLOWED: { status: 400, error: 'invalid_client', description: "The application is not on this service's list of allowed applications." },
  CLIENT_METADATA_UNUSABLE: { status: 502, error: 'invalid_client', description: "The application's description could not be fetched or is not valid." },
  IDENTITY_PROVIDER_UNAVAILABLE: {
    status: 503,
    error: 'temporarily_unavailable',
    description: "The identity provider's signing keys could not be fetched. Try again in a few minutes.",
    headers: { 'retry-after': '5' },
  },
  USER_SOURCE_UNAVAILABLE: { status: 503, error: 'temporarily_unavailable', description: 'Sign-in is temporarily unavailable. Try again in a few minutes.' },
  // RFC 6750 section 3.1 (resource requests through the gateway)
  TOKEN_MISSING: { status: 401, error: 'invalid_token', description: 'An access token is required.' },
  INVALID_TOKEN: { status: 401, error: 'invalid_token', description: 'The access token is invalid, expired or revoked.' },
  // RFC 9449 (DPoP): proofs at the token endpoint (section 5) and at resources (section 7.1)
  DPOP_TOKEN_REQUIRED: { status: 401, error: 'invalid_token', description: 'This resource requires a DPoP-bound access token and its DPoP proof.' },
  INVALID_DPOP_PROOF: {
    status: 401,
    error: 'invalid_dpop_proof',
    description: 'The DPoP proof is missing, invalid, or does not match this request or this access token.',
  },
  TOKEN_REQUEST_DPOP_PROOF: { status: 400, error: 'invalid_dpop_proof', description: 'The DPoP proof is missing or invalid.' },
  USE_DPOP_NONCE: {
    status: 400,
    error: 'use_dpop_nonce',
    description: 'The DPoP proof must carry the server nonce given in the DPoP-Nonce response header; retry with it.',
  },
  INSUFFICIENT_SCOPE: { status: 403, error: 'insufficient_scope', description: 'The access token does not grant access to this resource.' },
  // A page of another site, or a name this route does not answer to (DNS rebinding): docs/gateway.md#origins-and-hosts.
  FOREIGN_CALLER: { status: 403, error: 'forbidden', description: 'This route does not answer requests from this origin or for this host.' },
  // gateway and service conditions
  NOT_FOUND: { status: 404, error: 'not_found', description: 'No route matches this path.' },
  METHOD_NOT_ALLOWED: { status: 405, error: 'method_not_allowed', description: 'This route does not accept this method.' },
  TOO_MANY_REQUESTS: { status: 429, error: 'too_many_requests', description: 'Too many attempts; try again later.' },
  // Rate limit policies (docs/rate-limits.md): each refusal carries its own Retry-After and RateLimit fields.
  RATE_LIMITED: { status: 429, error: 'rate_limited', description: "The application's request rate is over its limit; retry after the time in Retry-After." },
  QUOTA_EXCEEDED: { status: 429, error: 'quota_exceeded', description: "The application's request quota is used up; retry after the time in Retry-After." },
  // Retry-After: the client should try again shortly; the store is usually back within seconds.
  STORE_UNAVAILABLE: {
    status: 503,
    error: 'temporarily_unavailable',
    description: 'The token store is unreachable; try again shortly.',
    headers: { 'retry-after': '1' },
  },
  // Connection limits (docs/operations.md): the listener answers, then closes the connection.
  TOO_MANY_CONNECTIONS: {
    status: 503,
    error: 'temporarily_unavailable',
    description: 'The server has too many open connections; try again shortly.',
    headers: { 'retry-after': '1' },
  },
  TOO_MANY_CONNECTIONS_FROM_ADDRESS: {
    status: 429,
    error: 'too_many_requests',
    description: 'Too many open connections from your address; close one or try again shortly.',
    headers: { 'retry-after': '1' },
  },
  UPSTREAM_UNAVAILABLE: { status: 502, error: 'bad_gateway', description: 'The upstream service could not be reached.' },
  UPSTREAM_TIMEOUT: { status: 504, error: 'gateway_timeout', description: 'The upstream service did not answer in time.' },
  // Security Event Tokens pushed to /ssf/events/<name> (RFC 8935 section 2.3) or refused in a poll's
  // setErrs (RFC 8936 section 2.4): `error` is the RFC 8935 `err` code (renderSetError).
  SET_INVALID_REQUEST: { status: 400, error: 'invalid_request', description: 'The request is not a Security Event Token this receiver accepts.' },
  SET_INVALID_KEY: {
    status: 400,
    error: 'invalid_key',
    description: 'The SET is not signed by a key of the identity provider, with an asymmetric algorithm it is trusted to sign with.',
  },
  SET_INVALID_ISSUER: { status: 400, error: 'invalid_issuer', description: "The SET's issuer is not this receiver's identity provider." },
  SET_INVALID_AUDIENCE: { status: 400, error: 'invalid_audience', description: "The SET's audience is not this receiver." },
  SET_AUTHENTICATION_FAILED: {
    status: 400,
    error: 'authentication_failed',
    description: 'The transmitter was not authenticated: its Authorization header is missing or not the one this receiver was given.',
  },
  SET_ACCESS_DENIED: { status: 400, error: 'access_denied', description: 'The transmitter may not send this SET to this receiver.' },
  SET_BEING_APPLIED: {
    status: 503,
    error: 'temporarily_unavailable',
    description: 'This event is being applied by another instance; send it again shortly.',
    headers: { 'retry-after': '1' },
  },
  ADMIN_UNAUTHORIZED: { status: 401, error: 'unauthorized', description: 'The admin API requires a valid admin bearer token.' },
  ADMIN_FORBIDDEN: { status: 403, error: 'forbidden', description: 'The admin API does not answer this request, whatever its token.' },
  CONFLICT: { status: 409, error: 'conflict', description: 'The resource already exists.' },
  RESOURCE_NOT_FOUND: { status: 404, error: 'not_found', description: 'The requested resource does not exist.' },
  INTERNAL: { status: 500, error: 'server_error', description: 'The server encountered an unexpected condition.' },
} as const satisfies Record<string, { status: number; error: string; description: string; headers?: Readonly<Record<string, string>> }>;

export type ErrorCode = keyof typeof ERRORS;

export interface ErrorOptions {
  /** Replaces the table's public description; must never contain a secret. */
  description?: string;
  /** Private detail for the log line only; must never contain a secret either. */
  detail?: string;
  cause?: unknown;
  /** Response headers the error carries (`WWW-Authenticate`, `Allow`), added to the table's own (`Retry-After`). */
  headers?: Readonly<Record<string, string>>;
}

export class TokengateError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly error: string;
  readonly description: string;
  readonly detail: string | undefined;
  readonly headers: Readonly<Record<string, string>> | undefined;

  constructor(code: ErrorCode, options: ErrorOptions = {}) {
    const entry = ERRORS[code];
    super(options.description ?? entry.description, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'TokengateError';
    this.code = code;
    this.status = entry.status;
    this.error = entry.error;
    this.description = options.description ?? entry.description;
    this.detail = options.detail;
    const tableHeaders = 'headers' in entry ? entry.headers : undefined;
    this.headers = tableHeaders === undefined ? options.headers : { ...tableHeaders, ...options.headers };
  }

  /** The RFC 6749 section 5.2 / RFC 6750 error body. */
  toBody(): { error: string; error_description: string } {
    return { error: this.error, error_description: this.description };
  }
}

export function isTokengateError(value: unknown): value is TokengateError {
  return value instanceof TokengateError;
}

/**
 * The one normalizer every renderer (JSON, the sign-in pages, the metrics) starts from: a
 * TokengateError stays as it is (the store's and the user source's failures are
 * TokengateErrors too); fastify's own client errors (bad JSON, body too large, unsupported media
 * type, a malformed path) become the matching entry; anything else is INTERNAL, its detail kept
 * for the log only.
 */
export function toTokengateError(error: unknown): TokengateError {
  if (isTokengateError(error)) return error;
  const { code, statusCode } = error as { code?: string; statusCode?: number };
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') return new TokengateError('BODY_TOO_LARGE');
  if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return new TokengateError('UNSUPPORTED_MEDIA_TYPE');
  if (statusCode !== undefined && statusCode >= 400 && statusCode < 500)
    return new TokengateError('INVALID_REQUEST', { description: clientErrorDescription(code) });
  return new TokengateError('INTERNAL', { cause: error });
}

/** Fastify's client-error messages describe the request's shape, never its content: safe to show. */
function clientErrorDescription(code: string | undefined): string {
  switch (code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return 'The request body is not valid JSON.';
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return 'The Content-Length header does not match the body.';
    case 'FST_ERR_BAD_URL':
      return 'The request path is not valid percent-encoded UTF-8.';
    default:
      return 'The request is malformed.';
  }
}

/** The failure each request was answered with, for its access log line. */
const answered = new WeakMap<FastifyRequest, TokengateError>();

/** The failure `request` was answered with by an error handler, if it was. */
export function failureOf(request: FastifyRequest): TokengateError | undefined {
  return answered.get(request);
}

/**
 * What answering with a failure leaves behind, wherever it is answered: the failure itself, for
 * the request's access log line (failureOf; that line says every 5xx at warn), and, beside it,
 * what is wrong with tokengate at error with the cause's stack, or a private detail (what the
 * store or a user service said, why a client was refused) at info. Details never hold a secret.
 */
export function noteFailure(request: FastifyRequest, failure: TokengateError): void {
  answered.set(request, failure);
  if (failure.code === 'INTERNAL') request.log.error({ err: failure.cause }, 'unhandled error');
  else if (failure.detail !== undefined) request.log.info({ code: failure.code, detail: failure.detail }, 'request refused');
}

/**
 * The fastify error handler of every JSON listener: the failure, normalized, logged, and answered
 * with its rendering; with a realm, a 401 also carries its RFC challenge (the issuer's endpoints
 * and the admin API; the gateway's denials carry their own, compiled at start).
 */
export function jsonErrorHandler(realm?: string) {
  return function answerError(error: unknown, request: FastifyRequest, reply: FastifyReply): void {
    const failure = toTokengateError(error);
    noteFailure(request, failure);
    const { status, headers, body } = renderError(failure);
    reply.code(status).headers(headers);
    const challenge = realm === undefined ? undefined : authenticateChallenge(failure, realm);
    if (challenge !== undefined) reply.header('www-authenticate', challenge);
    void reply.send(body);
  };
}

/** Quotes a value for an RFC 7235 auth-param (`realm="..."`). */
export function quoteAuthParam(value: string): string {
  return `"${value.replace(/["\\]/g, '\\$&')}"`;
}

/**
 * The `WWW-Authenticate` challenge a refusal carries, if any: Basic for failed client
 * authentication (RFC 6749 section 5.2), Bearer for access tokens (RFC 6750 section 3; no error
 * code when no token was presented at all) and for the admin token.
 */
export function authenticateChallenge(failure: TokengateError, realm: string): string | undefined {
  switch (failure.code) {
    case 'INVALID_CLIENT':
      return `Basic realm=${quoteAuthParam(realm)}`;
    case 'TOKEN_MISSING':
    case 'ADMIN_UNAUTHORIZED':
      return bearerChallenge(realm);
    case 'INVALID_TOKEN':
      return bearerChallenge(realm, failure);
    default:
      return undefined;
  }
}

/**
 * The `WWW-Authenticate` value of RFC 6750 section 3: a bare `Bearer realm="..."` when the
 * request carried no bearer credential, otherwise with the error code and its description,
 * and the scopes the resource needs for `insufficient_scope`.
 */
export function bearerChallenge(
  realm: string,
  failure?: { error: string; description: string },
  scopes: readonly string[] = [],
  resourceMetadata: string | null = null,
): string {
  let challenge = `Bearer realm=${quoteAuthParam(realm)}`;
  if (failure !== undefined) challenge += `, error=${quoteAuthParam(failure.error)}, error_description=${quoteAuthParam(failure.description)}`;
  if (scopes.length > 0) challenge += `, scope=${quoteAuthParam(scopes.join(' '))}`;
  // RFC 9728 section 5.1: where the client learns which issuer and resource to ask a token for.
  if (resourceMetadata !== null) challenge += `, resource_metadata=${quoteAuthParam(resourceMetadata)}`;
  return challenge;
}

/**
 * The `WWW-Authenticate` value of RFC 9449 section 7.1: the DPoP scheme, the error when a token
 * or proof was presented, and the algorithms a proof may use.
 */
export function dpopChallenge(
  realm: string,
  algorithms: readonly string[],
  failure?: { error: string; description: string },
  scopes: readonly string[] = [],
  resourceMetadata: string | null = null,
): string {
  let challenge = `DPoP realm=${quoteAuthParam(realm)}`;
  if (failure !== undefined) challenge += `, error=${quoteAuthParam(failure.error)}, error_description=${quoteAuthParam(failure.description)}`;
  if (scopes.length > 0) challenge += `, scope=${quoteAuthParam(scopes.join(' '))}`;
  challenge += `, algs=${quoteAuthParam(algorithms.join(' '))}`;
  return resourceMetadata === null ? challenge : `${challenge}, resource_metadata=${quoteAuthParam(resourceMetadata)}`;
}

/** The response an error is answered with, wherever it is answered: its status, its headers and the RFC body. */
export interface RenderedError {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** The one rendering of a TokengateError: the RFC 6749 / RFC 6750 JSON body, never cached, with the error's own headers. */
export function renderError(failure: TokengateError): RenderedError {
  return {
    status: failure.status,
    headers: Object.freeze({ 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', ...failure.headers }),
    body: JSON.stringify(failure.toBody()),
  };
}

/**
 * A refusal of a Security Event Token as RFC 8935 section 2.3 words it: `{"err","description"}`.
 * Only the SET_ errors of 400 have an `err` code; any other failure renders as every other error.
 */
export function renderSetError(failure: TokengateError): RenderedError {
  if (!failure.code.startsWith('SET_') || failure.status !== 400) return renderError(failure);
  return {
    status: failure.status,
    headers: Object.freeze({ 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }),
    body: JSON.stringify({ err: failure.error, description: failure.description }),
  };
}

/**
 * A whole HTTP/1.1 error response as bytes, for failures found before there is a request
 * object to answer through (a head the parser refuses, a connection over a limit): the same
 * rendering as every other error, and the connection is closed after it.
 */
export function rawErrorResponse(failure: TokengateError): string {
  const { status, headers, body } = renderError(failure);
  let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\n`;
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`;
  return `${head}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}
