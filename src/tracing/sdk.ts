import type { IncomingHttpHeaders } from 'node:http';
import {
  createNoopMeter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Counter,
  type Link,
  type Meter,
  type MeterProvider,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import { JsonTraceSerializer, ProtobufTraceSerializer, TraceExporterMetricsHelper } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  RandomIdGenerator,
  SamplingDecision,
  type IdGenerator,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type ReadableSpan,
  type Sampler,
  type SamplingResult,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import type { Logger } from 'pino';
import type { AttributeValue, ChildSpan, RequestTrace, SpanCounts, TracedToken, Tracing } from './trace.js';

/** The route of a request that matched none (the access log's and the metrics' `(none)`). */
const UNROUTED = '(none)';
import type { TracingSettings } from './settings.js';

/**
 * The OpenTelemetry SDK as tokengate runs it, loaded only when tracing is on: a tracer provider
 * of its own (nothing registered globally), ParentBased/TraceIdRatio sampling decided once per
 * request at its server span, a BatchSpanProcessor with a bounded queue, and the OTLP/HTTP
 * exporter. What was exported and what was dropped is counted from the SDK's own
 * self-observability counter, so the figures are the processor's, not an estimate.
 */
export function createTracing(settings: TracingSettings, counts: SpanCounts, log: Logger): Tracing {
  const ids = new PresetTraceIds();
  const provider = new TracerProvider({
    idGenerator: ids,
    // process.pid: which process of a sidecar (each worker of server.workers exports its own spans).
    resource: resourceFromAttributes({ 'process.pid': process.pid, ...settings.resourceAttributes, 'service.name': settings.serviceName }),
    sampler: new DecidedRoots(samplerOf(settings)),
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: exporterOf(settings),
        maxQueueSize: settings.maxQueueSize,
        maxExportBatchSize: settings.maxExportBatchSize,
        scheduledDelayMillis: settings.scheduledDelayMs,
        // The exporter's own timeout ends an export first; this only keeps the processor moving.
        exportTimeoutMillis: settings.timeoutMs + 1_000,
        selfObsMeterProvider: processedSpans(counts),
      }),
    ],
  });
  const tracer = provider.getTracer('tokengate');
  const propagator = new W3CTraceContextPropagator();
  const rootRatio = rootRatioOf(settings);
  const rootBound = ratioBound(rootRatio);
  const followsParent = settings.sampler.startsWith('parentbased_');

  /**
   * The sampler's decision, taken before the SDK is asked for a span, so that a request that is
   * not recorded costs no span at all: a root request by the ratio on a trace id drawn here (the
   * one its span then gets, so the SDK's sampler agrees), a child of an unsampled caller by the
   * caller's flag.
   */
  function parentOf(headers: IncomingHttpHeaders): Context | RequestTrace {
    if (headers.traceparent === undefined) {
      if (rootRatio === 0) return UNTRACED;
      if (rootRatio < 1 && !ids.drawSampled(rootBound)) return UNTRACED;
      return ROOT_CONTEXT;
    }
    const parent = propagator.extract(ROOT_CONTEXT, headers, HEADER_GETTER);
    const caller = trace.getSpanContext(parent);
    if (caller === undefined) return parentOf(NO_HEADERS);
    if (followsParent && (caller.traceFlags & TraceFlags.SAMPLED) === 0) return new UnrecordedTrace(caller.traceId, '');
    return parent;
  }

  log.info({ url: withoutQuery(settings.url), protocol: settings.protocol, sampler: settings.sampler, ratio: settings.samplerRatio }, 'tracing on');

  return {
    startRequest(listener, method, headers) {
      const parent = parentOf(headers);
      if (!isContext(parent)) return parent;
      const span = tracer.startSpan(method, { kind: SpanKind.SERVER }, parent);
      if (!span.isRecording()) return parent === ROOT_CONTEXT ? UNTRACED : new UnrecordedTrace(span.spanContext().traceId, '');
      span.setAttribute('http.request.method', method);
      span.setAttribute('tokengate.listener', listener);
      return new RecordedTrace(span, method, tracer, propagator);
    },
    startSpan(name) {
      if (parentOf(NO_HEADERS) === UNTRACED) return null;
      return new StepSpan(tracer.startSpan(name, { kind: SpanKind.INTERNAL }, ROOT_CONTEXT));
    },
    async shutdown() {
      await provider.shutdown();
    },
  };
}

type Tracer = ReturnType<TracerProvider['getTracer']>;

const HEADER_GETTER: TextMapGetter<IncomingHttpHeaders> = {
  get: (headers, key) => headers[key],
  keys: (headers) => Object.keys(headers),
};

