import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { closeServer } from './gateway.js';

/**
 * A real OTLP/HTTP trace receiver, as a collector is one: it takes POST /v1/traces in protobuf
 * (decoded with the OpenTelemetry protocol's own .proto files, vendored under ./otlp/) or JSON,
 * and keeps every body as it arrived (for tests that search the raw bytes) and every span decoded.
 * It can also fail the ways a collector does: answer 500, or take requests and never answer.
 */

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  attributes: Record<string, string | number | boolean>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  resource: Record<string, string | number | boolean>;
}

export type CollectorMode = 'accept' | 'fail' | 'hang';

export interface Collector {
  readonly url: string;
  readonly server: Server;
  /** Every body received, raw. */
  readonly bodies: Buffer[];
  /** Content types of the bodies received, in order. */
  readonly contentTypes: string[];
  readonly spans: ReceivedSpan[];
  /** How it answers from now on. */
  mode: CollectorMode;
  /** The spans of one trace. */
  trace(traceId: string): ReceivedSpan[];
  close(): Promise<void>;
}

const PROTO_ROOT = fileURLToPath(new URL('./otlp/', import.meta.url));
let requestType: protobuf.Type | undefined;

function exportRequestType(): protobuf.Type {
  if (requestType !== undefined) return requestType;
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => (target.startsWith('/') ? target : PROTO_ROOT + target);
  root.loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto', { keepCase: false });
  requestType = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
  return requestType;
}

export async function startCollector(mode: CollectorMode = 'accept', port = 0): Promise<Collector> {
  const hanging = new Set<ServerResponse>();
  const collector: Omit<Collector, 'url' | 'close'> = {
    server: createServer(receive),
    bodies: [],
    contentTypes: [],
    spans: [],
    mode,
    trace(traceId) {
      return this.spans.filter((span) => span.traceId === traceId);
    },
  };

  function receive(request: IncomingMessage, response: ServerResponse): void {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (collector.mode === 'hang') {
        hanging.add(response);
        return;
      }
      if (collector.mode === 'fail') {
        response.writeHead(500, { 'content-type': 'text/plain' }).end('collector failing');
        return;
      }
      const body = Buffer.concat(chunks);
      const contentType = request.headers['content-type'] ?? '';
      collector.bodies.push(body);
      collector.contentTypes.push(contentType);
      const json = contentType.startsWith('application/json');
      collector.spans.push(...(json ? spansOfJson(JSON.parse(body.toString('utf8'))) : spansOfProtobuf(body)));
      if (json) response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      else response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  }

  await new Promise<void>((resolve) => collector.server.listen(port, '127.0.0.1', resolve));
  return Object.assign(collector, {
    url: `http://127.0.0.1:${(collector.server.address() as AddressInfo).port}`,
    async close() {
      for (const response of hanging) response.destroy();
      await closeServer(collector.server);
    },
  });
}

interface OtlpKeyValue {
  key: string;
  value: { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  attributes?: OtlpKeyValue[];
  status?: { code?: number };
}
interface OtlpRequest {
  resourceSpans?: Array<{ resource?: { attributes?: OtlpKeyValue[] }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }>;
}

function spansOfProtobuf(body: Buffer): ReceivedSpan[] {
  const type = exportRequestType();
  const decoded = type.toObject(type.decode(body), { longs: String, enums: Number, bytes: String, defaults: false }) as OtlpRequest;
  // protobufjs writes bytes as base64: OTLP's ids are hex everywhere else (JSON, traceparent).
  const hex = (base64: string | undefined) => (base64 === undefined ? '' : Buffer.from(base64, 'base64').toString('hex'));
  return spansOf(decoded, hex);
}

function spansOfJson(body: OtlpRequest): ReceivedSpan[] {
  return spansOf(body, (id) => id ?? '');
}

function spansOf(request: OtlpRequest, id: (value: string | undefined) => string): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of request.resourceSpans ?? []) {
    const resource = attributesOf(resourceSpans.resource?.attributes);
    for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
      for (const span of scopeSpans.spans ?? []) {
        spans.push({
          traceId: id(span.traceId),
          spanId: id(span.spanId),
          parentSpanId: id(span.parentSpanId),
          name: span.name,
          kind: span.kind ?? 0,
          attributes: attributesOf(span.attributes),
          statusCode: span.status?.code ?? 0,
          resource,
        });
      }
    }
  }
  return spans;
}

function attributesOf(list: OtlpKeyValue[] | undefined): Record<string, string | number | boolean> {
  const attributes: Record<string, string | number | boolean> = {};
  for (const { key, value } of list ?? []) {
    if (value.stringValue !== undefined) attributes[key] = value.stringValue;
    else if (value.intValue !== undefined) attributes[key] = Number(value.intValue);
    else if (value.boolValue !== undefined) attributes[key] = value.boolValue;
    else if (value.doubleValue !== undefined) attributes[key] = value.doubleValue;
  }
  return attributes;
}

/** The W3C traceparent of a made-up caller's span: `sampled` sets its flag. */
export function callerTraceparent(sampled: boolean): { traceparent: string; traceId: string; spanId: string } {
  const traceId = randomHex(16);
  const spanId = randomHex(8);
  return { traceparent: `00-${traceId}-${spanId}-${sampled ? '01' : '00'}`, traceId, spanId };
}

function randomHex(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString('hex');
}

/** The trace id, parent span id and flags of a traceparent value. */
export function parseTraceparent(value: string | undefined): { traceId: string; parentId: string; sampled: boolean } | null {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value ?? '');
  return match === null ? null : { traceId: match[1]!, parentId: match[2]!, sampled: (parseInt(match[3]!, 16) & 1) === 1 };
}
