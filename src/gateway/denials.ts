import type { FastifyReply, FastifyRequest } from 'fastify';
import type { RouteConfig } from '../config/schema.js';
import { DPOP_SIGNING_ALGORITHMS } from '../dpop/algorithms.js';
import { bearerChallenge, dpopChallenge, ERRORS, renderError, TokengateError, type ErrorCode } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { RouteRequests } from '../observability/requests.js';
import { CounterSlot, HistogramSlot } from '../observability/slot-metrics.js';
import { PATH_REFUSALS, type PathRefusal } from '../http/path.js';

/**
 * Every answer the gateway or the decision listener gives instead of the upstream's, by its
 * stable `reason` (the log field and the `reason` label of tokengate_gateway_requests_total and
 * tokengate_decisions_total). Each names its error in src/errors.ts, whether it carries an
 * RFC 6750 section 3 challenge (`bare`: no credential was presented, so no error code; `error`:
 * with the error code and description; `dpop`: an RFC 9449 DPoP challenge with its error, beside
 * a bare Bearer one where the route accepts Bearer tokens; both bare where no credential was
 * presented on such a route), and its outcome label: `denied` before forwarding,
 * `failed` when the upstream did not answer. `only` marks the answers one listener alone gives
 * (the other neither counts nor exports them).
 */
interface DenialSpec {
  code: ErrorCode;
  challenge: 'none' | 'bare' | 'error' | 'dpop';
  outcome: 'denied' | 'failed';
  description?: string;
  only?: 'gateway' | 'decisions';
}

export const DENIALS = {
  invalid_path: { code: 'INVALID_REQUEST', challenge: 'none', outcome: 'denied' },
  too_many_headers: {
    code: 'HEADERS_TOO_LARGE',
    challenge: 'none',
    outcome: 'denied',
    description: 'The request has too many header fields.',
    only: 'gateway',
  },
  not_found: { code: 'NOT_FOUND', challenge: 'none', outcome: 'denied' },
  missing_original_request: { code: 'INVALID_REQUEST', challenge: 'none', outcome: 'denied', only: 'decisions' },
  unknown_endpoint: { code: 'NOT_FOUND', challenge: 'none', outcome: 'denied', only: 'decisions' },
  not_forwarded: {
    code: 'NOT_FOUND',
    challenge: 'none',
    outcome: 'denied',
    description: 'This route is served through an ingress, not by this listener.',
    only: 'gateway',
  },
  method_not_allowed: { code: 'METHOD_NOT_ALLOWED', challenge: 'none', outcome: 'denied' },
  unsupported_upgrade: {
    code: 'INVALID_REQUEST',
    challenge: 'none',
    outcome: 'denied',
    description: 'Only WebSocket upgrades of GET requests are supported.',
    only: 'gateway',
  },
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
      'A parameter that servers read as access_token (ACCESS_TOKEN, access_token[], one after a ";") is not accepted; send the token as access_token or in an Authorization header.',
  },
  multipart_body: {
    code: 'INVALID_REQUEST',
    challenge: 'error',
    outcome: 'denied',
    description:
      'This route takes access tokens from request bodies, so it does not accept multipart/form-data bodies; send a form or JSON body, or the token in an Authorization header to a route that does not read bodies.',
    only: 'gateway',
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
  invalid_body: {
    code: 'INVALID_REQUEST',
    challenge: 'none',
    outcome: 'denied',
    description: 'The request body does not match its Content-Type.',
    only: 'gateway',
  },
  body_too_large: { code: 'BODY_TOO_LARGE', challenge: 'none', outcome: 'denied', only: 'gateway' },
  malformed_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  forged_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  unknown_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  expired_token: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied' },
  dpop_required: { code: 'DPOP_TOKEN_REQUIRED', challenge: 'dpop', outcome: 'denied' },
  dpop_token_as_bearer: {
    code: 'INVALID_TOKEN',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'This access token is DPoP-bound: send it as Authorization: DPoP, with a DPoP proof.',
  },
  dpop_unbound_token: {
    code: 'INVALID_TOKEN',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'This access token is not DPoP-bound: send it as Authorization: Bearer.',
  },
  dpop_proof_missing: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'A request with Authorization: DPoP needs exactly one DPoP header.',
  },
  dpop_proof_invalid: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: `The DPoP proof is not a dpop+jwt with jti, htm and htu, signed with ${DPOP_SIGNING_ALGORITHMS.join(', ')} by the public key in its jwk header.`,
  },
  dpop_proof_stale: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'The DPoP proof was made too long ago or in the future (iat); make a new one.',
  },
  dpop_proof_mismatch: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'The DPoP proof is for another method or URL (htm, htu).',
  },
  dpop_ath_mismatch: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'The DPoP proof is for another access token (ath).',
  },
  dpop_key_mismatch: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'The DPoP proof is signed by another key than the one the access token is bound to.',
  },
  dpop_proof_replayed: {
    code: 'INVALID_DPOP_PROOF',
    challenge: 'dpop',
    outcome: 'denied',
    description: 'The DPoP proof was used before (jti); make a new one for each request.',
  },
  store_unavailable: { code: 'STORE_UNAVAILABLE', challenge: 'none', outcome: 'denied' },
  foreign_origin: {
    code: 'FOREIGN_CALLER',
    challenge: 'none',
    outcome: 'denied',
    description: "This route does not answer pages of this request's origin (Origin).",
    only: 'gateway',
  },
  foreign_host: {
    code: 'FOREIGN_CALLER',
    challenge: 'none',
    outcome: 'denied',
    description: 'This route does not answer requests for this host (Host).',
    only: 'gateway',
  },
  wrong_audience: { code: 'INVALID_TOKEN', challenge: 'error', outcome: 'denied', description: 'The access token was not issued for this resource.' },
  rate_limited: { code: 'RATE_LIMITED', challenge: 'none', outcome: 'denied' },
  quota_exceeded: { code: 'QUOTA_EXCEEDED', challenge: 'none', outcome: 'denied' },
  wrong_token_kind: { code: 'INSUFFICIENT_SCOPE', challenge: 'error', outcome: 'denied' },
  insufficient_scope: { code: 'INSUFFICIENT_SCOPE', challenge: 'error', outcome: 'denied' },
  identity_too_large: { code: 'INTERNAL', challenge: 'none', outcome: 'failed' },
  upstream_unreachable: { code: 'UPSTREAM_UNAVAILABLE', challenge: 'none', outcome: 'failed', only: 'gateway' },
  upstream_timeout: { code: 'UPSTREAM_TIMEOUT', challenge: 'none', outcome: 'failed', only: 'gateway' },
} as const satisfies Record<string, DenialSpec>;

