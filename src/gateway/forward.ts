import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import type { RouteConfig } from '../config/schema.js';
import type { Metrics } from '../observability/metrics.js';
import { CLIENT_CLOSED, UpstreamDurations, type RouteRequests } from '../observability/requests.js';
import type { CounterSlot, HistogramSlot } from '../observability/slot-metrics.js';
import type { Bucket } from '../ratelimit/bucket.js';
import type { VerifiedToken } from '../store/verified-token.js';
import { countDenial, type Denial } from './denials.js';
import { relayEarlyHints } from './early-hints.js';
import type { Credential } from './extract-credential.js';
import type { TargetFactory } from './route-table.js';
import type { HeaderRules } from './upstream-headers.js';
import { Pool } from './upstream-pool.js';
import type { ChildSpan } from '../tracing/index.js';

/** One upstream of one route, compiled at start; requests only read it. */
export interface ForwardTarget {
  /** `http://host:port`: the request path is appended as is. */
  readonly url: URL;
  /** The keep-alive connections to this origin, shared by every route that forwards there; closed once no route does. */
  readonly pool: Pool;
  /** How long the upstream has to send its response head, and then each part of its body. */
  readonly timeoutMs: number;
  /** For a request that accepts an event stream: how long its body may go without a chunk (its head still comes within timeoutMs). */
  readonly streamIdleTimeoutMs: number;
  readonly forwarded: CounterSlot;
  readonly duration: HistogramSlot;
  readonly upstreamDuration: UpstreamDurations;
  readonly requests: RouteRequests;
  readonly unreachable: Denial;
  readonly timedOut: Denial;
}

export interface Forwarder {
  readonly createTarget: TargetFactory<ForwardTarget>;
  /** Sends the checked request to the target and streams the answer back; the reply is the forwarder's from here on. */
  forward(
    request: FastifyRequest,
    reply: FastifyReply,
    target: ForwardTarget,
    path: string,
    credential: Credential,
    token: VerifiedToken,
    admission: Bucket | null,
    /** The signed identity for the upstream, or null; `identityHeaders`: false where it goes instead of them. */
    assertion: string | null,
    identityHeaders: boolean,
  ): void;
  /**
   * After a reload: closes the pools of the origins `routes` no longer forward to, each once its
   * requests are done. A request that matched an old route and was still being checked meanwhile
   * is forwarded on a connection of its own.
   */
  retainOnly(routes: readonly RouteConfig[]): void;
  /** Closes every upstream connection once its request is done. */
  close(): Promise<void>;
}

/**
 * Upstream connections per origin. A sidecar's upstream is one service on the same host, so this
 * bounds the sockets the gateway opens to it; requests beyond it wait for a free connection.
 */
const CONNECTIONS_PER_UPSTREAM = 128;

/**
 * The forwarding stage, on undici's dispatch API: one keep-alive pool per upstream origin, and a
 * dispatch handler that writes the upstream's status, headers and body straight to the client's
 * response (fastify's reply is handed over with reply.hijack()). This costs about half the CPU of
 * a proxy plugin's request and stream machinery, which is most of what a cached request costs.
 */
