import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ConfigError, parseConfig } from '../src/load-config.js';
import { loggerOptions } from '../src/observability/logger.js';
import { tokenDigest } from '../src/token/token-value.js';
import { APPLICATION_TOKEN, countingStore, startUpstream, USER_TOKEN, type Upstream } from './support/gateway.js';
import { exchange, type WireResponse } from './support/ingress.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { observationsOf, valueOf } from './support/metrics.js';
import { runCli, tempConfigs } from './support/cli.js';
import { acceptsConnections, freePort } from './support/ports.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';
import { eventually } from './support/wait.js';

/**
 * The decision listener on its own, asked the way each ingress asks (raw HTTP, headers exactly
 * as given), and compared with what the gateway answers for the same request.
 */

const REALM = 'ticketing';
type Endpoint = 'authRequest' | 'forwardAuth' | 'extAuthz';
const ENDPOINTS: Endpoint[] = ['authRequest', 'forwardAuth', 'extAuthz'];

let upstream: Upstream;
let running: RunningTokengate;
let decisionsPort: number;
let storeReads: { getAccessToken: number };
let tokens: { user: string; application: string; staff: string };

function routes(upstreamUrl: string) {
  return [
    { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', scopes: ['public'], upstream: upstreamUrl },
    { path: '/api/public/tickets', token: 'user', scopes: ['public'], upstream: upstreamUrl },
    { path: '/api/public/events', token: 'application', scopes: ['public'], upstream: upstreamUrl },
    { path: '/api/staff', token: 'any', scopes: ['public', 'staff'], upstream: upstreamUrl },
    { path: '/api/ingress-only', token: 'any', scopes: [] },
    { path: '/api/stream', methods: ['GET'], token: 'user', allowQueryTokenThroughIngress: true, upstream: upstreamUrl },
    { path: '/api/closed-stream', methods: ['GET'], token: 'user', allowQueryToken: false, allowQueryTokenThroughIngress: true, upstream: upstreamUrl },
  ];
}

beforeAll(async () => {
  upstream = await startUpstream();
  running = await startTokengate('decisions', {
    config: { gateway: { realm: REALM }, decisions: { enabled: true }, routes: routes(upstream.url) },
    wrap(store) {
      const counting = countingStore(store);
      storeReads = counting.calls;
      return counting.store;
    },
  });
  decisionsPort = Number(new URL(running.decisionsUrl!).port);
  tokens = {
    user: await running.issue(),
    application: await running.issue(APPLICATION_TOKEN),
    staff: await running.issue({ scopes: ['public', 'staff'] }),
  };
});

afterAll(async () => {
  await running?.close();
  await upstream?.close();
});

type Headers = Array<[string, string]>;
const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`];

/** Asks the decision listener about a request, the way the ingress of `endpoint` asks. */
function decide(endpoint: Endpoint, method: string, target: string, headers: Headers = [], port = decisionsPort, body = ''): Promise<WireResponse> {
  switch (endpoint) {
    case 'authRequest':
      return exchange(port, 'GET', '/auth-request', [['X-Original-Method', method], ['X-Original-URI', target], ...headers]);
    case 'forwardAuth':
      return exchange(port, 'GET', '/forward-auth', [
        ['X-Forwarded-Method', method],
        ['X-Forwarded-Uri', target],
        ['X-Forwarded-Host', 'api.test'],
        ...headers,
      ]);
    case 'extAuthz':
      return exchange(port, method, `/ext-authz${target}`, headers, body);
  }
}

/** What a client is told: everything but the body of a forwarded request, which is the upstream's. */
function told(response: WireResponse) {
  return {
    status: response.status,
    body: response.status === 200 ? null : response.json(),
    challenge: response.header('www-authenticate'),
    allow: response.header('allow'),
    retryAfter: response.header('retry-after'),
    cacheControl: response.status === 200 ? null : response.header('cache-control'),
  };
}

describe('the decision listener', () => {
  it('answers every endpoint exactly as the gateway answers the same request', async () => {
    const cases: Array<[string, string, Headers]> = [
      ['GET', '/api/public/me', [bearer(tokens.user)]],
      ['HEAD', '/api/public/me', [bearer(tokens.user)]],
      ['GET', '/api/public/me', [bearer(tokens.application)]],
      ['GET', '/api/public/me', []],
      ['GET', '/api/public/me', [['Authorization', 'Basic dXNlcjpwYXNz']]],
      ['GET', '/api/public/me', [bearer(`${tokens.user.slice(0, -4)}AAAA`)]],
      ['GET', '/api/public/me', [bearer(running.tokengate.context.minter.mint())]],
      ['GET', '/api/public/me', [bearer('not-a-token')]],
      ['GET', '/api/public/me', [['Authorization', 'Bearer a b']]],
      ['GET', '/api/public/me', [bearer(tokens.user), bearer(tokens.user)]],
      ['GET', '/api/public/me?ACCESS_TOKEN=x', [bearer(tokens.user)]],
      ['DELETE', '/api/public/me', [bearer(tokens.user)]],
      ['GET', '/api/nowhere', [bearer(tokens.user)]],
      ['GET', '/api/public/meow', [bearer(tokens.user)]],
      ['GET', '/api/public/me/../events', [bearer(tokens.user)]],
      ['GET', '/api/public/me/%2e%2e/events', [bearer(tokens.user)]],
      ['GET', '/api/public//events', [bearer(tokens.application)]],
      ['GET', '/api/public/events/%2Fx', [bearer(tokens.application)]],
      ['GET', '/api/public/%65vents', [bearer(tokens.user)]],
      ['GET', '/api/public/events', [bearer(tokens.application)]],
      ['POST', '/api/public/tickets', [bearer(tokens.user)]],
      ['GET', '/api/staff/rota', [bearer(tokens.staff)]],
      ['GET', '/api/staff/rota', [bearer(tokens.user)]],
    ];
    for (const [method, target, headers] of cases) {
      const gateway = told(await exchange(running.port, method, target, headers));
      for (const endpoint of ENDPOINTS) {
        const decision = told(await decide(endpoint, method, target, headers));
        expect({ endpoint, method, target, ...decision }).toEqual({ endpoint, method, target, ...gateway });
      }
    }
  });

  it('answers an allowed check 200 with every identity header, empty where it does not apply, and the request id', async () => {
    const user = await decide('authRequest', 'GET', '/api/public/me', [bearer(tokens.user), ['X-Request-Id', 'trace-7']]);
    expect({ status: user.status, body: user.body, length: user.header('content-length') }).toEqual({ status: 200, body: '', length: '0' });
    expect(
      Object.fromEntries(['x-auth-user-id', 'x-auth-client-id', 'x-auth-scope', 'x-auth-token-kind', 'x-request-id'].map((name) => [name, user.header(name)])),
    ).toEqual({
      'x-auth-user-id': USER_TOKEN.userId,
      'x-auth-client-id': USER_TOKEN.clientId,
      'x-auth-scope': 'public',
      'x-auth-token-kind': 'user',
      'x-request-id': 'trace-7',
    });
    // An ingress that copies only the headers present (Envoy) would otherwise keep a client's own user id.
    const application = await decide('extAuthz', 'GET', '/api/public/events', [bearer(tokens.application)]);
    expect(application.status).toBe(200);
    expect(application.all('x-auth-user-id')).toEqual(['']);
    expect(application.header('x-auth-token-kind')).toBe('application');
    expect(application.header('x-request-id')).toMatch(/^[A-Za-z0-9_-]{16}-[0-9a-z]+$/);
  });

  it("reads the original request from its endpoint's convention alone, never from another ingress's headers", async () => {
    const elsewhere: Headers = [
      ['X-Original-URI', '/api/public/me'],
      ['X-Original-Method', 'GET'],
      ['X-Forwarded-Uri', '/api/public/me'],
      ['X-Forwarded-Method', 'GET'],
    ];
    const onlyOwn = async (endpoint: Endpoint) => {
      const own = endpoint === 'authRequest' ? 'x-original-' : endpoint === 'forwardAuth' ? 'x-forwarded-' : null;
      return (
        await decide(endpoint, 'GET', '/api/public/events', [
          bearer(tokens.user),
          ...elsewhere.filter(([name]) => own === null || !name.toLowerCase().startsWith(own)),
        ])
      ).status;
    };
    // The user token may use /api/public/me, not /api/public/events: 403 shows which was checked.
    for (const endpoint of ENDPOINTS) expect({ endpoint, status: await onlyOwn(endpoint) }).toEqual({ endpoint, status: 403 });
    // The check request's own method and path do not count where the headers name the original.
    expect(
      (await exchange(decisionsPort, 'POST', '/auth-request', [['X-Original-Method', 'GET'], ['X-Original-URI', '/api/public/me'], bearer(tokens.user)]))
        .status,
    ).toBe(200);
    expect(
      (
        await exchange(decisionsPort, 'GET', '/forward-auth?x=1', [
          ['X-Forwarded-Method', 'DELETE'],
          ['X-Forwarded-Uri', '/api/public/me'],
          bearer(tokens.user),
        ])
      ).status,
    ).toBe(405);
  });

  it('refuses a check request that names no original request, and a path that is no endpoint', async () => {
    const noUri = await exchange(decisionsPort, 'GET', '/auth-request', [['X-Original-Method', 'GET'], bearer(tokens.user)]);
    expect({ status: noUri.status, body: noUri.json() }).toEqual({
      status: 400,
      body: {
        error: 'invalid_request',
        error_description: 'The check request names no original request: nginx must send X-Original-Method and X-Original-URI.',
      },
    });
    const noMethod = await exchange(decisionsPort, 'GET', '/forward-auth', [
      ['X-Forwarded-Uri', '/api/public/me'],
      ['X-Original-Method', 'GET'],
      bearer(tokens.user),
    ]);
    expect({ status: noMethod.status, body: noMethod.json() }).toEqual({
      status: 400,
      body: {
        error: 'invalid_request',
        error_description: 'The check request names no original request: the ingress must send X-Forwarded-Method and X-Forwarded-Uri.',
      },
    });
    for (const path of ['/', '/check', '/auth-requests', '/ext-authz', '/ext-authz?/api/public/me', '/api/public/me']) {
      const answer = await exchange(decisionsPort, 'GET', path, [bearer(tokens.user), ['X-Original-Method', 'GET'], ['X-Original-URI', '/api/public/me']]);
      expect({ path, status: answer.status, body: answer.json() }).toEqual({
        path,
        status: 404,
        body: {
          error: 'not_found',
          error_description: 'The decision listener answers on /auth-request (nginx), /forward-auth (Traefik, Caddy) and /ext-authz/... (Envoy).',
        },
      });
    }
  });

  it('puts the refusal body in a header on the nginx endpoint only (nginx drops the body of an auth answer)', async () => {
    const forged = bearer(`${tokens.user.slice(0, -4)}AAAA`);
    const forNginx = await decide('authRequest', 'GET', '/api/public/me', [forged]);
    expect(forNginx.header('x-tokengate-error-body')).toBe(forNginx.body);
    expect(forNginx.json()).toEqual({ error: 'invalid_token', error_description: 'The access token is invalid, expired or revoked.' });
    for (const endpoint of ['forwardAuth', 'extAuthz'] as const)
      expect((await decide(endpoint, 'GET', '/api/public/me', [forged])).header('x-tokengate-error-body')).toBeNull();
  });

  it('refuses a query token unless the route opts in (the ingress forwards the query as sent); never reads a body', async () => {
    const description = 'This route does not accept the access_token query parameter; send an Authorization header.';
    for (const endpoint of ENDPOINTS) {
      const refused = await decide(endpoint, 'GET', `/api/public/me?access_token=${tokens.user}`);
      expect({ endpoint, status: refused.status, body: refused.json() }).toEqual({
        endpoint,
        status: 400,
        body: { error: 'invalid_request', error_description: description },
      });
      expect((await decide(endpoint, 'GET', `/api/stream?access_token=${tokens.user}`)).status).toBe(200);
      // Both keys must allow it.
      expect((await decide(endpoint, 'GET', `/api/closed-stream?access_token=${tokens.user}`)).status).toBe(400);
      expect((await decide(endpoint, 'POST', `/api/stream?access_token=${tokens.user}`)).status).toBe(405);
    }
    // The gateway itself still takes the query token where allowQueryToken says so.
    expect((await exchange(running.port, 'GET', `/api/public/me?access_token=${tokens.user}`)).status).toBe(200);
    // Envoy can pass the body with the check (with_request_body); it is not read for a token.
    const form = await decide(
      'extAuthz',
      'POST',
      '/api/public/tickets',
      [['Content-Type', 'application/x-www-form-urlencoded']],
      decisionsPort,
      `access_token=${tokens.user}`,
    );
    expect({ status: form.status, challenge: form.header('www-authenticate') }).toEqual({
      status: 401,
      challenge: `Bearer realm="${REALM}", DPoP realm="${REALM}", algs="ES256 EdDSA Ed25519 RS256 PS256"`,
    });
  });

  it("decides a cached token from the cache, and refuses it once revoked, like the gateway's check", async () => {
    const token = await running.issue();
    const before = storeReads.getAccessToken;
    for (const endpoint of ENDPOINTS) expect((await decide(endpoint, 'GET', '/api/public/me', [bearer(token)])).status).toBe(200);
    expect((await exchange(running.port, 'GET', '/api/public/me', [bearer(token)])).status).toBe(200);
    expect(storeReads.getAccessToken - before).toBe(1);
    // Revoked through this instance's cache, as its revocation endpoint does (another sidecar's
    // revocation reaches it through the feed: test/cache-instances.test.ts).
    await running.tokengate.context.store.tokens.revokeAccessToken(tokenDigest(token));
    for (const endpoint of ENDPOINTS) expect((await decide(endpoint, 'GET', '/api/public/me', [bearer(token)])).status).toBe(401);
  });

  it('decides a route without upstreams, which the gateway answers 404 without forwarding', async () => {
    for (const endpoint of ENDPOINTS) expect((await decide(endpoint, 'GET', '/api/ingress-only/x', [bearer(tokens.application)])).status).toBe(200);
    const before = upstream.received.length;
    const gateway = await exchange(running.port, 'GET', '/api/ingress-only/x', [bearer(tokens.application)]);
    expect({ status: gateway.status, body: gateway.json() }).toEqual({
      status: 404,
      body: { error: 'not_found', error_description: 'This route is served through an ingress, not by this listener.' },
    });
    expect(upstream.received.length).toBe(before);
  });

  it('counts each decision by route, outcome and reason in its own metric, apart from the gateway', async () => {
    const metrics = running.tokengate.context.metrics;
    const count = (labels: Record<string, string>) => valueOf(metrics.decisions, labels);
    const snapshot = async () => ({
      allowed: await count({ route: '/api/public/me', outcome: 'allowed', reason: 'ok' }),
      forged: await count({ route: '/api/public/me', outcome: 'denied', reason: 'forged_token' }),
      notFound: await count({ route: '(none)', outcome: 'denied', reason: 'not_found' }),
      unknownEndpoint: await count({ route: '(none)', outcome: 'denied', reason: 'unknown_endpoint' }),
      gateway: await valueOf(metrics.gatewayRequests, { route: '/api/public/me', outcome: 'forwarded' }),
      durations: await observationsOf({
        get: async () => ({ values: (await metrics.decisionDuration.get()).values.filter((value) => value.labels.route === '/api/public/me') }),
      }),
    });
    const before = await snapshot();
    await decide('authRequest', 'GET', '/api/public/me', [bearer(tokens.user)]);
    await decide('forwardAuth', 'GET', '/api/public/me', [bearer(`${tokens.user.slice(0, -4)}AAAA`)]);
    await decide('extAuthz', 'GET', '/api/nowhere', [bearer(tokens.user)]);
    await exchange(decisionsPort, 'GET', '/nowhere');
    const after = await snapshot();
    const added = Object.fromEntries(Object.entries(after).map(([name, value]) => [name, value - before[name as keyof typeof before]]));
    expect(added).toEqual({ allowed: 1, forged: 1, notFound: 1, unknownEndpoint: 1, gateway: 0, durations: 2 });
    // Answers only the gateway gives are not decision series, and the other way round.
    const reasons = (await metrics.decisions.get()).values.map((value) => value.labels.reason);
    expect(reasons).not.toContain('upstream_timeout');
    expect(reasons).not.toContain('body_too_large');
    expect((await metrics.gatewayRequests.get()).values.map((value) => value.labels.reason)).not.toContain('unknown_endpoint');
  });
});

describe('decisions an ingress may cache', () => {
  const DEFAULT_SECONDS = 20;
  let cacheable: RunningTokengate;
  beforeAll(async () => {
    cacheable = await startTokengate('decisions-cacheable', {
      config: {
        decisions: { enabled: true, cacheSeconds: DEFAULT_SECONDS },
        rateLimits: { metered: { requestsPerSecond: 1_000, burst: 1_000 } },
        routes: [
          { path: '/api/bound', token: 'any', decisionCacheSeconds: 30 },
          { path: '/api/default', token: 'any' },
          { path: '/api/off', token: 'any', decisionCacheSeconds: 0 },
          { path: '/api/metered', token: 'any', rateLimit: 'metered' },
          { path: '/api/proof-required', token: 'any', dpop: 'required' },
        ],
      },
    });
  });
  afterAll(async () => {
    await cacheable?.close();
  });

  /** The cache mark and Cache-Control of one decision, asked on each endpoint (they must agree). */
  async function marks(target: string, headers: Headers) {
    const port = Number(new URL(cacheable.decisionsUrl!).port);
    const seen = [];
    for (const endpoint of ENDPOINTS) {
      const answer = await decide(endpoint, 'GET', target, headers, port);
      seen.push({ status: answer.status, seconds: answer.header('x-tokengate-cache-seconds'), cacheControl: answer.header('cache-control') });
    }
    expect(seen.slice(1)).toEqual([seen[0], seen[0]]);
    return seen[0]!;
  }

  it("marks an admitting decision reusable for the route's bound, or the default, and never past the token's expiry", async () => {
    const token = await cacheable.issue();
    expect(await marks('/api/bound/x', [bearer(token)])).toEqual({ status: 200, seconds: '30', cacheControl: 'no-store' });
    expect(await marks('/api/default', [bearer(token)])).toEqual({ status: 200, seconds: String(DEFAULT_SECONDS), cacheControl: 'no-store' });
    expect(await marks('/api/off', [bearer(token)])).toEqual({ status: 200, seconds: null, cacheControl: 'no-store' });
    // Whole seconds of the token's remaining life, rounded down; none when less than one is left.
    const shortLived = await cacheable.issue({ expiresAt: Date.now() + 5_900 });
    expect(await marks('/api/bound', [bearer(shortLived)])).toMatchObject({ status: 200, seconds: expect.stringMatching(/^[45]$/) });
    const expiring = await cacheable.issue({ expiresAt: Date.now() + 900 });
    expect(await marks('/api/bound', [bearer(expiring)])).toEqual({ status: 200, seconds: null, cacheControl: 'no-store' });
  });

  it('never marks a metered decision, a request with a DPoP header, or a refusal', async () => {
    const token = await cacheable.issue();
    expect(await marks('/api/metered', [bearer(token)])).toEqual({ status: 200, seconds: null, cacheControl: 'no-store' });
    expect(await marks('/api/bound', [bearer(token), ['DPoP', 'x.y.z']])).toEqual({ status: 200, seconds: null, cacheControl: 'no-store' });
    const refusals = [
      await marks('/api/bound', [bearer(`${token.slice(0, -4)}AAAA`)]),
      await marks('/api/bound', [bearer(cacheable.tokengate.context.minter.mint())]),
      await marks('/api/bound', []),
      await marks('/api/proof-required', [bearer(token)]),
      await marks('/api/nowhere', [bearer(token)]),
    ];
    expect(refusals).toEqual([401, 401, 401, 401, 404].map((status) => ({ status, seconds: null, cacheControl: 'no-store' })));
  });

  it('names the token of a reusable decision by its digest, never the token itself, and of no other decision', async () => {
    const port = Number(new URL(cacheable.decisionsUrl!).port);
    const token = await cacheable.issue();
    for (const endpoint of ENDPOINTS) {
      const reusable = await decide(endpoint, 'GET', '/api/bound', [bearer(token)], port);
      expect(reusable.header('x-tokengate-token-digest')).toBe(tokenDigest(token));
      expect(reusable.headers.some(([, value]) => value.includes(token))).toBe(false);
      for (const target of ['/api/off', '/api/metered'])
        expect((await decide(endpoint, 'GET', target, [bearer(token)], port)).header('x-tokengate-token-digest')).toBeNull();
    }
  });

  it('refuses, in tokengate check, a bound on a route whose every request must be checked, naming the key and its line', async () => {
    const configs = tempConfigs();
    try {
      const file = configs.write(
        [
          'store: { driver: memory }',
          'decisions: { enabled: true, cacheSeconds: 30 }',
          'rateLimits:',
          '  partners: { requestsPerSecond: 5, burst: 10 }',
          'routes:',
          '  - path: /api/public/events',
          '    rateLimit: partners',
          '    decisionCacheSeconds: 10',
          '  - path: /api/public/tickets',
          '    dpop: required',
          '    decisionCacheSeconds: 5',
          '  - path: /api/public/me',
          '    rateLimit: partners',
          '    decisionCacheSeconds: 0',
          '',
        ].join('\n'),
      );
      const result = await runCli(['check', '--config', file]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(`${file} has 2 problems:`);
      expect(result.stderr).toContain(
        "routes[0].decisionCacheSeconds (line 8): an ingress may not cache this route's decisions: its rate limit (rateLimit: partners) must meter every request; remove the key or set 0",
      );
      expect(result.stderr).toContain(
        "routes[1].decisionCacheSeconds (line 11): an ingress may not cache this route's decisions: with dpop: required every request carries a proof of its own, checked per request; remove the key or set 0",
      );
    } finally {
      configs.remove();
    }
  });
});

describe('the revocation feed (GET /revocations)', () => {
  let first: RunningTokengate;
  let second: RunningTokengate;
  let port: number;
  beforeAll(async () => {
    const config = {
      decisions: { enabled: true, cacheSeconds: 5 },
      routes: [
        { path: '/api/bound', token: 'any', decisionCacheSeconds: 45 },
        { path: '/api/default', token: 'any' },
      ],
    };
    first = await startTokengate('decisions-feed', { config });
    second = await startTokengate('decisions-feed-2', { config, sharing: first });
    port = Number(new URL(first.decisionsUrl!).port);
  });
  afterAll(async () => {
    await second?.close();
    await first?.close();
  });

  const poll = (cursor?: string) => exchange(port, 'GET', cursor === undefined ? '/revocations' : `/revocations?after=${encodeURIComponent(cursor)}`);
  const linesOf = (answer: WireResponse) => answer.body.split('\n').filter(Boolean);
  const cursorOf = (answer: WireResponse) => /^cursor (\S+)$/m.exec(answer.body)![1]!;

  /** The first answer once the listener hears the store's feed: where to start from. */
  async function start(): Promise<string> {
    let answer = await poll();
    await eventually(async () => (answer = await poll()).status === 200);
    // Nothing to continue from: the ingress must drop what it keeps. The longest bound of the routes says how long a revoked digest matters.
    expect(linesOf(answer)).toEqual([`cursor ${cursorOf(answer)}`, 'keep 45', 'reset']);
    expect(answer.header('cache-control')).toBe('no-store');
    return cursorOf(answer);
  }

  it('holds a poll until a token is revoked at any sidecar, and answers with its digest and the next cursor', async () => {
    const cursor = await start();
    const token = await first.issue({ userId: 'feed-user' });
    const held = poll(cursor);
    // Revoked at the other sidecar, by user: the store resolves it to the token's digest.
    const revokedAt = Date.now();
    await second.tokengate.context.store.tokens.revokeUserTokens('feed-user');
    const answer = await held;
    expect(Date.now() - revokedAt).toBeLessThan(1_500);
    expect(linesOf(answer)).toEqual([`cursor ${cursorOf(answer)}`, 'keep 45', `revoked ${tokenDigest(token)}`]);
    expect(cursorOf(answer)).not.toBe(cursor);
    // The old cursor is still known (an ingress that reloaded): the same digest again, at once.
    expect(linesOf(await poll(cursor))).toContain(`revoked ${tokenDigest(token)}`);
  });

  it('answers a quiet feed after its heartbeat with the same cursor, and any cursor it does not know with a reset', async () => {
    const cursor = await start();
    const quiet = await poll(cursor);
    expect(linesOf(quiet)).toEqual([`cursor ${cursor}`, 'keep 45']);
    for (const unknown of ['', 'garbage', `${cursor}9`, `other-epoch.0`, `${cursor.split('.')[0]}.-1`]) {
      expect(linesOf(await poll(unknown))).toEqual([`cursor ${cursor}`, 'keep 45', 'reset']);
    }
    // Another sidecar's cursor means nothing here: its epoch is its own.
    const otherPort = Number(new URL(second.decisionsUrl!).port);
    const otherCursor = cursorOf(await exchange(otherPort, 'GET', '/revocations'));
    expect(otherCursor.split('.')[0]).not.toBe(cursor.split('.')[0]);
    expect(linesOf(await poll(otherCursor))).toContain('reset');
    expect((await exchange(port, 'POST', '/revocations')).status).toBe(405);
  });
});

describe('the decision listener, off', () => {
  it('is off by default: no listener, no decision series', async () => {
    const off = await startTokengate('decisions-off', { config: { routes: routes(upstream.url).filter((route) => route.upstream !== undefined) } });
    try {
      expect(off.decisionsUrl).toBeNull();
      expect(off.tokengate.decisions).toBeNull();
      expect((await off.tokengate.context.metrics.decisions.get()).values).toEqual([]);
      expect((await off.tokengate.context.metrics.gatewayRequests.get()).values.length).toBeGreaterThan(10);
    } finally {
      await off.close();
    }
  });

  it('keeps routes without upstreams for when it is on, and its address apart from the other listeners', () => {
    const problemsOf = (config: Record<string, unknown>) => {
      try {
        parseConfig(stringify({ store: { driver: 'memory' }, ...config }), 'decisions.yaml', {});
        return [];
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        return error.problems.map((problem) => `${problem.path}: ${problem.message}`);
      }
    };
    const ingressOnly = [{ path: '/api/public/me', token: 'user' }];
    expect(problemsOf({ routes: ingressOnly })).toEqual([
      'routes[0].upstream: required key is missing (or give upstreams.user / upstreams.application; only with decisions.enabled may a route have neither)',
    ]);
    expect(problemsOf({ routes: ingressOnly, decisions: { enabled: true } })).toEqual([]);
    expect(problemsOf({ decisions: { enabled: true, host: '127.0.0.1', port: 8080 }, server: { host: '127.0.0.1', port: 8080 } })).toEqual([
      "decisions.port: the decision listener cannot share the public listener's address and port",
    ]);
    expect(problemsOf({ decisions: { enabled: true, port: 9090 } })).toEqual([
      "decisions.port: the decision listener cannot share the ops listener's address and port",
    ]);
    expect(problemsOf({ decisions: { enabled: false, port: 9090 } })).toEqual([]);
  });
});

describe('decision logs', () => {
  it('logs a store outage in the access log and a misconfigured ingress at warn, a client refusal not at all by default, and never a token', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const outage = await startTokengate('decisions-logs', {
      logger: pino(loggerOptions('debug'), sink),
      config: { decisions: { enabled: true }, routes: [{ path: '/api/public/me', token: 'user' }] },
      store: createTestRedisStore(uniquePrefix('decisions-logs'), { url: `redis://127.0.0.1:${await freePort()}`, commandTimeoutMs: 200 }),
    });
    const port = Number(new URL(outage.decisionsUrl!).port);
    const token = outage.tokengate.context.minter.mint();
    try {
      expect((await decide('authRequest', 'GET', '/api/public/me', [bearer(`${token.slice(0, -4)}AAAA`), ['X-Request-Id', 'forged-1']], port)).status).toBe(
        401,
      );
      expect((await decide('authRequest', 'GET', '/api/public/me', [bearer(token), ['X-Request-Id', 'outage-1']], port)).status).toBe(503);
      expect((await exchange(port, 'GET', '/forward-auth', [['X-Request-Id', 'misconfigured-1']])).status).toBe(400);
    } finally {
      await outage.close();
    }
    expect(await acceptsConnections(port)).toBe(false);
    const entries = lines.map((line) => JSON.parse(line) as { level: number; msg: string; reason?: string; reqId?: string; listener?: string });
    expect(
      entries.filter((entry) => entry.reason !== undefined).map(({ level, msg, reason, reqId, listener }) => ({ level, msg, reason, reqId, listener })),
    ).toEqual([
      { level: 40, msg: 'request completed', reason: 'store_unavailable', reqId: 'outage-1', listener: 'decisions' },
      {
        level: 40,
        msg: 'the ingress did not ask as the decision listener expects',
        reason: 'missing_original_request',
        reqId: 'misconfigured-1',
        listener: 'decisions',
      },
    ]);
    expect(lines.join('\n')).not.toContain(token.slice(0, 20));
  });
});
