import type { FastifyReply, FastifyRequest } from 'fastify';
import type { RouteConfig } from '../config/schema.js';
import { bearerChallenge, ERRORS, renderError, TokengateError, type ErrorCode } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { CounterSlot, HistogramSlot } from '../observability/slot-metrics.js';
import { PATH_REFUSALS, type PathRefusal } from '../http/path.js';

/**
 * Every answer the gateway gives instead of the upstream's, by its stable `reason` (the log
 * field and the `reason` label of tokengate_gateway_requests_total). Each names its error in
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
}

/** Metric label of requests that matched no route. */
const UNROUTED_LABEL = '(none)';

export interface UnroutedDenials {
  readonly notFound: Denial;
  readonly tooManyHeaders: Denial;
  readonly invalidPath: ReadonlyMap<PathRefusal, Denial>;
}

export function compileUnroutedDenials(metrics: Metrics): UnroutedDenials {
  const invalidPath = new Map<PathRefusal, Denial>();
  for (const refusal of Object.values(PATH_REFUSALS)) {
    invalidPath.set(refusal, compileDenial('invalid_path', UNROUTED_LABEL, { description: refusal.description }, metrics));
  }
  return {
    notFound: compileDenial('not_found', UNROUTED_LABEL, {}, metrics),
    tooManyHeaders: compileDenial('too_many_headers', UNROUTED_LABEL, { headers: { connection: 'close' } }, metrics),
    invalidPath,
  };
}

/** Every denial of one route, with its label, its Allow header and the scopes its challenge names. */
export function compileRouteDenials(route: RouteConfig, label: string, realm: string, metrics: Metrics): Readonly<Record<RouteDenialReason, Denial>> {
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
    denials[reason] = compileDenial(reason, label, { description, headers }, metrics);
  }
  return denials;
}

function compileDenial(
  reason: DenialReason,
  label: string,
  options: { description?: string | undefined; headers?: Record<string, string> },
  metrics: Metrics,
): Denial {
  const spec: { code: ErrorCode; outcome: string; description?: string } = DENIALS[reason];
  const rendered = renderError(new TokengateError(spec.code, { description: options.description ?? spec.description, headers: options.headers }));
  return {
    reason,
    route: label,
    ...rendered,
    count: metrics.gatewayRequests.labels(label, spec.outcome, reason),
    duration: metrics.gatewayDuration.labels(label),
  };
}

/**
 * Answers with a compiled denial: counted, timed and logged with its reason. Refusals a client
 * causes (and an attacker can send by the thousand: a forged-token flood wrote 19 MB of log in
 * 5 s at info) are counted by reason and logged at debug; what is wrong on the service's side
 * is logged at warn.
 */
export function deny(request: FastifyRequest, reply: FastifyReply, denial: Denial, requestIdHeader: string): FastifyReply {
  countDenial(request, denial, reply.elapsedTime);
  return reply.code(denial.status).headers(denial.headers).header(requestIdHeader, request.id).send(denial.body);
}

/** Counts, times and logs a denial; for answers written without the reply (after it was handed to the forwarder). */
export function countDenial(request: FastifyRequest, denial: Denial, elapsedMs: number): void {
  denial.count.inc();
  denial.duration.observe(elapsedMs / 1000);
  if (denial.status >= 500) {
    request.log.warn(
      { reason: denial.reason, route: denial.route },
      DENIALS[denial.reason].outcome === 'denied' ? 'gateway could not check the request' : 'upstream did not answer',
    );
  } else {
    request.log.debug({ reason: denial.reason, route: denial.route }, 'gateway refused the request');
  }
}
