import type { FastifyReply, FastifyRequest } from 'fastify';
import type { RouteConfig } from '../config/schema.js';
import { bearerChallenge, ERRORS, renderError, TokengateError, type ErrorCode } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { RouteRequests } from '../observability/requests.js';
import type { CounterSlot, HistogramSlot } from '../observability/slot-metrics.js';
import { PATH_REFUSALS, type PathRefusal } from '../http/path.js';

/**
 * Every answer the gateway gives instead of the upstream's, by its stable `reason` (the access
 * log's field and the `reason` label of tokengate_gateway_requests_total). Each names its error in
 * src/errors.ts, whether it carries an RFC 6750 section 3 challenge (`bare`: no credential was
 * presented, so no error code; `error`: with the error code and description), and its outcome
 * label: `denied` before forwarding, `failed` when the upstream did not answer.
 */
const DENIALS = {
  invalid_path: { code: 'INVALID_REQUEST', challenge: 'none', outcome: 'denied' },
  too_many_headers: { code: 'HEADERS_TOO_LARGE', challenge: 'none', outcome: 'denied', description: 'The request has too many header fields.' },
  not_found: { code: 'NOT_FOUND', challenge: 'none', outcome: 'denied' },
  method_not_allowed: { code: 'METHOD_NOT_ALLOWED', challenge: 'none', outcome: 'denied' },
  unsupported_upgrade: { code: 'INVALID_REQUEST', challenge: 'none', outcome: 'denied', description: 'Only WebSocket upgrades of GET requests are supported.' },
  token_missing: { code: 'TOKEN_MISSING', challenge: 'bare', outcome: 'denied' },
  malformed_credential: {
    code: 'INVALID_REQUEST',
    challenge: 'error',
    outcome: 'denied',
    description: 'The Authorization header or access_token parameter is not a valid bearer credential.',
  },
  multiple_credentials: {
    code: 'INVALID_REQUEST',
    challenge: 'error',
    outcome: 'denied',
    description: 'The access token must be presented once, by exactly one method.',
  },
  credential_lookalike: {
    code: 'INVALID_REQUEST',
    challenge: 'error',
    outcome: 'denied',
    description:
      'A parameter that servers read as access_token (ACCESS_TOKEN, access_token[]) is not accepted; send the token as access_token or in an Authorization header.',
  },
  query_token_not_allowed: {
    code: 'INVALID_REQUEST',
    challenge: 'error',
    outcome: 'denied',
    description: 'This route does not accept the access_token query parameter; send an Authorization header.',
  },
  query_token_wrong_method: {
    code: 'INVALID_REQUEST',
    challenge: 'error',
    outcome: 'denied',
    description: 'The access_token query parameter is accepted on GET and HEAD requests only.',
  },
  invalid_body: { code: 'INVALID_REQUEST', challenge: 'none', outcome: 'denied', description: 'The request body does not match its Content-Type.' },
  body_too_large: { code: 'BODY_TOO_LARGE', challenge: 'none', outcome: 'denied' },
  malformed_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  forged_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  unknown_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  expired_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  store_unavailable: { code: 'STORE_UNAVAILABLE', challenge: 'none', outcome: 'denied' },
  wrong_token_kind: { code: 'INSUFFICIENT_SCOPE', challenge: 'error', outcome: 'denied' },
  insufficient_scope: { code: 'INSUFFICIENT_SCOPE', challenge: 'error', outcome: 'denied' },
  upstream_unreachable: { code: 'UPSTREAM_UNAVAILABLE', challenge: 'none', outcome: 'failed' },
  upstream_timeout: { code: 'UPSTREAM_TIMEOUT', challenge: 'none', outcome: 'failed' },
} as const satisfies Record<string, { code: ErrorCode; challenge: 'none' | 'bare' | 'error'; outcome: 'denied' | 'failed'; description?: string }>;

export type DenialReason = keyof typeof DENIALS;
/** Reasons decided before a route is known; every other reason belongs to a route. */
type UnroutedReason = 'invalid_path' | 'too_many_headers' | 'not_found';
export type RouteDenialReason = Exclude<DenialReason, UnroutedReason>;

/**
 * A denial compiled at start: the whole response (status, headers, JSON body, rendered once by
 * the one error renderer) and the metric children to count it with, so refusing builds no
 * error, header or label per request.
 */