export function createForwarder(rules: HeaderRules, requestIdHeader: string, metrics: Metrics): Forwarder {
  const { poolFor, retire, retainOnly, close } = upstreamPools();

  const createTarget: TargetFactory<ForwardTarget> = ({ route, label, upstream, denials, requests }) => {
    const url = new URL(upstream);
    return {
      url,
      pool: poolFor(url),
      timeoutMs: route.timeoutMs,
      streamIdleTimeoutMs: route.streamIdleTimeoutMs,
      forwarded: metrics.gatewayRequests.labels(label, 'forwarded', 'ok'),
      duration: metrics.gatewayDuration.labels(label),
      upstreamDuration: new UpstreamDurations(metrics.upstreamDuration, label),
      requests,
      unreachable: denials.upstream_unreachable,
      timedOut: denials.upstream_timeout,
    };
  };

  function forward(
    request: FastifyRequest,
    reply: FastifyReply,
    target: ForwardTarget,
    path: string,
    credential: Credential,
    token: VerifiedToken,
    admission: Bucket | null,
    assertion: string | null,
    identityHeaders: boolean,
  ): void {
    reply.hijack();
    const raw = request.raw;
    const response = reply.raw;
    const method = raw.method!;
    // A GET or HEAD body is never forwarded (a request hidden in it goes nowhere); a body the
    // gateway read goes as re-encoded; any other streams through with the client's framing.
    let body: Buffer | IncomingMessage | null = null;
    let bodyLength: number | null | undefined = null;
    if (credential.body !== undefined) {
      body = credential.body;
      bodyLength = credential.body.length;
    } else if (method !== 'GET' && method !== 'HEAD' && hasBody(raw)) {
      body = raw;
      bodyLength = undefined;
      // The client held its body back until the check passed (Expect: 100-continue): now it may send it.
      if (isAwaitingContinue(raw)) response.writeContinue();
    }
    const headers = rules.request(raw, token, request.id, bodyLength, assertion, identityHeaders);
    // A recorded request's upstream call is its client span, whose context the upstream receives; any other forwards the client's as it came.
    const upstreamSpan = request.trace?.upstream(method, target.url, headers) ?? null;
    const handler = new ForwardHandler(request, reply, target, token, admission, rules, requestIdHeader, upstreamSpan);
    // `on`, not `once`: the response is used once, and a once wrapper costs an allocation and a
    // removal. One listener function for every response, the handler kept on it: no closure per request.
    (response as HandledResponse)[kForwardHandler] = handler;
    response.on('close', onResponseClose);
    const options: Dispatcher.DispatchOptions = {
      path: credential.query === '' ? path : `${path}?${credential.query}`,
      method,
      headers,
      body,
      headersTimeout: target.timeoutMs,
      // An event stream (SSE, an MCP server's stream) is quiet until it has something to say.
      bodyTimeout: acceptsEventStream(raw) ? target.streamIdleTimeoutMs : target.timeoutMs,
    };
    if (!target.pool.closed) {
      target.pool.dispatch(options, handler);
    } else {
      // The route was matched before a reload retired its upstream's pool: a pool of its own, closed once this request is done.
      const own = new Pool(target.url.origin, { connections: 1 });
      own.dispatch(options, handler);
      retire(own);
    }
  }

  return {
    createTarget,
    forward,
    retainOnly,
    close,
  };
}

/** One keep-alive pool per upstream origin, and the pools retired by a reload, closing once their requests are done. */
function upstreamPools(): Pick<Forwarder, 'retainOnly' | 'close'> & { poolFor(url: URL): Pool; retire(pool: Pool): void } {
  const pools = new Map<string, Pool>();
  const closing = new Set<Promise<void>>();
  const retire = (pool: Pool): void => {
    const closed = pool.close().finally(() => closing.delete(closed));
    closing.add(closed);
  };
  return {
    retire,
    poolFor(url) {
      let pool = pools.get(url.origin);
      if (pool === undefined) {
        pool = new Pool(url.origin, { connections: CONNECTIONS_PER_UPSTREAM });
        pools.set(url.origin, pool);
      }
      return pool;
    },
    retainOnly(routes) {
      const origins = upstreamOrigins(routes);
      for (const [origin, pool] of pools) {
        if (origins.has(origin)) continue;
        pools.delete(origin);
        retire(pool);
      }
    },
    async close() {
      await Promise.all([...[...pools.values()].map((pool) => pool.close()), ...closing]);
    },
  };
}

function upstreamOrigins(routes: readonly RouteConfig[]): Set<string> {
  const origins = new Set<string>();
  for (const route of routes) {
    for (const upstream of [route.upstream, route.upstreams?.user, route.upstreams?.application]) {
      if (upstream !== undefined) origins.add(new URL(upstream).origin);
    }
  }
  return origins;
}

function acceptsEventStream(request: IncomingMessage): boolean {
  const accept = request.headers.accept;
  return accept !== undefined && accept.includes('text/event-stream');
}

function hasBody(request: IncomingMessage): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

const kForwardHandler = Symbol('tokengate.forwardHandler');
interface HandledResponse extends ServerResponse {
  [kForwardHandler]: ForwardHandler;
}

function onResponseClose(this: HandledResponse): void {
  this[kForwardHandler].clientClosed();
}

const kAwaitingContinue = Symbol('tokengate.awaitingContinue');
interface ContinuableRequest extends IncomingMessage {
  [kAwaitingContinue]?: true;
}

/** Marks a request whose client waits for `100 Continue` before sending its body: only a checked request gets it. */
export function awaitContinue(request: IncomingMessage): void {
  (request as ContinuableRequest)[kAwaitingContinue] = true;
}

export function isAwaitingContinue(request: IncomingMessage): boolean {
  return (request as ContinuableRequest)[kAwaitingContinue] === true;
}

/**
 * One forwarded request, as undici's dispatch handler (its callback interface, the one undici
 * runs natively). It writes to the client's response as the upstream answers, and honours
 * backpressure both ways: a client that reads slowly pauses the upstream's body (onData returns
 * false until the response drains); the request body is piped by undici at the upstream's pace.
 */
