import { randomUUID } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig, type ConfigError } from '../src/load-config.js';
import { tokenDigest } from '../src/token/token-value.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { registerApplication, startTokengate, type RunningTokengate } from './support/instance.js';
import { callerTraceparent, parseTraceparent, startCollector, type Collector, type ReceivedSpan } from './support/otlp.js';
import { accessLines, captureLog } from './support/log.js';
import { eventually, sleep } from './support/wait.js';
import { TestIdentityProvider } from './support/identity-provider.js';
import { EVENT, TestTransmitter } from './support/transmitter.js';

/**
 * Traces through tokengate, judged by what a real OTLP/HTTP receiver decodes (protobuf with the
 * protocol's own .proto files, and JSON) and by what a real upstream receives.
 */

const SERVER = 2;
const CLIENT = 3;
const INTERNAL = 1;

let collector: Collector;
let upstream: Upstream;
let gateway: RunningTokengate;

const routes = (upstreamUrl: string) => [
  { path: '/api/public', methods: ['GET', 'POST'], token: 'user', scopes: ['public'], upstream: upstreamUrl },
  { path: '/api/tight', token: 'any', upstream: upstreamUrl, rateLimit: 'tight' },
  { path: '/api/bound', token: 'any', upstream: upstreamUrl, dpop: 'required' },
];

beforeAll(async () => {
  collector = await startCollector();
  upstream = await startUpstream();
  gateway = await startTokengate('tracing', {
    config: {
      decisions: { enabled: true },
      rateLimits: { tight: { requestsPerSecond: 0.1, burst: 1 } },
      routes: routes(upstream.url),
      tracing: { enabled: true, endpoint: collector.url, scheduledDelayMs: 20, serviceName: 'tokengate-under-test' },
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
  await collector?.close();
});

/** The spans of a trace once `count` of them have arrived. */
async function spansOf(traceId: string, count: number, from: Collector = collector): Promise<ReceivedSpan[]> {
  await eventually(() => from.trace(traceId).length >= count, 5_000);
  return from.trace(traceId);
}

const only = (spans: ReceivedSpan[], kind: number, name?: string): ReceivedSpan => {
  const found = spans.filter((span) => span.kind === kind && (name === undefined || span.name === name));
  expect(found, `one span of kind ${kind}${name === undefined ? '' : ` named ${name}`}`).toHaveLength(1);
  return found[0]!;
};

describe('a request through the gateway', () => {
  it("continues the caller's trace: a server span parented on the caller's, a client span under it, and the upstream sees the client span as its parent", async () => {
    const token = await gateway.issue();
    const caller = callerTraceparent(true);
    const response = await fetch(`${gateway.baseUrl}/api/public/me`, {
      headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent, tracestate: 'vendor=1' },
    });
    expect(response.status).toBe(200);

    const spans = await spansOf(caller.traceId, 3);
    const server = only(spans, SERVER);
    expect(server.parentSpanId).toBe(caller.spanId);
    expect(server.name).toBe('GET /api/public');
    expect(server.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.route': '/api/public',
      'http.response.status_code': 200,
      'tokengate.listener': 'public',
      'tokengate.token.kind': 'user',
      'tokengate.client_id': 'client-web',
      // The token was just issued: the cache had never seen it.
      'tokengate.cache': 'miss',
    });
    expect(server.resource['service.name']).toBe('tokengate-under-test');

    const client = only(spans, CLIENT);
    expect(client.parentSpanId).toBe(server.spanId);
    expect(client.attributes).toMatchObject({ 'http.request.method': 'GET', 'http.response.status_code': 200, 'server.address': '127.0.0.1' });

    // A cache miss: the store read is a child span of the request.
    const read = only(spans, INTERNAL, 'tokengate.store.read_token');
    expect(read.parentSpanId).toBe(server.spanId);

    const forwarded = upstream.received.at(-1)!;
    const upstreamContext = parseTraceparent(forwarded.headers.traceparent as string);
    expect(upstreamContext).toEqual({ traceId: caller.traceId, parentId: client.spanId, sampled: true });
    expect(forwarded.headers.tracestate).toBe('vendor=1');
    // Exactly one traceparent: the caller's own was replaced, not sent beside tokengate's.
    expect(forwarded.rawHeaders.filter((name, index) => index % 2 === 0 && name.toLowerCase() === 'traceparent')).toHaveLength(1);
  });

  it('records a cached token as a cache hit, without a store span', async () => {
    const token = await gateway.issue();
    expect((await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const caller = callerTraceparent(true);
    expect((await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent } })).status).toBe(
      200,
    );
    const spans = await spansOf(caller.traceId, 2);
    expect(only(spans, SERVER).attributes['tokengate.cache']).toBe('hit');
    expect(spans.filter((span) => span.name === 'tokengate.store.read_token')).toHaveLength(0);
  });

  it('puts the refusal reason on the span of a refused request, and the route it was refused on', async () => {
    const caller = callerTraceparent(true);
    const response = await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { traceparent: caller.traceparent } });
    expect(response.status).toBe(401);
    const [server] = await spansOf(caller.traceId, 1);
    expect(server!.attributes).toMatchObject({ 'http.route': '/api/public', 'http.response.status_code': 401, 'tokengate.refusal.reason': 'token_missing' });
    // A client's mistake is not the server's error.
    expect(server!.statusCode).not.toBe(2);
  });

  it('carries the rate limit policy and outcome, admitted and refused', async () => {
    const token = await gateway.issue();
    const outcomes: Array<string | number | boolean | undefined> = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const caller = callerTraceparent(true);
      await fetch(`${gateway.baseUrl}/api/tight/x`, { headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent } });
      // The server span, whatever else of the trace came first (a child may leave in an earlier export).
      await eventually(() => collector.trace(caller.traceId).some((span) => span.kind === SERVER), 5_000);
      const server = only(collector.trace(caller.traceId), SERVER);
      expect(server.attributes['tokengate.ratelimit.policy']).toBe('tight');
      outcomes.push(server.attributes['tokengate.ratelimit.outcome']);
    }
    expect(outcomes).toEqual(['admitted', 'rate_limited']);
  });

  it('marks a DPoP request and traces its replay mark in the store', async () => {
    const keys = await generateKeyPair('ES256');
    const jwk = await exportJWK(keys.publicKey);
    const token = await gateway.issue({ kind: 'application', userId: null, familyId: null, jkt: await calculateJwkThumbprint(jwk) });
    const caller = callerTraceparent(true);
    const proof = await dpopProof(keys.privateKey, jwk, `${gateway.baseUrl}/api/bound/tickets`, token);
    const response = await fetch(`${gateway.baseUrl}/api/bound/tickets`, {
      headers: { authorization: `DPoP ${token}`, dpop: proof, traceparent: caller.traceparent },
    });
    expect(response.status).toBe(200);
    const spans = await spansOf(caller.traceId, 4);
    const server = only(spans, SERVER);
    expect(server.attributes['tokengate.dpop']).toBe(true);
    expect(only(spans, INTERNAL, 'tokengate.dpop.replay_mark').parentSpanId).toBe(server.spanId);
  });
});

