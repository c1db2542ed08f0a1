import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { callerTraceparent, startCollector, type Collector } from './support/otlp.js';
import { eventually } from './support/wait.js';

/**
 * Exemplars: a scrape that asks for OpenMetrics finds, on the duration histograms' bucket lines,
 * the trace of the latest recorded request of that bucket, the trace the collector received. Any
 * other scrape gets the Prometheus text, without them and as it was.
 */

const OPENMETRICS = 'application/openmetrics-text; version=1.0.0; charset=utf-8';

let collector: Collector;
let upstream: Upstream;
let gateway: RunningTokengate;

beforeAll(async () => {
  collector = await startCollector();
  upstream = await startUpstream();
  gateway = await startTokengate('metrics-exemplars', {
    config: {
      decisions: { enabled: true },
      routes: [
        { path: '/api/sampled', token: 'any', upstream: upstream.url },
        { path: '/api/unsampled', token: 'any', upstream: upstream.url },
      ],
      tracing: { enabled: true, endpoint: collector.url, scheduledDelayMs: 20, serviceName: 'tokengate-exemplars' },
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
  await collector?.close();
});

async function scrape(accept?: string): Promise<{ contentType: string; text: string }> {
  const response = await fetch(`${gateway.opsUrl}/metrics`, accept === undefined ? {} : { headers: { accept } });
  expect(response.status).toBe(200);
  return { contentType: response.headers.get('content-type') ?? '', text: await response.text() };
}

const linesOf = (text: string, family: string) => text.split('\n').filter((line) => line.startsWith(family));

/** A bucket line's exemplar: its labels, value and timestamp (seconds). */
function exemplarsOf(lines: string[]): Array<{ line: string; labels: Record<string, string>; value: number; timestamp: number }> {
  return lines.flatMap((line) => {
    const match = /^(\S+\{[^}]*\}) \S+ # \{([^}]*)\} (\S+) (\S+)$/.exec(line);
    if (match === null) return [];
    const labels = Object.fromEntries([...match[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((pair) => [pair[1]!, pair[2]!]));
    return [{ line: match[1]!, labels, value: Number(match[3]), timestamp: Number(match[4]) }];
  });
}

describe('exemplars on the duration histograms', () => {
  it("puts a recorded gateway request's exported trace on its bucket line, in OpenMetrics only", async () => {
    const token = await gateway.issue();
    const caller = callerTraceparent(true);
    const before = Date.now() / 1000;
    const response = await fetch(`${gateway.baseUrl}/api/sampled/me`, { headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent } });
    expect(response.status).toBe(200);
    // The server span itself: a child may leave in an earlier export than its parent.
    await eventually(() => collector.trace(caller.traceId).some((span) => span.kind === 2), 5_000);
    const server = collector.trace(caller.traceId).find((span) => span.kind === 2)!;

    const open = await scrape('application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5');
    expect(open.contentType).toBe(OPENMETRICS);
    expect(open.text.endsWith('# EOF\n')).toBe(true);
    const exemplars = exemplarsOf(linesOf(open.text, 'tokengate_gateway_request_duration_seconds_bucket{route="/api/sampled"'));
    expect(exemplars).toHaveLength(1);
    const [exemplar] = exemplars;
    expect(exemplar!.labels).toEqual({ trace_id: server.traceId, span_id: server.spanId });
    expect(exemplar!.labels.trace_id).toBe(caller.traceId);
    expect(exemplar!.timestamp).toBeGreaterThanOrEqual(Math.floor(before));
    expect(exemplar!.timestamp).toBeLessThanOrEqual(Date.now() / 1000);
    // The bucket it sits on is the one its value falls in: the first bound at or above it.
    const bound = /le="([^"]+)"/.exec(exemplar!.line)![1]!;
    const bounds = linesOf(open.text, 'tokengate_gateway_request_duration_seconds_bucket{route="/api/sampled"').map((line) => /le="([^"]+)"/.exec(line)![1]!);
    const first = bounds.find((le) => le === '+Inf' || Number(le) >= exemplar!.value);
    expect(bound).toBe(first);

    const text = await scrape();
    expect(text.contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(text.text).not.toContain('trace_id');
    expect(text.text).not.toContain('# EOF');
  });

  it('adds none for requests whose trace is not recorded', async () => {
    const token = await gateway.issue();
    for (let index = 0; index < 3; index += 1) {
      const caller = callerTraceparent(false);
      const response = await fetch(`${gateway.baseUrl}/api/unsampled/me`, { headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent } });
      expect(response.status).toBe(200);
    }
    const open = await scrape('application/openmetrics-text');
    const buckets = linesOf(open.text, 'tokengate_gateway_request_duration_seconds_bucket{route="/api/unsampled"');
    expect(buckets.some((line) => line.endsWith(' 3'))).toBe(true);
    expect(exemplarsOf(buckets)).toEqual([]);
  });

  it("puts a refused request's trace on the gateway's histogram and a check's on the decision listener's", async () => {
    const refused = callerTraceparent(true);
    expect((await fetch(`${gateway.baseUrl}/api/sampled/me`, { headers: { traceparent: refused.traceparent } })).status).toBe(401);
    const checked = callerTraceparent(true);
    const token = await gateway.issue();
    const check = await fetch(`${gateway.decisionsUrl}/forward-auth`, {
      headers: {
        'x-forwarded-method': 'GET',
        'x-forwarded-uri': '/api/sampled/me',
        'x-forwarded-proto': 'http',
        'x-forwarded-host': 'ingress.test',
        authorization: `Bearer ${token}`,
        traceparent: checked.traceparent,
      },
    });
    expect(check.status).toBe(200);
    const open = await scrape('application/openmetrics-text');
    const gatewayTraces = exemplarsOf(linesOf(open.text, 'tokengate_gateway_request_duration_seconds_bucket')).map((found) => found.labels.trace_id);
    expect(gatewayTraces).toContain(refused.traceId);
    const decisionTraces = exemplarsOf(linesOf(open.text, 'tokengate_decision_duration_seconds_bucket')).map((found) => found.labels.trace_id);
    expect(decisionTraces).toEqual([checked.traceId]);
  });

  it('leaves the Prometheus text as it was after an OpenMetrics scrape (the counters keep their _total)', async () => {
    const families = (text: string) => text.split('\n').filter((line) => line.startsWith('# '));
    const requestPath = (text: string) => text.split('\n').filter((line) => /^tokengate_(gateway|decision|upstream)/.test(line));
    const before = await scrape();
    const open = await scrape('application/openmetrics-text');
    const after = await scrape();
    expect(families(after.text)).toEqual(families(before.text));
    expect(requestPath(after.text)).toEqual(requestPath(before.text));
    expect(after.text).toContain('# TYPE tokengate_gateway_requests_total counter');
    // OpenMetrics names a counter's family without the suffix and its samples with it, once.
    expect(open.text).toContain('# TYPE tokengate_gateway_requests counter');
    expect(open.text).toContain('tokengate_gateway_requests_total{');
    expect(open.text).not.toContain('_total_total');
  });
});
