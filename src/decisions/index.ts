import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TokengateContext } from '../context.js';
import { renderError, TokengateError } from '../errors.js';
import { check, isDenial, locate, type Checked } from '../gateway/check.js';
import { isIngressMistake, isRateLimitRefusal, type Denial } from '../gateway/denials.js';
import type { GatewayRoutes } from '../gateway/index.js';
import type { GatewayRoute } from '../gateway/route-table.js';
import { nextRequestId } from '../observability/request-id.js';
import { RouteRequests, UNROUTED } from '../observability/requests.js';
import type { RequestTrace } from '../tracing/index.js';
import { originalRequestReader } from './original-request.js';
import { tokenDigest } from '../token/token-value.js';
import { CACHE_SECONDS_HEADER, reusableSeconds, TOKEN_DIGEST_HEADER } from './reuse.js';

/** The answer body in a header: nginx drops the body of an auth answer, and its error_page can send this instead. */
const BODY_HEADER = 'x-tokengate-error-body';
const INTERNAL = renderError(new TokengateError('INTERNAL'));

/**
 * The decision listener's answers: the gateway's check without the forwarding, for an ingress
 * that asks before it proxies (nginx auth_request, Envoy ext_authz, Traefik ForwardAuth, Caddy
 * forward_auth). Each check request names an original request (./original-request.ts), which
 * goes through the same steps as a gateway request (../gateway/check.ts), on the same route
 * table, and is answered 200 with the identity headers, for the ingress to copy onto the request it
 * forwards (and, on a route an ingress may cache, how long it may reuse them: ./reuse.ts), or
 * with the gateway's own error answer, for the ingress to pass to the client.
 *
 * The listener around it (its server and guard) is src/listeners/decisions.ts.
 */
export type DecisionHandler = (request: IncomingMessage, response: ServerResponse) => void;