describe('the issuer', () => {
  it('traces a grant: the token endpoint as the server span, the grant and its store writes as children', async () => {
    const application = await registerApplication(gateway.store);
    const caller = callerTraceparent(true);
    const response = await fetch(`${gateway.baseUrl}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', traceparent: caller.traceparent },
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: application.clientId, client_secret: application.clientSecret! }).toString(),
    });
    expect(response.status).toBe(200);
    const spans = await spansOf(caller.traceId, 3);
    const server = only(spans, SERVER);
    expect(server.name).toBe('POST /oauth/token');
    expect(server.attributes).toMatchObject({
      'tokengate.grant_type': 'client_credentials',
      'tokengate.client_id': application.clientId,
      'http.response.status_code': 200,
    });
    const grant = only(spans, INTERNAL, 'tokengate.issuer.grant');
    expect(grant.parentSpanId).toBe(server.spanId);
    expect(only(spans, INTERNAL, 'tokengate.store.save_tokens').parentSpanId).toBe(server.spanId);
  });
});

describe('what is never recorded', () => {
  it('a token in the header, the query, a form body and a JSON body, a DPoP proof, a cookie, a client secret and an issued token appear in no exported byte', async () => {
    const secrets: string[] = [];
    const traced: string[] = [];
    const send = async (path: string, init: RequestInit & { headers?: Record<string, string> }, expected: number) => {
      const caller = callerTraceparent(true);
      traced.push(caller.traceId);
      const response = await fetch(`${gateway.baseUrl}${path}`, { ...init, headers: { ...init.headers, traceparent: caller.traceparent } });
      expect(response.status, path).toBe(expected);
      return response;
    };
    const inHeader = await gateway.issue();
    const inQuery = await gateway.issue();
    const inForm = await gateway.issue();
    const inJson = await gateway.issue();
    secrets.push(inHeader, inQuery, inForm, inJson);
    await send('/api/public/me', { headers: { authorization: `Bearer ${inHeader}`, cookie: 'session=cookie-value-never-recorded' } }, 200);
    await send(`/api/public/me?access_token=${inQuery}&page=query-value-never-recorded`, {}, 200);
    await send('/api/public/form', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `access_token=${inForm}` }, 200);
    await send('/api/public/json', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ access_token: inJson }) }, 200);
    // Refused ones too: a made-up token, and one in the query of a refused request.
    const forged = 'A'.repeat(43);
    secrets.push(forged);
    await send('/api/public/me', { headers: { authorization: `Bearer ${forged}` } }, 401);

    const keys = await generateKeyPair('ES256');
    const jwk = await exportJWK(keys.publicKey);
    const bound = await gateway.issue({ kind: 'application', userId: null, familyId: null, jkt: await calculateJwkThumbprint(jwk) });
    const proof = await dpopProof(keys.privateKey, jwk, `${gateway.baseUrl}/api/bound/tickets`, bound);
    secrets.push(bound, proof, ...proof.split('.'));
    await send('/api/bound/tickets', { headers: { authorization: `DPoP ${bound}`, dpop: proof } }, 200);

    const application = await registerApplication(gateway.store);
    secrets.push(application.clientSecret!);
    const granted = await send(
      '/oauth/token',
      {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'client_credentials', client_id: application.clientId, client_secret: application.clientSecret! }).toString(),
      },
      200,
    );
    secrets.push(((await granted.json()) as { access_token: string }).access_token);

    for (const traceId of traced) await spansOf(traceId, 1);
    const exported = Buffer.concat(collector.bodies);
    for (const secret of [...secrets, 'cookie-value-never-recorded', 'query-value-never-recorded', 'access_token']) {
      expect(exported.includes(Buffer.from(secret)), `${secret.slice(0, 12)}... in an exported span`).toBe(false);
    }
  });
});

describe('shared signals', () => {
  it('record a span per event, pushed (under the push request) or polled (a trace of its own), and never the SET', async () => {
    const [pushIdp, pollIdp] = await Promise.all([TestIdentityProvider.start(), TestIdentityProvider.start()]);
    const audience = 'https://tokengate.test';
    const [pushing, polling] = [TestTransmitter.on(pushIdp, audience), TestTransmitter.on(pollIdp, audience)];
    const pushAuthorization = 'Bearer push-secret-never-recorded';
    const receiver = await startTokengate('tracing-ssf', {
      config: {
        identityProviders: [
          pushIdp.config({
            sharedSignals: { name: 'pushing', configurationUrl: pushing.configurationUrl, delivery: 'push', audience, pushAuthorization, streamId: 's' },
          }),
          pollIdp.config({
            sharedSignals: {
              name: 'polled',
              configurationUrl: polling.configurationUrl,
              delivery: 'poll',
              audience,
              transmitterAuthorization: polling.managementAuthorization,
              pollIntervalMs: 50,
            },
          }),
        ],
        tracing: { enabled: true, endpoint: collector.url, scheduledDelayMs: 20 },
      },
    });
    try {
      const pushed = await pushing.set(EVENT.sessionRevoked, {}, { format: 'iss_sub', iss: pushIdp.issuer, sub: 'ada' });
      const caller = callerTraceparent(true);
      expect(
        (await pushing.push(`${receiver.baseUrl}/ssf/events/pushing`, pushed.set, pushAuthorization, undefined, { traceparent: caller.traceparent })).status,
      ).toBe(202);
      const spans = await spansOf(caller.traceId, 2);
      const server = only(spans, SERVER);
      expect(server.name).toBe('POST /ssf/events/:name');
      const event = only(spans, INTERNAL, 'tokengate.shared_signals.event');
      expect(event.parentSpanId).toBe(server.spanId);
      expect(event.attributes).toEqual({
        'tokengate.shared_signals.provider': 'pushing',
        'tokengate.shared_signals.event_type': 'session-revoked',
        'tokengate.shared_signals.delivery': 'push',
        'tokengate.shared_signals.jti': pushed.jti,
        'tokengate.shared_signals.outcome': 'applied',
      });

      await eventually(() => polling.streams.size === 1, 10_000);
      const polled = await polling.set(EVENT.credentialChange, { change_type: 'create', credential_type: 'password' }, { format: 'opaque', id: 'ada' });
      polling.enqueue([...polling.streams.keys()][0]!, polled);
      await eventually(() => collector.spans.some((span) => span.attributes['tokengate.shared_signals.jti'] === polled.jti), 10_000);
      const root = collector.spans.find((span) => span.attributes['tokengate.shared_signals.jti'] === polled.jti)!;
      expect(root).toMatchObject({ name: 'tokengate.shared_signals.event', kind: INTERNAL, parentSpanId: '' });
      expect(root.attributes).toMatchObject({ 'tokengate.shared_signals.delivery': 'poll', 'tokengate.shared_signals.outcome': 'no_effect' });

      const exported = Buffer.concat(collector.bodies);
      for (const secret of [
        pushed.set,
        ...pushed.set.split('.'),
        ...polled.set.split('.'),
        'push-secret-never-recorded',
        polling.managementAuthorization.slice(7),
      ])
        expect(exported.includes(Buffer.from(secret)), `${secret.slice(0, 12)}... in an exported span`).toBe(false);
    } finally {
      await receiver.close();
      await Promise.all([pushIdp.close(), pollIdp.close()]);
    }
  });
});

describe('the decision listener', () => {
  it("continues the trace context the ingress passes on, with the check's outcome on the span", async () => {
    const token = await gateway.issue();
    const caller = callerTraceparent(true);
    const response = await fetch(`${gateway.decisionsUrl}/forward-auth`, {
      headers: {
        'x-forwarded-method': 'GET',
        'x-forwarded-uri': '/api/public/me',
        'x-forwarded-proto': 'http',
        'x-forwarded-host': 'ingress.test',
        authorization: `Bearer ${token}`,
        traceparent: caller.traceparent,
      },
    });
    expect(response.status).toBe(200);
    const server = only(await spansOf(caller.traceId, 1), SERVER);
    expect(server.parentSpanId).toBe(caller.spanId);
    expect(server.attributes).toMatchObject({
      'tokengate.listener': 'decisions',
      'http.route': '/api/public',
      'http.response.status_code': 200,
      'tokengate.token.kind': 'user',
    });
  });
});

describe('sampling', () => {
  let sparse: RunningTokengate;
  let sparseCollector: Collector;

  beforeAll(async () => {
    sparseCollector = await startCollector();
    sparse = await startTokengate('tracing-sparse', {
      config: {
        rateLimits: { tight: { requestsPerSecond: 0.1, burst: 1 } },
        routes: routes(upstream.url),
        tracing: { enabled: true, endpoint: sparseCollector.url, samplerRatio: 0, scheduledDelayMs: 20, protocol: 'http/json' },
      },
    });
  });

  afterAll(async () => {
    await sparse?.close();
    await sparseCollector?.close();
  });

  it('with the root sampler at 0, exports nothing for requests that start a trace, and honours a sampled parent (OTLP JSON)', async () => {
    const token = await sparse.issue();
    for (let i = 0; i < 5; i++) expect((await fetch(`${sparse.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const sampled = callerTraceparent(true);
    expect((await fetch(`${sparse.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, traceparent: sampled.traceparent } })).status).toBe(
      200,
    );
    const spans = await spansOf(sampled.traceId, 2, sparseCollector);
    expect(only(spans, SERVER).parentSpanId).toBe(sampled.spanId);
    // Every span exported belongs to the sampled caller's trace.
    expect(sparseCollector.spans.every((span) => span.traceId === sampled.traceId)).toBe(true);
    expect(sparseCollector.contentTypes.every((type) => type.startsWith('application/json'))).toBe(true);
  });

  it("forwards an unsampled caller's traceparent as it came, and exports nothing for it", async () => {
    const token = await sparse.issue();
    const unsampled = callerTraceparent(false);
    const before = sparseCollector.spans.length;
    expect((await fetch(`${sparse.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, traceparent: unsampled.traceparent } })).status).toBe(
      200,
    );
    expect(upstream.received.at(-1)!.headers.traceparent).toBe(unsampled.traceparent);
    // A sampled request after it is exported: by then the unsampled one would have been too.
    const sampled = callerTraceparent(true);
    await fetch(`${sparse.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, traceparent: sampled.traceparent } });
    await spansOf(sampled.traceId, 2, sparseCollector);
    expect(sparseCollector.spans.slice(before).filter((span) => span.traceId === unsampled.traceId)).toHaveLength(0);
  });
});

describe('shutdown', () => {
  it('exports the spans still queued before the process ends', async () => {
    const closing = await startTokengate('tracing-shutdown', {
      // Nothing would be sent for a minute: only the shutdown's flush sends this span.
      config: { routes: routes(upstream.url).slice(0, 1), tracing: { enabled: true, endpoint: collector.url, scheduledDelayMs: 60_000 } },
    });
    const token = await closing.issue();
    const caller = callerTraceparent(true);
    expect((await fetch(`${closing.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent } })).status).toBe(
      200,
    );
    await sleep(200);
    expect(collector.trace(caller.traceId)).toHaveLength(0);
    await closing.close();
    expect(
      collector
        .trace(caller.traceId)
        .map((span) => span.kind)
        .sort(),
    ).toEqual([INTERNAL, SERVER, CLIENT].sort());
  });
});