/** Writes the propagated fields into a flat header list, after taking out the client's own. */
const HEADER_LIST_SETTER: TextMapSetter<string[]> = {
  set(headers, key, value) {
    headers.push(key, value);
  },
};

const TRACE_CONTEXT_FIELDS = new Set(['traceparent', 'tracestate']);

/**
 * A request whose trace is not recorded: the id of the trace it joined (for the access log),
 * nothing else. Forwarded as it came, its `traceparent` reaches the upstream untouched.
 */
class UnrecordedTrace implements RequestTrace {
  readonly recording = false;

  constructor(
    readonly traceId: string,
    readonly spanId: string,
  ) {}

  set(): void {}
  child(): null {
    return null;
  }
  upstream(): null {
    return null;
  }
  answerWith(): void {}
  end(): void {}
}

/** A request that joined no trace and starts none: one shared value, no ids. */
const UNTRACED: RequestTrace = new UnrecordedTrace('', '');
const NO_HEADERS: IncomingHttpHeaders = {};

function isContext(parent: Context | RequestTrace): parent is Context {
  return !(parent instanceof UnrecordedTrace);
}

/** The share of requests without a sampled caller that start a recorded trace. */
function rootRatioOf(settings: TracingSettings): number {
  if (settings.sampler === 'always_on' || settings.sampler === 'parentbased_always_on') return 1;
  if (settings.sampler === 'always_off' || settings.sampler === 'parentbased_always_off') return 0;
  return settings.samplerRatio;
}

/**
 * TraceIdRatioBasedSampler's bound for `ratio`: a trace id is sampled when the XOR of its four
 * 32-bit words is below it (its `_accumulate`, on the id's hex).
 */
function ratioBound(ratio: number): number {
  return ratio >= 1 ? 2 ** 32 : ratio <= 0 ? 0 : Math.floor(ratio * 4294967295);
}

/** Random ids, except a root span's trace id when the root sampling decision was taken on it already. */
class PresetTraceIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  private preset: string | null = null;

  /**
   * Draws a root trace id's four random words and takes TraceIdRatioBasedSampler's decision on
   * them (the XOR of the words against `bound`, as it computes it from the hex), so that the id
   * is written out as hex only for a request that is recorded: it is then the next trace id
   * handed out, and the ratio sampler would decide the same on it. An id of zeros is invalid,
   * never sampled, as the SDK's sampler refuses it.
   */
  drawSampled(bound: number): boolean {
    const [a, b, c, d] = [randomWord(), randomWord(), randomWord(), randomWord()];
    if ((a ^ b ^ c ^ d) >>> 0 >= bound || (a | b | c | d) === 0) return false;
    this.preset = hexWord(a) + hexWord(b) + hexWord(c) + hexWord(d);
    return true;
  }

  generateTraceId(): string {
    const preset = this.preset;
    if (preset === null) return this.random.generateTraceId();
    this.preset = null;
    return preset;
  }

  generateSpanId(): string {
    return this.random.generateSpanId();
  }
}

class RecordedTrace implements RequestTrace {
  readonly recording = true;
  readonly traceId: string;
  readonly spanId: string;
  private parent: Context | null = null;

  constructor(
    private readonly span: Span,
    private readonly method: string,
    private readonly tracer: Tracer,
    private readonly propagator: W3CTraceContextPropagator,
  ) {
    const context = span.spanContext();
    this.traceId = context.traceId;
    this.spanId = context.spanId;
  }

  set(key: string, value: AttributeValue): void {
    this.span.setAttribute(key, value);
  }

  child(name: string): ChildSpan {
    return new StepSpan(this.tracer.startSpan(name, { kind: SpanKind.INTERNAL }, this.context()));
  }

  upstream(method: string, url: URL, headers: string[]): ChildSpan {
    const span = this.tracer.startSpan(method, { kind: SpanKind.CLIENT }, this.context());
    span.setAttribute('http.request.method', method);
    span.setAttribute('server.address', url.hostname);
    span.setAttribute('server.port', Number(url.port || (url.protocol === 'https:' ? 443 : 80)));
    for (let index = headers.length - 2; index >= 0; index -= 2) {
      const name = headers[index]!;
      // Only a name of their lengths can be one of them: the others are not lower-cased.
      if ((name.length === 11 || name.length === 10) && TRACE_CONTEXT_FIELDS.has(name.toLowerCase())) headers.splice(index, 2);
    }
    this.propagator.inject(trace.setSpan(ROOT_CONTEXT, span), headers, HEADER_LIST_SETTER);
    return new StepSpan(span, true);
  }

  answerWith(headers: string[]): void {
    this.propagator.inject(this.context(), headers, HEADER_LIST_SETTER);
  }