export type DenialReason = keyof typeof DENIALS;
/** Reasons decided before a route is known; every other reason belongs to a route. */
const UNROUTED = ['invalid_path', 'too_many_headers', 'not_found', 'missing_original_request', 'unknown_endpoint'] as const satisfies readonly DenialReason[];
const UNROUTED_REASONS: ReadonlySet<DenialReason> = new Set(UNROUTED);
type UnroutedReason = (typeof UNROUTED)[number];
export type RouteDenialReason = Exclude<DenialReason, UnroutedReason>;

/**
 * A denial compiled at start: the whole response (status, headers, JSON body, rendered once by
 * the one error renderer) and the metric children each listener counts it with, so refusing
 * builds no error, header or label per request.
 */
export interface Denial {
  readonly reason: DenialReason;
  readonly route: string;
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** The gateway's: tokengate_gateway_requests_total and its duration. */
  readonly count: CounterSlot;
  readonly duration: HistogramSlot;
  /** The decision listener's: tokengate_decisions_total and its duration. */
  readonly decisionCount: CounterSlot;
  readonly decisionDuration: HistogramSlot;
  /** The gateway's request counters and access log of the route. */
  readonly requests: RouteRequests;
}

/** Where an answer a listener never gives (or a listener that is off) is "counted": in no registry. */
export const UNCOUNTED = { count: new CounterSlot(), duration: new HistogramSlot([]) } as const;

/** Which listeners count denials: the gateway always, the decision listener when it is on. */
export interface DenialMetrics {
  readonly metrics: Metrics;
  readonly decisions: boolean;
}

export interface UnroutedDenials {
  readonly notFound: Denial;
  readonly tooManyHeaders: Denial;
  readonly invalidPath: ReadonlyMap<PathRefusal, Denial>;
}

/** The denials of requests that matched no route; `requests` counts them under the route label `(none)`. */
export function compileUnroutedDenials(counted: DenialMetrics, requests: RouteRequests): UnroutedDenials {
  const invalidPath = new Map<PathRefusal, Denial>();
  for (const refusal of Object.values(PATH_REFUSALS)) {
    invalidPath.set(refusal, compileDenial('invalid_path', { description: refusal.description }, counted, requests));
  }
  return {
    notFound: compileDenial('not_found', {}, counted, requests),
    tooManyHeaders: compileDenial('too_many_headers', { headers: { connection: 'close' } }, counted, requests),
    invalidPath,
  };
}

/** An answer of the decision listener alone, before any route is known (the ingress's check request is not what it reads). */
export function compileDecisionListenerDenial(
  reason: 'missing_original_request' | 'unknown_endpoint',
  description: string | undefined,
  metrics: Metrics,
  requests: RouteRequests,
): Denial {
  return compileDenial(reason, { description }, { metrics, decisions: true }, requests);
}

/**
 * Every denial of one route, with its label, its Allow header and what its challenges name: the
 * route's scopes, and for a route of a resource, where that resource's metadata is.
 */
