import { afterAll, beforeAll, expect, it } from 'vitest';
import { startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { callerTraceparent, startCollector, type Collector } from './support/otlp.js';
import { TestPrometheus } from './support/prometheus.js';
import { eventually } from './support/wait.js';

/**
 * A real Prometheus with exemplar storage scrapes tokengate: it asks for OpenMetrics on its own,
 * and stores the trace of a recorded request with the duration histogram's bucket it fell in.
 */

let collector: Collector;
let upstream: Upstream;
let gateway: RunningTokengate;
let prometheus: TestPrometheus;

beforeAll(async () => {
  collector = await startCollector();
  upstream = await startUpstream();
  gateway = await startTokengate('metrics-exemplars-prometheus', {
    config: {
      routes: [{ path: '/api/traced', token: 'any', upstream: upstream.url }],
      tracing: { enabled: true, endpoint: collector.url, scheduledDelayMs: 20 },
    },
  });
  prometheus = await TestPrometheus.start({ job: 'tokengate', targets: [new URL(gateway.opsUrl).host], ruleFiles: [], features: ['exemplar-storage'] });
}, 60_000);

afterAll(async () => {
  await prometheus?.stop();
  await gateway?.close();
  await upstream?.close();
  await collector?.close();
});

it("stores a recorded request's trace id as an exemplar of the gateway's duration histogram", async () => {
  const caller = callerTraceparent(true);
  const response = await fetch(`${gateway.baseUrl}/api/traced/me`, {
    headers: { authorization: `Bearer ${await gateway.issue()}`, traceparent: caller.traceparent },
  });
  expect(response.status).toBe(200);
  await eventually(() => collector.trace(caller.traceId).some((span) => span.kind === 2), 5_000);
  const server = collector.trace(caller.traceId).find((span) => span.kind === 2)!;

  let stored: Array<{ labels: Record<string, string>; value: string }> = [];
  await eventually(async () => {
    const found = await prometheus.exemplars('tokengate_gateway_request_duration_seconds_bucket{route="/api/traced"}');
    stored = found.flatMap((series) => series.exemplars);
    return stored.length > 0;
  }, 15_000);
  expect(stored).toHaveLength(1);
  expect(stored[0]!.labels).toEqual({ trace_id: caller.traceId, span_id: server.spanId });
  expect(Number(stored[0]!.value)).toBeGreaterThan(0);
}, 30_000);
