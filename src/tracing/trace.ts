import type { IncomingHttpHeaders } from 'node:http';

/**
 * OpenTelemetry traces: one server span per request on the public and decision listeners,
 * child spans where a request waits, the upstream call as a client span whose context the
 * upstream receives (docs/tracing.md).
 *
 * Turned off, none of OpenTelemetry is loaded: the SDK comes in by a dynamic import when tracing
 * starts, and the request path holds `null` where the tracing would be, one comparison per
 * request. No global context manager is installed: a request's trace travels on the request
 * (`traceOf`) and as an argument, so nothing else in the process pays for it.
 */
export interface Tracing {
  /**
   * Starts the server span of one request, continuing the trace context of its `traceparent` and
   * `tracestate` (the sampling decision is taken here, once).
   */
  startRequest(listener: 'public' | 'decisions', method: string, headers: IncomingHttpHeaders): RequestTrace;
  /**
   * A span of work no request started (an event a poller received): a trace of its own,
   * sampled as a request without a caller is; null when not recorded.
   */
  startSpan(name: string): ChildSpan | null;
  /** Exports what is queued (within the export timeout) and stops. */
  shutdown(): Promise<void>;
}

/** Attribute values the request path sets: never a credential. */
export type AttributeValue = string | number | boolean;

/**
 * One request's trace. An unsampled request gets one whose methods do nothing, so the request
 * path calls them without asking; it still has ids for the access log when the caller sent some.
 */
export interface RequestTrace {
  readonly recording: boolean;
  /** Hex ids of the server span (empty when the request is not traced). */
  readonly traceId: string;
  readonly spanId: string;
  set(key: string, value: AttributeValue): void;
  /** A span for one step the request waits for (a store read, a lease); null when not recording. */
  child(name: string): ChildSpan | null;
  /**
   * The upstream call as a client span; null when not recording. Its `traceparent` and
   * `tracestate` replace the client's in `headers` (a flat name, value list).
   */
  upstream(method: string, url: URL, headers: string[]): ChildSpan | null;
  /**
   * Adds the server span's `traceparent` (and `tracestate`) to a decision's answer headers, for
   * an ingress that copies them onto the request it forwards; nothing when not recording.
   */
  answerWith(headers: string[]): void;
  /**
   * The request is answered: its status, its route (a gateway route's prefix or an endpoint's
   * pattern: `http.route` and the span's name), why tokengate refused it, the token it carried
   * (its kind and client id, never its value), an upstream failure's code.
   */
  end(status: number, route: string, reason?: string, token?: TracedToken | null, error?: string): void;
}

/** What a span says of a request's token. */
export interface TracedToken {
  readonly kind: string;
  readonly clientId: string;
}

export interface ChildSpan {
  set(key: string, value: AttributeValue): void;
  /** Ends the span; `failure`: why the step failed (a code, never a value the client sent). */
  end(failure?: string, status?: number): void;
}

/** Where the spans the export queue is done with are counted: accepted by the collector, or dropped and why. */
export interface SpanCounts {
  readonly exported: { inc(count: number): void };
  readonly dropped: { inc(labels: { reason: 'queue_full' | 'export_failed' }, count: number): void };
}
