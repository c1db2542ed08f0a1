import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { failureOf } from '../errors.js';
import type { Metrics } from './metrics.js';
import type { RequestTrace, Tracing } from '../tracing/index.js';
import type { CounterSlot, HistogramSlot, SlotCounter, SlotHistogram } from './slot-metrics.js';

/**
 * What every completed request leaves behind: one count in tokengate_http_requests_total (by
 * listener, route, method and status class) and, when `logging.requests` takes it, one access log
 * line. Counting is a few array reads and one addition; a line that is not written costs one
 * comparison and builds nothing.
 */

/** What the access log says of the token a request carried. */
export interface TokenIdentity {
  readonly kind: string;
  readonly clientId: string;
}

/** Route label of gateway requests that matched no route. */
export const UNROUTED = '(none)';

/** Methods counted under their own name (those tokengate routes); any other is `other`. */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'other'] as const;
const METHOD_INDEX = new Map<string, number>(METHODS.map((method, index) => [method, index]));
const OTHER_METHOD = METHODS.length - 1;
/** Status classes 0xx to 9xx: node writes any status from 100 to 999, so the first digit bounds the label. */
const STATUS_CLASSES = 10;

/** nginx's convention for a request whose client closed the connection before the response head was sent. */
export const CLIENT_CLOSED = 499;

function statusClass(status: number): number {
  const index = (status / 100) | 0;
  return index >= 0 && index < STATUS_CLASSES ? index : 0;
}

/** Which completed requests get an access log line (`logging.requests`). */
export type RequestLogging = 'all' | 'errors' | 'none';

/** The access log's setting, shared by every route and changed in place on reload. */
export class RequestLog {
  /** Requests answered with this status or above get a line; a failure after the answer began counts as 500. */
  minStatus = 500;

  constructor(mode: RequestLogging) {
    this.configure(mode);
  }

  configure(mode: RequestLogging): void {
    this.minStatus = mode === 'all' ? 0 : mode === 'errors' ? 500 : Number.POSITIVE_INFINITY;
  }
}

/** The fields of an access log line beside the logger's own (`listener`, `reqId`, time, level). */
export interface AccessLine {
  /** Set by a listener whose requests have no logger of their own (the decision listener). */
  reqId?: string;
  route: string;
  method: string;
  status: number;
  durationMs: number;
  reason?: string;
  tokenKind?: string;
  clientId?: string;
  error?: string;
  /** The request's trace and server span, when it has one (W3C hex ids, as a trace viewer searches them). */
  trace_id?: string;
  span_id?: string;
}

/** The requests of one route on one listener: their counters by method and status class, each resolved on first use. */
export class RouteRequests {
  private readonly counts: Array<CounterSlot | undefined> = new Array<CounterSlot | undefined>(METHODS.length * STATUS_CLASSES).fill(undefined);

  constructor(
    private readonly counter: SlotCounter,
    private readonly log: RequestLog,
    private readonly listener: string,
    readonly route: string,
  ) {}

  /**
   * One request done, answered with `status`. `reason`: why tokengate refused it; `token`: the
   * verified token it carried; `error`: the code of an upstream failure (connection refused,
   * timeout, a body cut short), which the access log takes like a 5xx whatever status was sent.
   */
  completed(request: FastifyRequest, reply: FastifyReply, status: number, reason?: string, token?: TokenIdentity | null, error?: string): void {
    this.record(request.raw.method!, status, reply.elapsedTime, request.log, reason, token, error, undefined, request.trace ?? undefined);
  }

  /**
   * The same, for a listener without fastify's request and reply (the decision listener): `log`
   * is the listener's logger and `requestId` the line's `reqId` (no logger object per request:
   * most requests log nothing). Without a `requestId`, `log` is the request's own logger.
   * `trace`: the request's trace, ended here; its ids go on the line.
   */
  record(
    method: string,
    status: number,
    durationMs: number,
    log: RequestLogger,
    reason?: string,
    token?: TokenIdentity | null,
    error?: string,
    requestId?: string,
    trace?: RequestTrace,
  ): void {
    trace?.end(status, this.route, reason, token, error);
    const methodIndex = METHOD_INDEX.get(method) ?? OTHER_METHOD;
    const classIndex = statusClass(status);
    const index = methodIndex * STATUS_CLASSES + classIndex;
    (this.counts[index] ??= this.counter.labels(this.listener, this.route, METHODS[methodIndex]!, `${classIndex}xx`)).inc();
    if ((error === undefined ? status : 500) < this.log.minStatus) return;
    const rounded = Math.round(durationMs * 1000) / 1000;
    const line: AccessLine =
      requestId === undefined
        ? { route: this.route, method, status, durationMs: rounded }
        : { reqId: requestId, route: this.route, method, status, durationMs: rounded };
    if (reason !== undefined) line.reason = reason;
    if (token !== undefined && token !== null) {
      line.tokenKind = token.kind;
      line.clientId = token.clientId;
    }
    if (error !== undefined) line.error = error;
    if (trace !== undefined && trace.traceId !== '') {
      line.trace_id = trace.traceId;
      if (trace.spanId !== '') line.span_id = trace.spanId;
    }
    if (status >= 500 || error !== undefined) log.warn(line, 'request completed');
    else log.info(line, 'request completed');
  }
}

/** What an access log line is written through: a request's logger. */
export interface RequestLogger {
  warn(fields: object, message: string): void;
  info(fields: object, message: string): void;
}

/** Upstream response times of one route by the status class of the answer, each slot resolved on first use. */
export class UpstreamDurations {
  private readonly slots: Array<HistogramSlot | undefined> = new Array<HistogramSlot | undefined>(STATUS_CLASSES).fill(undefined);

  constructor(
    private readonly histogram: SlotHistogram,
    private readonly route: string,
  ) {}

  observe(status: number, seconds: number): void {
    const classIndex = statusClass(status);
    (this.slots[classIndex] ??= this.histogram.labels(this.route, `${classIndex}xx`)).observe(seconds);
  }
}

/**
 * Counts and logs every request of one fastify scope (the issuer's endpoints and pages, the admin
 * API) when its response completes. The route is the endpoint's path pattern
 * (`/admin/applications/:client_id`), one of a fixed set.
 */
export function observeRequests(scope: FastifyInstance, listener: string, metrics: Metrics, log: RequestLog, tracing: Tracing | null = null): void {
  const routes = new Map<string, RouteRequests>();
  if (tracing !== null) {
    scope.addHook('onRequest', (request, _reply, done) => {
      request.trace = tracing.startRequest('public', request.raw.method!, request.raw.headers);
      done();
    });
  }
  scope.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? UNROUTED;
    let requests = routes.get(route);
    if (requests === undefined) {
      requests = new RouteRequests(metrics.requests, log, listener, route);
      routes.set(route, requests);
    }
    requests.completed(request, reply, reply.statusCode, failureOf(request)?.code.toLowerCase());
    done();
  });
}
