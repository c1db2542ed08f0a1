import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TokengateContext } from '../context.js';
import { rawErrorResponse, renderError, TokengateError } from '../errors.js';
import { check, isDenial, locate, type Checked } from '../gateway/check.js';
import { logDenial, type Denial } from '../gateway/denials.js';
import type { CompiledGateway } from '../gateway/index.js';
import type { GatewayRoute } from '../gateway/route-table.js';
import { originalRequestReader } from './original-request.js';

/**
 * The decision listener: the gateway's check without the forwarding, for an ingress that asks
 * before it proxies (nginx auth_request, Envoy ext_authz, Traefik ForwardAuth, Caddy
 * forward_auth). Each check request names an original request (./original-request.ts), which
 * goes through the same steps as a gateway request, on the same route table:
 *
 *   where (normalize the path, match a route, check the method) -> extract -> verify -> authorize
 *
 * and is answered 200 with the identity headers, for the ingress to copy onto the request it
 * forwards, or with the gateway's own error answer, for the ingress to pass to the client.
 *
 * Plain node:http, not fastify: every request the ingress serves costs one of these, and the
 * answer is a status and a few headers, so nothing of a framework is needed on this path.
 */
export interface DecisionListener {
  readonly server: Server;
  /** Binds decisions.host and decisions.port; resolves with the listener's URL. */
  listen(): Promise<string>;
  /** Stops accepting, lets the checks in flight finish, closes the ingress's idle connections. */
  close(): Promise<void>;
}

/**
 * Longer than the idle timeout of the ingresses' upstream connections (nginx keepalive_timeout
 * 60 s): the ingress, not tokengate, closes an idle connection, so it never reuses one that
 * tokengate is closing at the same moment.
 */
export const DECISION_KEEP_ALIVE_MS = 72_000;
/** During shutdown, how often connections that finished their last check are closed. */
const IDLE_SWEEP_MS = 50;
/** The answer body in a header: nginx drops the body of an auth answer, and its error_page can send this instead. */
const BODY_HEADER = 'x-tokengate-error-body';

export function createDecisionListener(context: TokengateContext, { table, rules }: CompiledGateway): DecisionListener {
  const { config } = context;
  const log = context.log.child({ listener: 'decisions' });
  const requestIdHeader = config.gateway.requestIdHeader.toLowerCase();
  const userIdHeader = config.gateway.identityHeaders.userId.toLowerCase();
  const readOriginalRequest = originalRequestReader(context.metrics);
  const internal = renderError(new TokengateError('INTERNAL'));
  // Each denial's response headers as the listener sends them, built on first use: a bounded set (one per compiled denial).
  const refusalHeaders = { withBody: new Map<Denial, string[]>(), plain: new Map<Denial, string[]>() };

  const server = createServer({ maxHeaderSize: config.server.maxHeaderSize, requestTimeout: config.server.requestTimeoutMs }, decide);
  server.keepAliveTimeout = DECISION_KEEP_ALIVE_MS;
  server.on('clientError', refuseMalformed);

  function decide(request: IncomingMessage, response: ServerResponse): void {
    const started = performance.now();
    const sentId = request.headers[requestIdHeader];
    const requestId = typeof sentId === 'string' && sentId !== '' ? sentId : randomUUID();
    const original = readOriginalRequest(request);
    if (isDenial(original)) return refuse(response, original, false, requestId, started);
    // 0. where. The header count is not checked: the ingress builds both the check request and
    // the request the upstream receives, so the check request's fields say nothing about the latter.
    const located = locate(table, original.method, original.target, 0, 0);
    const withBody = original.endpoint === 'authRequest';
    if (isDenial(located)) return refuse(response, located, withBody, requestId, started);
    // 1-3. extract -> verify -> authorize, with the route as an ingress applies it (no body, no query token unless allowed).
    const route = located.route.throughIngress;
    const checked = check(context, { route, path: located.path, query: located.query }, original, null, 0);
    if (checked instanceof Promise) {
      checked.then(
        (outcome) => answer(response, route, outcome, withBody, requestId, started),
        (error: unknown) => fail(response, error, requestId),
      );
    } else {
      answer(response, route, checked, withBody, requestId, started);
    }
  }

  function answer(
    response: ServerResponse,
    route: GatewayRoute<unknown>,
    checked: Checked | Denial,
    withBody: boolean,
    requestId: string,
    started: number,
  ): void {
    if (isDenial(checked)) return refuse(response, checked, withBody, requestId, started);
    const { token } = checked;
    const headers = rules.identity(token, requestId);
    // Every identity header, empty when it does not apply: an ingress that copies only the
    // headers present in the answer (Envoy) would otherwise leave a client's own value in place.
    if (token.userId === null) headers.push(userIdHeader, '');
    headers.push('content-length', '0');
    response.writeHead(200, headers);
    response.end();
    route.decisionAllowed.inc();
    route.decisionDuration.observe((performance.now() - started) / 1000);
  }

  /** `withBody`: the answer goes to nginx, which drops its body; the body goes in a header too. */
  function refuse(response: ServerResponse, denial: Denial, withBody: boolean, requestId: string, started: number): void {
    denial.decisionCount.inc();
    denial.decisionDuration.observe((performance.now() - started) / 1000);
    logDenial(log, 'decision listener', denial, { reason: denial.reason, route: denial.route, reqId: requestId });
    const cache = withBody ? refusalHeaders.withBody : refusalHeaders.plain;
    let headers = cache.get(denial);
    if (headers === undefined) {
      headers = headersOf(denial, withBody);
      cache.set(denial, headers);
    }
    response.writeHead(denial.status, [...headers, requestIdHeader, requestId]);
    response.end(denial.body);
  }

  // A store error is a denial (503); anything else is a bug, answered as the public listener's error handler answers it.
  function fail(response: ServerResponse, error: unknown, requestId: string): void {
    log.error({ err: error, reqId: requestId }, 'unhandled error');
    response.writeHead(internal.status, { ...internal.headers, [requestIdHeader]: requestId });
    response.end(internal.body);
  }

  return {
    server,
    listen() {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(config.decisions.port, config.decisions.host, () => {
          server.off('error', reject);
          const { address, port, family } = server.address() as AddressInfo;
          resolve(`http://${family === 'IPv6' ? `[${address}]` : address}:${port}`);
        });
      });
    },
    async close() {
      if (!server.listening) return;
      // Keep-alive connections whose check was in flight when close() started become idle later.
      const idleSweep = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS);
      try {
        await new Promise<void>((resolve) => server.close(() => resolve()));
      } finally {
        clearInterval(idleSweep);
      }
    },
  };
}

/** A denial's headers as the decision listener sends them (a flat list; the request id is added per answer). */
function headersOf(denial: Denial, withBody: boolean): string[] {
  const headers = Object.entries(denial.headers).flat();
  if (withBody) headers.push(BODY_HEADER, denial.body);
  headers.push('content-length', String(Buffer.byteLength(denial.body)));
  return headers;
}

/** A check request node's parser refuses (malformed, head too large): the same JSON error, then the connection closes. */
function refuseMalformed(error: Error & { code?: string }, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const failure = new TokengateError(
    error.code === 'HPE_HEADER_OVERFLOW' ? 'HEADERS_TOO_LARGE' : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'REQUEST_TIMEOUT' : 'INVALID_REQUEST',
  );
  if (socket.writable) socket.end(rawErrorResponse(failure));
  socket.destroy();
}