export function compileRouteDenials(
  route: RouteConfig,
  realm: string,
  counted: DenialMetrics,
  requests: RouteRequests,
  resourceMetadata: string | null,
): Readonly<Record<RouteDenialReason, Denial>> {
  const denials = {} as Record<RouteDenialReason, Denial>;
  for (const reason of Object.keys(DENIALS) as DenialReason[]) {
    if (UNROUTED_REASONS.has(reason)) continue;
    const spec: DenialSpec = DENIALS[reason];
    const description = reason === 'wrong_token_kind' ? `This route requires ${route.token === 'user' ? 'a user' : 'an application'} token.` : spec.description;
    const failure = { error: ERRORS[spec.code].error, description: description ?? ERRORS[spec.code].description };
    const headers: Record<string, string> = {};
    const challenge = challengeOf(spec, route, realm, failure, resourceMetadata);
    if (challenge !== undefined) headers['www-authenticate'] = challenge;
    if (reason === 'method_not_allowed') headers.allow = route.methods.join(', ');
    // The client may not drain a refused body: close the connection instead of reading it.
    if (reason === 'body_too_large') headers.connection = 'close';
    denials[reason as RouteDenialReason] = compileDenial(reason, { description, headers }, counted, requests);
  }
  return denials;
}

/**
 * The challenge a route's refusal carries. A route that requires DPoP answers with the DPoP
 * scheme alone (RFC 9449 section 7.1). On the others, which take both schemes, a request without
 * a token learns of both: the bare Bearer challenge first, as clients have always read it, then
 * the DPoP one with its `algs`; a refusal of a Bearer credential keeps its Bearer challenge, and
 * a refusal of DPoP itself names the DPoP scheme, its error and `algs`, then Bearer beside it.
 * Every challenge of a route of a resource names its metadata (RFC 9728 section 5.1).
 */
function challengeOf(
  spec: DenialSpec,
  route: RouteConfig,
  realm: string,
  failure: { error: string; description: string },
  resourceMetadata: string | null,
): string | undefined {
  const dpopOnly = route.dpop === 'required';
  switch (spec.challenge) {
    case 'none':
      return undefined;
    case 'bare': {
      const dpop = dpopChallenge(realm, DPOP_SIGNING_ALGORITHMS, undefined, [], resourceMetadata);
      return dpopOnly ? dpop : `${bearerChallenge(realm, undefined, [], resourceMetadata)}, ${dpop}`;
    }
    case 'error': {
      const scopes = spec.code === 'INSUFFICIENT_SCOPE' ? route.scopes : [];
      return dpopOnly
        ? dpopChallenge(realm, DPOP_SIGNING_ALGORITHMS, failure, scopes, resourceMetadata)
        : bearerChallenge(realm, failure, scopes, resourceMetadata);
    }
    case 'dpop': {
      const dpop = dpopChallenge(realm, DPOP_SIGNING_ALGORITHMS, failure, [], resourceMetadata);
      return dpopOnly ? dpop : `${dpop}, ${bearerChallenge(realm, undefined, [], resourceMetadata)}`;
    }
  }
}

function compileDenial(
  reason: DenialReason,
  options: { description?: string | undefined; headers?: Record<string, string> },
  { metrics, decisions }: DenialMetrics,
  requests: RouteRequests,
): Denial {
  const label = requests.route;
  const spec: DenialSpec = DENIALS[reason];
  const rendered = renderError(new TokengateError(spec.code, { description: options.description ?? spec.description, headers: options.headers }));
  const byGateway = spec.only !== 'decisions';
  const byDecisions = decisions && spec.only !== 'gateway';
  return {
    reason,
    route: label,
    ...rendered,
    count: byGateway ? metrics.gatewayRequests.labels(label, spec.outcome, reason) : UNCOUNTED.count,
    duration: byGateway ? metrics.gatewayDuration.labels(label) : UNCOUNTED.duration,
    decisionCount: byDecisions ? metrics.decisions.labels(label, spec.outcome, reason) : UNCOUNTED.count,
    decisionDuration: byDecisions ? metrics.decisionDuration.labels(label) : UNCOUNTED.duration,
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
  denial.duration.observe(reply.elapsedTime / 1000, request.trace);
  denial.requests.completed(request, reply, denial.status, denial.reason, null, error);
}

/** A 429 of a rate limit policy: built per refusal around the route's compiled one, with its own Retry-After. */
export function isRateLimitRefusal(denial: Denial): boolean {
  return denial.reason === 'rate_limited' || denial.reason === 'quota_exceeded';
}

/** An answer only a misconfigured ingress causes (a check request without the original request's headers, an unknown endpoint). */
export function isIngressMistake(denial: Denial): boolean {
  const spec: DenialSpec = DENIALS[denial.reason];
  return spec.only === 'decisions';
}
