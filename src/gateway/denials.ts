import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Counter, Histogram } from 'prom-client';
import type { RouteConfig } from '../config/schema.js';
import { bearerChallenge, ERRORS, TokengateError, type ErrorCode } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import { PATH_REFUSALS, type PathRefusal } from './normalize-path.js';

/**
 * Every answer the gateway gives instead of the upstream's, by its stable `reason` (the log
 * field and the `reason` label of tokengate_gateway_requests_total). Each names its error in
 * src/errors.ts, whether it carries an RFC 6750 section 3 challenge (`bare`: no credential was
 * presented, so no error code; `error`: with the error code and description), and its outcome
 * label: `denied` before forwarding, `failed` when the upstream did not answer.
 */
const DENIALS = {
  invalid_path: { code: 'INVALID_REQUEST', challenge: 'none', outcome: 'denied' },
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
type UnroutedReason = 'invalid_path' | 'not_found';
export type RouteDenialReason = Exclude<DenialReason, UnroutedReason>;

/** A denial compiled at start: the error to send and the metric children to count it with. */
export interface Denial {
  readonly reason: DenialReason;
  readonly route: string;
  readonly error: TokengateError;
  readonly count: Counter.Internal;
  readonly duration: Histogram.Internal<'route'>;
}

/** Metric label of requests that matched no route. */
const UNROUTED_LABEL = '(none)';

export interface UnroutedDenials {
  readonly notFound: Denial;
  readonly invalidPath: ReadonlyMap<PathRefusal, Denial>;
}

export function compileUnroutedDenials(metrics: Metrics): UnroutedDenials {
  const invalidPathCount = metrics.gatewayRequests.labels(UNROUTED_LABEL, 'denied', 'invalid_path');
  const duration = metrics.gatewayDuration.labels(UNROUTED_LABEL);
  const invalidPath = new Map<PathRefusal, Denial>();
  for (const refusal of Object.values(PATH_REFUSALS)) {
    const error = new TokengateError('INVALID_REQUEST', { description: refusal.description });
    invalidPath.set(refusal, { reason: 'invalid_path', route: UNROUTED_LABEL, error, count: invalidPathCount, duration });
  }
  return { notFound: compileDenial('not_found', UNROUTED_LABEL, {}, metrics), invalidPath };
}

/** Every denial of one route, with its label, its Allow header and the scopes its challenge names. */
export function compileRouteDenials(route: RouteConfig, label: string, realm: string, metrics: Metrics): Readonly<Record<RouteDenialReason, Denial>> {
  const denials = {} as Record<RouteDenialReason, Denial>;
  for (const reason of Object.keys(DENIALS) as DenialReason[]) {
    if (reason === 'invalid_path' || reason === 'not_found') continue;
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
  const spec = DENIALS[reason];
  const headers = options.headers !== undefined && Object.keys(options.headers).length > 0 ? Object.freeze(options.headers) : undefined;
  return {
    reason,
    route: label,
    error: new TokengateError(spec.code, { description: options.description, headers }),
    count: metrics.gatewayRequests.labels(label, spec.outcome, reason),
    duration: metrics.gatewayDuration.labels(label),
  };
}

/**
 * Answers with a compiled denial: counted, timed and logged with its reason, and rendered by the
 * one error renderer (app.ts) from the TokengateError it carries, headers included.
 */
export function deny(request: FastifyRequest, reply: FastifyReply, denial: Denial): FastifyReply {
  denial.count.inc();
  denial.duration.observe(reply.elapsedTime / 1000);
  // Refusals a client causes (and an attacker can send by the thousand: a forged-token flood
  // wrote 19 MB of log in 5 s at info) are counted by reason and logged at debug; what is wrong
  // on the service's side is logged at warn.
  if (denial.error.status >= 500)
    request.log.warn(
      { reason: denial.reason, route: denial.route },
      DENIALS[denial.reason].outcome === 'denied' ? 'gateway could not check the request' : 'upstream did not answer',
    );
  else request.log.debug({ reason: denial.reason, route: denial.route }, 'gateway refused the request');
  return reply.send(denial.error);
}