describe('the access log', () => {
  it("carries the trace and server span of a traced request, and the caller's trace of one not recorded", async () => {
    const log = captureLog('info');
    const logged = await startTokengate('tracing-log', {
      logger: log.logger,
      config: {
        logging: { requests: 'all' },
        routes: routes(upstream.url).slice(0, 1),
        tracing: { enabled: true, endpoint: collector.url, samplerRatio: 0, scheduledDelayMs: 20 },
      },
    });
    try {
      const token = await logged.issue();
      const sampled = callerTraceparent(true);
      const unsampled = callerTraceparent(false);
      for (const caller of [sampled, unsampled]) {
        expect(
          (await fetch(`${logged.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, traceparent: caller.traceparent } })).status,
        ).toBe(200);
      }
      expect((await fetch(`${logged.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
      const server = only(await spansOf(sampled.traceId, 2), SERVER);
      const lines = accessLines(log);
      expect(lines.map((line) => [line.trace_id, line.span_id])).toEqual([
        [sampled.traceId, server.spanId],
        [unsampled.traceId, undefined],
        // No caller, not sampled: no trace at all.
        [undefined, undefined],
      ]);
    } finally {
      await logged.close();
    }
  });
});

describe('the settings', () => {
  const load = (yaml: string, env: Record<string, string> = {}) => parseConfig(yaml, 'tokengate.yaml', env);
  const problemsOf = (yaml: string, env: Record<string, string> = {}) => {
    try {
      load(yaml, env);
      return [];
    } catch (error) {
      return (error as ConfigError).problems.map((problem) => `${problem.line ?? '-'} ${problem.path}: ${problem.message}`);
    }
  };

  it('refuses bad values by key and line, and bad OTEL_* variables by name, without quoting header values', () => {
    expect(problemsOf('tracing:\n  enabled: true\n  samplerRatio: 2\n')).toEqual([expect.stringMatching(/^3 tracing\.samplerRatio: /)]);
    expect(problemsOf('tracing:\n  endpoint: "ftp://collector"\n')).toEqual([expect.stringMatching(/^2 tracing\.endpoint: tracing\.endpoint must be an http/)]);
    expect(
      problemsOf('tracing:\n  enabled: true\n', {
        OTEL_TRACES_SAMPLER: 'sometimes',
        OTEL_TRACES_SAMPLER_ARG: 'half',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_HEADERS: 'api-key=sekrit-value,broken',
      }),
    ).toEqual([
      expect.stringContaining('OTEL_TRACES_SAMPLER (environment) must be one of'),
      expect.stringContaining('OTEL_TRACES_SAMPLER_ARG (environment) must be a number from 0 to 1, got "half"'),
      expect.stringContaining('OTEL_EXPORTER_OTLP_PROTOCOL (environment) asks for grpc'),
      expect.stringContaining('OTEL_EXPORTER_OTLP_HEADERS (environment) entry 2 is not key=value'),
    ]);
    expect(problemsOf('', { OTEL_EXPORTER_OTLP_HEADERS: 'api-key=sekrit-value,broken' }).join('\n')).not.toContain('sekrit');
  });
});

/** A DPoP proof (RFC 9449) for a GET of `url` with `token`, signed by `privateKey`. */
async function dpopProof(privateKey: CryptoKey, jwk: object, url: string, token: string): Promise<string> {
  return new SignJWT({ htm: 'GET', htu: url, jti: randomUUID(), ath: tokenDigest(token) })
    .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk })
    .setIssuedAt()
    .sign(privateKey);
}