  end(status: number, route: string, reason?: string, token?: TracedToken | null, error?: string): void {
    const span = this.span;
    if (route !== UNROUTED) {
      span.setAttribute('http.route', route);
      span.updateName(`${this.method} ${route}`);
    }
    span.setAttribute('http.response.status_code', status);
    if (token !== undefined && token !== null) {
      span.setAttribute('tokengate.token.kind', token.kind);
      span.setAttribute('tokengate.client_id', token.clientId);
    }
    if (reason !== undefined) span.setAttribute('tokengate.refusal.reason', reason);
    if (error !== undefined) span.setAttribute('error.type', error);
    // A server span is an error for what the server failed at (5xx), not for a client's refusal (4xx).
    if (status >= 500 || error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  }

  private context(): Context {
    return (this.parent ??= trace.setSpan(ROOT_CONTEXT, this.span));
  }
}

class StepSpan implements ChildSpan {
  constructor(
    private readonly span: Span,
    private readonly client = false,
  ) {}

  set(key: string, value: AttributeValue): void {
    this.span.setAttribute(key, value);
  }

  end(failure?: string, status?: number): void {
    if (status !== undefined) this.span.setAttribute('http.response.status_code', status);
    if (failure !== undefined) {
      this.span.setAttribute('error.type', failure);
      this.span.setStatus({ code: SpanStatusCode.ERROR });
    } else if (this.client && status !== undefined && status >= 500) {
      this.span.setAttribute('error.type', String(status));
      this.span.setStatus({ code: SpanStatusCode.ERROR });
    }
    this.span.end();
  }
}

const randomWord = () => (Math.random() * 2 ** 32) >>> 0;
const hexWord = (word: number) => word.toString(16).padStart(8, '0');

const RECORD_ROOT: SamplingResult = Object.freeze({ decision: SamplingDecision.RECORD_AND_SAMPLED });

/**
 * The provider's sampler. A request without a caller's context reaches the SDK only once
 * `parentOf` has decided to record it, by the configured sampler's own ratio on the very trace id
 * the span gets: asking again would repeat that work for every recorded request. Spans with a
 * parent (a caller's, or the request's own server span) are decided by the configured sampler.
 */
class DecidedRoots implements Sampler {
  constructor(private readonly configured: Sampler) {}

  shouldSample(context: Context, traceId: string, name: string, kind: SpanKind, attributes: Attributes, links: Link[]): SamplingResult {
    if (trace.getSpanContext(context) === undefined) return RECORD_ROOT;
    return this.configured.shouldSample(context, traceId, name, kind, attributes, links);
  }

  toString(): string {
    return `DecidedRoots{${this.configured.toString()}}`;
  }
}

function samplerOf(settings: TracingSettings): Sampler {
  const ratio = new TraceIdRatioBasedSampler(settings.samplerRatio);
  switch (settings.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio;
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio });
  }
}

function exporterOf(settings: TracingSettings): SpanExporter {
  const json = settings.protocol === 'http/json';
  const options = convertLegacyHttpOptions(
    {
      url: settings.url,
      headers: { ...settings.headers },
      timeoutMillis: settings.timeoutMs,
      // One export at a time: a collector that hangs holds one batch, the queue fills and the rest is dropped and counted.
      concurrencyLimit: 1,
    },
    'TRACES',
    'v1/traces',
    { 'Content-Type': json ? 'application/json' : 'application/x-protobuf' },
  );
  return new OTLPExporterBase<ReadableSpan[]>(
    createOtlpHttpExportDelegate(
      options,
      json ? JsonTraceSerializer : ProtobufTraceSerializer,
      'otlp_http_span_exporter',
      TraceExporterMetricsHelper,
      undefined,
    ),
  );
}

/**
 * The batch processor reports every span it is done with on `otel.sdk.processor.span.processed`,
 * with `error.type` when it was not exported (`queue_full`, or the export's error): tokengate's
 * exported and dropped counters, read from that one counter.
 */
function processedSpans(counts: SpanCounts): MeterProvider {
  const processed: Counter = {
    add(count, attributes) {
      const failure = attributes?.['error.type'];
      if (failure === undefined) counts.exported.inc(count);
      else counts.dropped.inc({ reason: failure === 'queue_full' ? 'queue_full' : 'export_failed' }, count);
    },
  };
  const noop = createNoopMeter();
  const meter: Meter = Object.assign(Object.create(noop) as Meter, {
    createCounter: (name: string) => (name === 'otel.sdk.processor.span.processed' ? processed : noop.createCounter(name)),
  });
  return { getMeter: () => meter };
}

function withoutQuery(url: string): string {
  const parsed = new URL(url);
  parsed.username = '';
  parsed.password = '';
  parsed.search = '';
  return parsed.toString();
}