class ForwardHandler implements Dispatcher.DispatchHandler {
  private abort: ((error?: Error) => void) | null = null;
  private resume: (() => void) | null = null;
  private clientGone = false;
  private readonly response: ServerResponse;
  /** The status the upstream answered with, once it has. */
  private status = 0;
  /** The upstream answered with an event stream, which may end at any moment between events. */
  private eventStream = false;
  /** When the request went upstream, on the reply's clock (each clock read costs a little on the request path). */
  private readonly sentAfterMs: number;

  constructor(
    private readonly request: FastifyRequest,
    private readonly reply: FastifyReply,
    private readonly target: ForwardTarget,
    private readonly token: VerifiedToken,
    private readonly admission: Bucket | null,
    private readonly rules: HeaderRules,
    private readonly requestIdHeader: string,
    private readonly upstreamSpan: ChildSpan | null,
  ) {
    this.response = reply.raw;
    this.sentAfterMs = reply.elapsedTime;
  }

  /** The client went away before the answer was complete: the upstream request is cancelled. */
  clientClosed(): void {
    if (this.response.writableFinished) return;
    this.clientGone = true;
    this.abort?.(new ClientGoneError());
  }

  onConnect(abort: (error?: Error) => void): void {
    this.abort = abort;
    if (this.clientGone) abort(new ClientGoneError());
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) {
      if (statusCode === 103) relayEarlyHints(this.request.raw, this.response, rawHeaders);
      return true;
    }
    this.resume = resume;
    this.status = statusCode;
    const elapsedMs = this.reply.elapsedTime;
    this.target.forwarded.inc();
    this.target.duration.observe(elapsedMs / 1000, this.request.trace);
    this.target.upstreamDuration.observe(statusCode, (elapsedMs - this.sentAfterMs) / 1000);
    const headers = this.rules.response(rawHeaders, this.request.id);
    // An admitted request of a metered route: the fields a client paces itself by (docs/rate-limits.md).
    this.admission?.appendFields(headers);
    this.response.writeHead(statusCode, headers);
    // Node sends a head with the first chunk of the body. An open-ended body (no length: an event
    // stream, a chunked stream) may not start for long, and its client waits on the head (an MCP
    // client's standalone stream, an EventSource): it goes now. A body of known length keeps one
    // write for head and body.
    if (this.response.chunkedEncoding) {
      this.response.flushHeaders();
      this.eventStream = isEventStream(headers);
    }
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.response.write(chunk)) return true;
    this.response.once('drain', this.resume!);
    return false;
  }

  onComplete(): void {
    this.upstreamSpan?.end(undefined, this.status);
    this.response.end();
    this.target.requests.completed(this.request, this.reply, this.status, undefined, this.token);
  }

  onError(error: Error & { code?: string }): void {
    this.upstreamSpan?.end(failureCode(error), this.status === 0 ? undefined : this.status);
    const response = this.response;
    const sent = response.headersSent ? response.statusCode : CLIENT_CLOSED;
    if (this.clientGone || response.destroyed || this.request.raw.destroyed) {
      // The client left, or its own body failed: cut what is left (a client still there sees a
      // truncated response, never a second status line).
      response.destroy();
      this.target.requests.completed(this.request, this.reply, sent, undefined, this.token);
      return;
    }
    if (response.headersSent) {
      // An event stream that went quiet past its bound ends as an event stream may end, between
      // events (a client's parser drops an event left incomplete); its client reconnects, with
      // Last-Event-ID where the server gives ids.
      if (this.eventStream && error.code === 'UND_ERR_BODY_TIMEOUT') {
        response.end();
        this.target.requests.completed(this.request, this.reply, sent, undefined, this.token, failureCode(error));
        return;
      }
      // The upstream failed mid-body: nothing true can be said any more, so the connection is cut.
      response.destroy();
      this.target.requests.completed(this.request, this.reply, sent, undefined, this.token, failureCode(error));
      return;
    }
    const denial = error.code === 'UND_ERR_HEADERS_TIMEOUT' ? this.target.timedOut : this.target.unreachable;
    response.writeHead(denial.status, { ...denial.headers, [this.requestIdHeader]: this.request.id });
    response.end(denial.body);
    countDenial(this.request, this.reply, denial, failureCode(error));
  }
}

/** Whether the response headers (name, value, ...) say `Content-Type: text/event-stream`. */
function isEventStream(headers: readonly string[]): boolean {
  for (let index = 0; index < headers.length; index += 2)
    if (headers[index]!.toLowerCase() === 'content-type') return headers[index + 1]!.toLowerCase().startsWith('text/event-stream');
  return false;
}

/** What the access log says of an upstream failure: its code (ECONNREFUSED, UND_ERR_HEADERS_TIMEOUT), never a stack. */
function failureCode(error: Error & { code?: string }): string {
  return error.code ?? error.name;
}

class ClientGoneError extends Error {
  override name = 'ClientGoneError';
  constructor() {
    super('the client closed the connection');
  }
}
