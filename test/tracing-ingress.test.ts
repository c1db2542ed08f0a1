import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caddyfile, nginxConf } from '../examples/ingress/configs.mjs';
import { parseConfig } from '../src/load-config.js';
import { caddyCommand, exchange, installed, nginxCommand, startIngress, startTicketingApi, type Ingress } from './support/ingress.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { ROOT } from './support/markdown.js';
import { callerTraceparent, parseTraceparent, startCollector, type Collector } from './support/otlp.js';
import { eventually } from './support/wait.js';

/**
 * Traces through a real nginx (auth_request) and a real Caddy (forward_auth) running the
 * shipped examples, asking a traced tokengate's decision listener: the check's span continues
 * the client's trace, and the API receives tokengate's check span as its parent when it was
 * recorded, the client's trace context untouched when it was not.
 */

const SERVER = 2;
const EXAMPLE_CONFIG = parseConfig(readFileSync(join(ROOT, 'examples/ingress/tokengate.yaml'), 'utf8'), 'examples/ingress/tokengate.yaml', {});

let userApi: Awaited<ReturnType<typeof startTicketingApi>>;
let organizerApi: Awaited<ReturnType<typeof startTicketingApi>>;
let collector: Collector;
let tokengate: RunningTokengate;
let token: string;

beforeAll(async () => {
  [userApi, organizerApi, collector] = await Promise.all([startTicketingApi('user'), startTicketingApi('organizer'), startCollector()]);
  tokengate = await startTokengate('tracing-ingress', {
    config: {
      decisions: { enabled: true },
      routes: EXAMPLE_CONFIG.routes,
      // Roots are not sampled: a client's sampled flag decides, as it would behind a traced edge.
      tracing: { enabled: true, endpoint: collector.url, samplerRatio: 0, scheduledDelayMs: 20 },
    },
  });
  token = await tokengate.issue();
});

afterAll(async () => {
  await tokengate?.close();
  await Promise.all([userApi?.close(), organizerApi?.close(), collector?.close()]);
});

/**
 * `nested`: the API's request is parented on tokengate's check span (nginx copies the answer's
 * traceparent). Caddy's copy_headers would too, but Caddy 2.6 sets a header the answer lacks to
 * its placeholder's text, which would replace an unsampled client's traceparent with garbage:
 * its example leaves the client's trace context alone, and the check's span is the API's sibling.
 */
const KINDS = [
  { name: 'nginx', program: 'nginx', config: nginxConf, command: nginxCommand, nested: true },
  { name: 'Caddy', program: 'caddy', config: caddyfile, command: caddyCommand, nested: false },
] as const;

describe.each(KINDS)('behind $name as shipped', (kind) => {
  let ingress: Ingress;

  beforeAll(async () => {
    if (!installed(kind.program, kind.program === 'nginx' ? '-v' : 'version'))
      throw new Error(`${kind.program} is not installed: apt-get install -y ${kind.program}`);
    const decisions = new URL(tokengate.decisionsUrl!).host;
    ingress = await startIngress(
      kind.program,
      (address) => kind.config({ ingress: address, decisions, userApi: userApi.address, organizerApi: organizerApi.address }),
      kind.command,
    );
  });

  afterAll(async () => {
    await ingress?.close();
  });

  it(`the check's span continues the client's trace, and the API's request is parented on ${kind.nested ? 'it' : "the client's span"}`, async () => {
    const caller = callerTraceparent(true);
    const before = userApi.received.length;
    const response = await exchange(ingress.port, 'GET', '/api/public/me', [
      ['Authorization', `Bearer ${token}`],
      ['traceparent', caller.traceparent],
    ]);
    expect(response.status).toBe(200);
    // The check's span, whatever else of the trace came first (a child may leave in an earlier export).
    await eventually(() => collector.trace(caller.traceId).some((span) => span.kind === SERVER), 5_000);
    const check = collector.trace(caller.traceId).find((span) => span.kind === SERVER)!;
    expect(check.parentSpanId).toBe(caller.spanId);
    expect(check.attributes).toMatchObject({ 'tokengate.listener': 'decisions', 'http.route': '/api/public/me', 'http.response.status_code': 200 });
    expect(userApi.received.length).toBe(before + 1);
    const received = parseTraceparent(userApi.received.at(-1)!.headers.traceparent as string);
    expect(received).toEqual({ traceId: caller.traceId, parentId: kind.nested ? check.spanId : caller.spanId, sampled: true });
  });

  it("an unsampled client's trace context reaches the API as it came, and nothing is exported", async () => {
    const caller = callerTraceparent(false);
    const response = await exchange(ingress.port, 'GET', '/api/public/me', [
      ['Authorization', `Bearer ${token}`],
      ['traceparent', caller.traceparent],
    ]);
    expect(response.status).toBe(200);
    expect(userApi.received.at(-1)!.headers.traceparent).toBe(caller.traceparent);
    // A sampled request after it is exported: by then the unsampled one would have been too.
    const sampled = callerTraceparent(true);
    await exchange(ingress.port, 'GET', '/api/public/me', [
      ['Authorization', `Bearer ${token}`],
      ['traceparent', sampled.traceparent],
    ]);
    await eventually(() => collector.trace(sampled.traceId).length >= 1, 5_000);
    expect(collector.trace(caller.traceId)).toHaveLength(0);
  });
});
