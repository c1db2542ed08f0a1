import { ROOT_CONTEXT } from '@opentelemetry/api';
import { SamplingDecision, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { accessLines, captureLog, type CapturedLog } from './support/log.js';
import { startCollector, type Collector } from './support/otlp.js';
import { eventually } from './support/wait.js';

/**
 * The root sampler's ratio, judged by what a real OTLP receiver gets: tokengate takes the ratio
 * decision on a request's trace id before the id is written out (src/tracing/sdk.ts), and must
 * decide as OpenTelemetry's TraceIdRatioBasedSampler does on that id, so that a trace it records
 * is one the standard sampler would record, in the share configured.
 */

const RATIO = 0.25;
const REQUESTS = 800;
const SERVER = 2;

let collector: Collector;
let upstream: Upstream;
let gateway: RunningTokengate;
let log: CapturedLog;

beforeAll(async () => {
  collector = await startCollector();
  upstream = await startUpstream();
  log = captureLog('info');
  gateway = await startTokengate('tracing-ratio', {
    logger: log.logger,
    config: {
      logging: { requests: 'all' },
      routes: [{ path: '/api/public', methods: ['GET'], token: 'user', scopes: ['public'], upstream: upstream.url }],
      tracing: { enabled: true, endpoint: collector.url, samplerRatio: RATIO, scheduledDelayMs: 20 },
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
  await collector?.close();
});

describe('the root sampler at a ratio', () => {
  it("records the configured share of the requests that start a trace, each on a trace id OpenTelemetry's ratio sampler would record", async () => {
    const token = await gateway.issue();
    for (let sent = 0; sent < REQUESTS; sent++) {
      const response = await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
      await response.arrayBuffer();
      expect(response.status).toBe(200);
    }
    // The access log names the trace of each recorded request; without a caller, the others have none.
    const lines = accessLines(log).filter((line) => line.route === '/api/public');
    expect(lines).toHaveLength(REQUESTS);
    const recorded = new Set(lines.flatMap((line) => (typeof line.trace_id === 'string' ? [line.trace_id] : [])));
    const exported = () => new Set(collector.spans.filter((span) => span.kind === SERVER).map((span) => span.traceId));
    await eventually(() => [...recorded].every((traceId) => exported().has(traceId)), 5_000);
    // What was exported is what the access log says was recorded, no other trace.
    expect([...exported()].sort()).toEqual([...recorded].sort());
    // Binomial: 200 expected, standard deviation 12; five of them either side.
    expect(recorded.size).toBeGreaterThan(REQUESTS * RATIO - 60);
    expect(recorded.size).toBeLessThan(REQUESTS * RATIO + 60);
    const standard = new TraceIdRatioBasedSampler(RATIO);
    const refused = [...recorded].filter((traceId) => standard.shouldSample(ROOT_CONTEXT, traceId).decision !== SamplingDecision.RECORD_AND_SAMPLED);
    expect(refused).toEqual([]);
  });
});