export interface Denial {
  readonly reason: DenialReason;
  readonly route: string;
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly count: CounterSlot;
  readonly duration: HistogramSlot;
  /** The route's request counters and access log. */
  readonly requests: RouteRequests;
}

export interface UnroutedDenials {
  readonly notFound: Denial;
  readonly tooManyHeaders: Denial;
  readonly invalidPath: ReadonlyMap<PathRefusal, Denial>;
}

/** The denials of requests that matched no route; `requests` counts them under the route label `(none)`. */
export function compileUnroutedDenials(metrics: Metrics, requests: RouteRequests): UnroutedDenials {
  const invalidPath = new Map<PathRefusal, Denial>();
  for (const refusal of Object.values(PATH_REFUSALS)) {
    invalidPath.set(refusal, compileDenial('invalid_path', { description: refusal.description }, metrics, requests));
  }
  return {
    notFound: compileDenial('not_found', {}, metrics, requests),
    tooManyHeaders: compileDenial('too_many_headers', { headers: { connection: 'close' } }, metrics, requests),
    invalidPath,
  };
}

/** Every denial of one route, with its label, its Allow header and the scopes its challenge names. */
export function compileRouteDenials(route: RouteConfig, realm: string, metrics: Metrics, requests: RouteRequests): Readonly<Record<RouteDenialReason, Denial>> {
  const denials = {} as Record<RouteDenialReason, Denial>;
  for (const reason of Object.keys(DENIALS) as DenialReason[]) {
    if (reason === 'invalid_path' || reason === 'too_many_headers' || reason === 'not_found') continue;
    const spec: { code: ErrorCode; challenge: string; description?: string } = DENIALS[reason];
    const description = reason === 'wrong_token_kind' ? `This route requires ${route.token === 'user' ? 'a user' : 'an application'} token.` : spec.description;
    const failure = { error: ERRORS[spec.code].error, description: description ?? ERRORS[spec.code].description };
    const headers: Record<string, string> = {};
    if (spec.challenge === 'bare') headers['www-authenticate'] = bearerChallenge(realm);
    if (spec.challenge === 'error') headers['www-authenticate'] = bearerChallenge(realm, failure, spec.code === 'INSUFFICIENT_SCOPE' ? route.scopes : []);
    if (reason === 'method_not_allowed') headers.allow = route.methods.join(', ');
    // The client may not drain a refused body: close the connection instead of reading it.
    if (reason === 'body_too_large') headers.connection = 'close';
    denials[reason] = compileDenial(reason, { description, headers }, metrics, requests);
  }
  return denials;
}

function compileDenial(
  reason: DenialReason,
  options: { description?: string | undefined; headers?: Record<string, string> },
  metrics: Metrics,
  requests: RouteRequests,
): Denial {
  const spec: { code: ErrorCode; outcome: string; description?: string } = DENIALS[reason];
  const rendered = renderError(new TokengateError(spec.code, { description: options.description ?? spec.description, headers: options.headers }));
  const label = requests.route;
  return {
    reason,
    route: label,
    ...rendered,
    count: metrics.gatewayRequests.labels(label, spec.outcome, reason),
    duration: metrics.gatewayDuration.labels(label),
    requests,
  };
}

/**
 * Answers with a compiled denial: counted and timed by reason, and given its access log line.
 * Refusals a client causes (and an attacker can send by the thousand: a forged-token flood once
 * wrote 19 MB of log in 5 s) are only logged with `logging.requests: all`; the 5xx answers,
 * store or upstream trouble, also with the default `errors`.
 */
export function deny(request: FastifyRequest, reply: FastifyReply, denial: Denial, requestIdHeader: string): FastifyReply {
  countDenial(request, reply, denial);
  return reply.code(denial.status).headers(denial.headers).header(requestIdHeader, request.id).send(denial.body);
}

/**
 * Counts, times and logs a denial; for answers written without the reply's send (after it was
 * handed to the forwarder). `error`: the code of the upstream failure behind it, for the log.
 */
export function countDenial(request: FastifyRequest, reply: FastifyReply, denial: Denial, error?: string): void {
  denial.count.inc();
  denial.duration.observe(reply.elapsedTime / 1000);
  denial.requests.completed(request, reply, denial.status, denial.reason, null, error);
}