export function createDecisionHandler(context: TokengateContext, gateway: GatewayRoutes): DecisionHandler {
  const { config } = context;
  const { rules } = gateway;
  const log = context.log.child({ listener: 'decisions' });
  const requestIdHeader = config.gateway.requestIdHeader.toLowerCase();
  const userIdHeader = config.gateway.identityHeaders.userId.toLowerCase();
  const actorClientIdHeader = config.gateway.identityHeaders.actorClientId.toLowerCase();
  const identityHeader = config.signedIdentity.header.toLowerCase();
  const requestsOf = requestsByRoute(context);
  const readOriginalRequest = originalRequestReader(context.metrics, requestsOf(UNROUTED));
  const refusalHeaders = keptRefusalHeaders();

  const tracing = context.tracing;

  function decide(request: IncomingMessage, response: ServerResponse): void {
    const started = performance.now();
    // The server span continues the trace context the ingress passed on (Envoy, Traefik, Caddy send the client's).
    const trace = tracing === null ? null : tracing.startRequest('decisions', request.method!, request.headers);
    const sentId = request.headers[requestIdHeader];
    const requestId = typeof sentId === 'string' && sentId !== '' ? sentId : nextRequestId();
    const original = readOriginalRequest(request);
    if (isDenial(original)) return refuse(request, response, original, false, requestId, started, trace);
    // 0. where. The header count is not checked: the ingress builds both the check request and
    // the request the upstream receives, so the check request's fields say nothing about the latter.
    const located = locate(gateway.table, original.method, original.target, 0, 0);
    const withBody = original.endpoint === 'authRequest';
    if (isDenial(located)) return refuse(request, response, located, withBody, requestId, started, trace);
    // The checks (../gateway/check.ts), with the route as an ingress applies
    // it (no body, no query token unless allowed; the original request is the DPoP proof's subject).
    const route = located.route.throughIngress;
    const checked = check(context, { route, path: located.path, query: located.query }, original, null, 0, original, trace);
    if (checked instanceof Promise) {
      checked.then(
        (outcome) => answer(request, response, route, outcome, withBody, requestId, started, trace),
        (error: unknown) => fail(response, error, requestId, trace),
      );
    } else {
      answer(request, response, route, checked, withBody, requestId, started, trace);
    }
  }

  function answer(
    request: IncomingMessage,
    response: ServerResponse,
    route: GatewayRoute<unknown>,
    checked: Checked | Denial,
    withBody: boolean,
    requestId: string,
    started: number,
    trace: RequestTrace | null,
  ): void {
    if (isDenial(checked)) return refuse(request, response, checked, withBody, requestId, started, trace);
    const { token } = checked;
    const headers = rules.identity(token, requestId);
    // Every identity header, empty when it does not apply: an ingress that copies only the
    // headers present in the answer (Envoy) would otherwise leave a client's own value in place.
    if (token.userId === null) headers.push(userIdHeader, '');
    if (token.act === undefined) headers.push(actorClientIdHeader, '');
    if (checked.assertion !== null) {
      // `instead`: the identity headers go out empty, for the same reason.
      if (route.signedIdentity?.instead === true)
        for (let index = 1; index < headers.length; index += 2) if (headers[index - 1] !== requestIdHeader) headers[index] = '';
      headers.push(identityHeader, checked.assertion);
    }
    checked.admission?.appendFields(headers);
    const reusable = reusableSeconds(route, checked, request.headers.dpop);
    if (reusable > 0) headers.push(CACHE_SECONDS_HEADER, String(reusable), TOKEN_DIGEST_HEADER, tokenDigest(checked.credential.token));
    // The check's span, for an ingress that puts it on the request it forwards (the resource service's spans then hang under it).
    trace?.answerWith(headers);
    headers.push('cache-control', 'no-store', 'content-length', '0');
    response.writeHead(200, headers);
    response.end();
    const elapsedMs = performance.now() - started;
    route.decisionAllowed.inc();
    route.decisionDuration.observe(elapsedMs / 1000, trace);
    requestsOf(route.prefix).record(request.method!, 200, elapsedMs, log, undefined, token, undefined, requestId, trace ?? undefined);
  }

  /** `withBody`: the answer goes to nginx, which drops its body; the body goes in a header too. */
  function refuse(
    request: IncomingMessage,
    response: ServerResponse,
    denial: Denial,
    withBody: boolean,
    requestId: string,
    started: number,
    trace: RequestTrace | null,
  ): void {
    const elapsedMs = performance.now() - started;
    denial.decisionCount.inc();
    denial.decisionDuration.observe(elapsedMs / 1000, trace);
    requestsOf(denial.route).record(request.method!, denial.status, elapsedMs, log, denial.reason, undefined, undefined, requestId, trace ?? undefined);
    // Only a misconfigured ingress asks this way: the operator must hear of it, whatever logging.requests says.
    if (isIngressMistake(denial)) log.warn({ reason: denial.reason, reqId: requestId }, 'the ingress did not ask as the decision listener expects');
    const headers = refusalHeaders(denial, withBody);
    response.writeHead(denial.status, [...headers, requestIdHeader, requestId]);
    response.end(denial.body);
  }

  // A store error is a denial (503); anything else is a bug, answered as the public listener's error handler answers it.
  function fail(response: ServerResponse, error: unknown, requestId: string, trace: RequestTrace | null): void {
    log.error({ err: error, reqId: requestId }, 'unhandled error');
    trace?.end(INTERNAL.status, UNROUTED, undefined, null, 'internal');
    response.writeHead(INTERNAL.status, { ...INTERNAL.headers, [requestIdHeader]: requestId });
    response.end(INTERNAL.body);
  }

  return decide;
}

/** A denial's headers as the decision listener sends them (a flat list; the request id is added per answer). */
function headersOf(denial: Denial, withBody: boolean): string[] {
  const headers = Object.entries(denial.headers).flat();
  if (withBody) headers.push(BODY_HEADER, denial.body);
  headers.push('content-length', String(Buffer.byteLength(denial.body)));
  return headers;
}

/** The listener's own request counters and access log lines, by route label (a bounded set: the routes and `(none)`). */
function requestsByRoute(context: TokengateContext): (label: string) => RouteRequests {
  const routeRequests = new Map<string, RouteRequests>();
  return (label) => {
    let requests = routeRequests.get(label);
    if (requests === undefined) {
      requests = new RouteRequests(context.metrics.requests, context.requestLog, 'decisions', label);
      routeRequests.set(label, requests);
    }
    return requests;
  };
}

/** Each denial's response headers as the listener sends them, built on first use: a bounded set (one per compiled denial). */
function keptRefusalHeaders(): (denial: Denial, withBody: boolean) => string[] {
  const kept = { withBody: new Map<Denial, string[]>(), plain: new Map<Denial, string[]>() };
  return (denial, withBody) => {
    const cache = withBody ? kept.withBody : kept.plain;
    let headers = cache.get(denial);
    if (headers === undefined) {
      headers = headersOf(denial, withBody);
      // A rate limit refusal is built per request (its Retry-After): not kept.
      if (!isRateLimitRefusal(denial)) cache.set(denial, headers);
    }
    return headers;
  };
}
