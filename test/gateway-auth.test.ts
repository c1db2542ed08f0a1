import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest } from '../src/token/token-value.js';
import { createTestRedisStore, rawRedis, uniquePrefix } from './support/redis.js';
import { APPLICATION_TOKEN, countingStore, startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';

/**
 * Who may reach which route, and every error the gateway answers with: status, the exact
 * WWW-Authenticate of RFC 6750 section 3, the JSON body and Cache-Control: no-store.
 */

const REALM = 'ticketing';
const CHALLENGE = `Bearer realm="${REALM}"`;
/** No token on a route that takes Bearer and DPoP: both bare challenges, Bearer first (RFC 9449 section 7.1). */
const MISSING_TOKEN_CHALLENGE = `${CHALLENGE}, DPoP realm="${REALM}", algs="ES256 EdDSA Ed25519 RS256 PS256"`;
const INVALID_TOKEN_CHALLENGE = `${CHALLENGE}, error="invalid_token", error_description="The access token is invalid, expired or revoked."`;
const INVALID_TOKEN_BODY = { error: 'invalid_token', error_description: 'The access token is invalid, expired or revoked.' };

let userApi: Upstream;
let organizerApi: Upstream;
let gateway: RunningTokengate;
let calls: { getAccessToken: number };

function routes(user: string, organizer: string) {
  return [
    { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', scopes: ['public'], upstream: user },
    { path: '/api/public/tickets', token: 'user', scopes: ['public'], upstream: user },
    { path: '/api/public/events', token: 'application', scopes: ['public'], upstream: organizer },
    { path: '/api/staff', token: 'any', scopes: ['public', 'staff'], upstreams: { user, application: organizer } },
    { path: '/api/feed', token: 'any', scopes: [], upstream: user, allowQueryToken: false, allowBodyToken: false },
  ];
}

beforeAll(async () => {
  [userApi, organizerApi] = await Promise.all([startUpstream(), startUpstream()]);
  gateway = await startTokengate('gateway-auth', {
    config: { gateway: { realm: REALM }, routes: routes(userApi.url, organizerApi.url) },
    wrap(store) {
      const counting = countingStore(store);
      calls = counting.calls;
      return counting.store;
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all([userApi?.close(), organizerApi?.close()]);
});

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

async function call(path: string, init: RequestInit & { token?: string } = {}): Promise<Answer> {
  const headers = new Headers(init.headers);
  if (init.token !== undefined) headers.set('authorization', `Bearer ${init.token}`);
  const response = await fetch(`${gateway.baseUrl}${path}`, { ...init, headers });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, headers: response.headers, body };
}

/** Asserts a gateway error: status, body, no-store, and the exact challenge (or none). */
function expectError(answer: Answer, status: number, body: { error: string; error_description?: string }, challenge: string | null) {
  expect(answer.status).toBe(status);
  expect(answer.body).toEqual(body.error_description === undefined ? { error: body.error, error_description: expect.any(String) } : body);
  expect(answer.headers.get('cache-control')).toBe('no-store');
  expect(answer.headers.get('content-type')).toMatch(/^application\/json/);
  expect(answer.headers.get('www-authenticate')).toBe(challenge);
}

/** Counts requests the upstreams receive during `action`. */
async function upstreamRequestsDuring(action: () => Promise<unknown>): Promise<number> {
  const before = userApi.received.length + organizerApi.received.length;
  await action();
  return userApi.received.length + organizerApi.received.length - before;
}

describe('routing by token kind and scope', () => {
  it('sends each token only where its kind and scopes allow, and each route to its own upstream', async () => {
    const tokens = {
      user: await gateway.issue(),
      application: await gateway.issue(APPLICATION_TOKEN),
      userWithoutScopes: await gateway.issue({ scopes: [] }),
      userStaff: await gateway.issue({ scopes: ['public', 'staff'] }),
      applicationStaff: await gateway.issue({ ...APPLICATION_TOKEN, scopes: ['staff', 'public'] }),
      applicationOther: await gateway.issue({ ...APPLICATION_TOKEN, scopes: ['other'] }),
    };
    type Kind = keyof typeof tokens;
    const expectations: Array<[string, Kind, number, Upstream | null]> = [
      ['/api/public/me', 'user', 200, userApi],
      ['/api/public/me', 'application', 403, null],
      ['/api/public/me', 'userWithoutScopes', 403, null],
      ['/api/public/tickets/7', 'user', 200, userApi],
      ['/api/public/tickets', 'applicationStaff', 403, null],
      ['/api/public/events', 'application', 200, organizerApi],
      ['/api/public/events/3/seats', 'applicationStaff', 200, organizerApi],
      ['/api/public/events', 'user', 403, null],
      ['/api/public/events', 'userStaff', 403, null],
      ['/api/public/events', 'applicationOther', 403, null],
      ['/api/staff/rota', 'userStaff', 200, userApi],
      ['/api/staff/rota', 'applicationStaff', 200, organizerApi],
      ['/api/staff/rota', 'user', 403, null],
      ['/api/staff/rota', 'application', 403, null],
      ['/api/feed', 'userWithoutScopes', 200, userApi],
      ['/api/feed', 'applicationOther', 200, userApi],
    ];
    for (const [path, kind, status, upstream] of expectations) {
      const before = { user: userApi.received.length, organizer: organizerApi.received.length };
      const answer = await call(path, { token: tokens[kind] });
      expect({ path, kind, status: answer.status }).toEqual({ path, kind, status });
      const reached = { user: userApi.received.length - before.user, organizer: organizerApi.received.length - before.organizer };
      expect({ path, kind, reached }).toEqual({ path, kind, reached: { user: upstream === userApi ? 1 : 0, organizer: upstream === organizerApi ? 1 : 0 } });
      if (upstream !== null) expect(upstream.received.at(-1)!.url).toBe(path);
    }
  });

  it("answers a wrong token kind with 403 insufficient_scope naming the route's scopes", async () => {
    const application = await gateway.issue(APPLICATION_TOKEN);
    const description = 'This route requires a user token.';
    expectError(
      await call('/api/public/me', { token: application }),
      403,
      { error: 'insufficient_scope', error_description: description },
      `${CHALLENGE}, error="insufficient_scope", error_description="${description}", scope="public"`,
    );
    const user = await gateway.issue();
    const toOrganizer = 'This route requires an application token.';
    expectError(
      await call('/api/public/events', { token: user }),
      403,
      { error: 'insufficient_scope', error_description: toOrganizer },
      `${CHALLENGE}, error="insufficient_scope", error_description="${toOrganizer}", scope="public"`,
    );
  });

  it('answers a missing scope with 403 insufficient_scope and scope="..." listing every required scope', async () => {
    const user = await gateway.issue({ scopes: ['public'] });
    const description = 'The access token does not grant access to this resource.';
    expectError(
      await call('/api/staff/x', { token: user }),
      403,
      { error: 'insufficient_scope', error_description: description },
      `${CHALLENGE}, error="insufficient_scope", error_description="${description}", scope="public staff"`,
    );
  });
});

describe('missing and invalid tokens', () => {
  it('answers a request without a token with 401 and the bare Bearer challenge, the DPoP one beside it', async () => {
    const answer = await call('/api/public/me');
    expectError(answer, 401, { error: 'invalid_token', error_description: 'An access token is required.' }, MISSING_TOKEN_CHALLENGE);
    // A credential of another scheme is not a bearer token: the same bare challenges (RFC 6750 3.1).
    expectError(
      await call('/api/public/me', { headers: { authorization: 'Basic dXNlcjpwYXNz' } }),
      401,
      { error: 'invalid_token', error_description: 'An access token is required.' },
      MISSING_TOKEN_CHALLENGE,
    );
  });

  it('answers unknown, revoked and expired tokens with 401 invalid_token', async () => {
    const unknown = gateway.tokengate.context.minter.mint();
    expectError(await call('/api/public/me', { token: unknown }), 401, INVALID_TOKEN_BODY, INVALID_TOKEN_CHALLENGE);

    const revoked = await gateway.issue();
    expect((await call('/api/public/me', { token: revoked })).status).toBe(200);
    // Revoked through this instance's cache, as its revocation endpoint does (another sidecar's
    // revocation reaches it through the feed: test/cache-instances.test.ts).
    await gateway.tokengate.context.store.tokens.revokeAccessToken(tokenDigest(revoked));
    expectError(await call('/api/public/me', { token: revoked }), 401, INVALID_TOKEN_BODY, INVALID_TOKEN_CHALLENGE);

    // Two seconds of life: admitted at once even on a loaded machine, refused once it has passed.
    const expiresAt = Date.now() + 2_000;
    const expiring = await gateway.issue({ expiresAt });
    expect((await call('/api/public/me', { token: expiring })).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, expiresAt + 10 - Date.now()));
    expectError(await call('/api/public/me', { token: expiring }), 401, INVALID_TOKEN_BODY, INVALID_TOKEN_CHALLENGE);
  });

  it('refuses a record past its expiresAt even when the store still returns it (a stale cache entry)', async () => {
    const token = gateway.tokengate.context.minter.mint();
    const redis = rawRedis();
    try {
      // Written behind the store's back with a long TTL: the store returns it, the record says it expired.
      await redis.set(
        `${gateway.prefix}at:${tokenDigest(token)}`,
        JSON.stringify({ ...APPLICATION_TOKEN, kind: 'user', userId: 'u', issuedAt: Date.now() - 10_000, expiresAt: Date.now() - 1 }),
        'PX',
        60_000,
      );
      expect(await gateway.store.tokens.getAccessToken(tokenDigest(token))).not.toBeNull();
      expectError(await call('/api/public/me', { token }), 401, INVALID_TOKEN_BODY, INVALID_TOKEN_CHALLENGE);
    } finally {
      redis.disconnect();
    }
  });

  it('refuses forged and malformed tokens with 401 without a store call, counting forged ones', async () => {
    const foreign = createTokenMinter(decodeTagKey(generateTagKey())).mint();
    const minted = gateway.tokengate.context.minter.mint();
    const forgedBefore = await metricValue('tokengate_forged_tokens_total');
    const storeCallsBefore = calls.getAccessToken;
    const reached = await upstreamRequestsDuring(async () => {
      for (const token of [
        foreign,
        'abc',
        'a.b~c+d/e==',
        'x'.repeat(43),
        minted.slice(0, 42),
        `${minted}A`,
        minted.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')),
      ]) {
        expectError(await call('/api/public/me', { token }), 401, INVALID_TOKEN_BODY, INVALID_TOKEN_CHALLENGE);
      }
      // the same in the query string
      expectError(await call(`/api/public/me?access_token=${foreign}`), 401, INVALID_TOKEN_BODY, INVALID_TOKEN_CHALLENGE);
    });
    expect(reached).toBe(0);
    expect(calls.getAccessToken - storeCallsBefore).toBe(0);
    // foreign, 'x' * 43, the altered one and the query one have the right shape but not this deployment's tag
    expect((await metricValue('tokengate_forged_tokens_total')) - forgedBefore).toBe(4);
  });
});

describe('malformed and ambiguous credentials', () => {
  it('answers a malformed Bearer header with 400 invalid_request (RFC 6750 3.1)', async () => {
    const token = await gateway.issue();
    const description = 'The Authorization header or access_token parameter is not a valid bearer credential.';
    const challenge = `${CHALLENGE}, error="invalid_request", error_description="${description}"`;
    for (const value of [
      'Bearer',
      'Bearer ',
      `Bearer ${token} ${token}`,
      `Bearer ${token},`,
      `Bearer\t${token}`,
      `Bearer "${token}"`,
      `Bearer ${token}=x`,
      `Bearer tok@en`,
      'bearer \u00e9',
    ]) {
      const answer = await rawAuthorization(value);
      expect({ value, status: answer.status }).toEqual({ value, status: 400 });
      expect(answer.body).toEqual({ error: 'invalid_request', error_description: description });
      expect(answer.challenge).toBe(challenge);
      expect(answer.cacheControl).toBe('no-store');
    }
  });

  it('accepts the scheme in any case and one or more spaces before the token', async () => {
    const token = await gateway.issue();
    for (const value of [`bearer ${token}`, `BEARER ${token}`, `BeArEr   ${token}`]) {
      expect((await rawAuthorization(value)).status).toBe(200);
    }
  });

  it('answers two methods at once, a repeated parameter or two Authorization headers with 400 invalid_request', async () => {
    const token = await gateway.issue();
    const other = await gateway.issue();
    const description = 'The access token must be presented once, by exactly one method.';
    const challenge = `${CHALLENGE}, error="invalid_request", error_description="${description}"`;
    const body = { error: 'invalid_request', error_description: description };
    const reached = await upstreamRequestsDuring(async () => {
      expectError(await call(`/api/public/me?access_token=${token}`, { token }), 400, body, challenge);
      expectError(await call(`/api/public/me?access_token=${token}&access_token=${token}`), 400, body, challenge);
      expectError(await call(`/api/public/me?access_token=${token}&access%5Ftoken=${other}`), 400, body, challenge);
      const form = new URLSearchParams({ access_token: token, name: 'x' });
      expectError(await call('/api/public/tickets', { method: 'POST', token: other, body: form }), 400, body, challenge);
      expectError(
        await call('/api/public/tickets', {
          method: 'POST',
          body: `access_token=${token}&access_token=${other}`,
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
        }),
        400,
        body,
        challenge,
      );
      expectError(
        await call('/api/public/tickets', {
          method: 'POST',
          token,
          body: JSON.stringify({ access_token: other }),
          headers: { 'content-type': 'application/json' },
        }),
        400,
        body,
        challenge,
      );
      const twoHeaders = await new Promise<number>((resolve, reject) => {
        const outgoing = httpRequest(
          `${gateway.baseUrl}/api/public/me`,
          { headers: ['authorization', `Bearer ${token}`, 'Authorization', `Bearer ${other}`] },
          (response) => {
            response.resume();
            resolve(response.statusCode!);
          },
        );
        outgoing.on('error', reject);
        outgoing.end();
      });
      expect(twoHeaders).toBe(400);
    });
    expect(reached).toBe(0);
  });

  it('accepts access_token in the query of GET and HEAD only, and only on routes that allow it', async () => {
    const token = await gateway.issue();
    expect((await call(`/api/public/me?access_token=${token}`)).status).toBe(200);
    expect((await call(`/api/public/me?access_token=${token}`, { method: 'HEAD' })).status).toBe(200);
    const onPost = 'The access_token query parameter is accepted on GET and HEAD requests only.';
    expectError(
      await call(`/api/public/tickets?access_token=${token}`, { method: 'POST' }),
      400,
      { error: 'invalid_request', error_description: onPost },
      `${CHALLENGE}, error="invalid_request", error_description="${onPost}"`,
    );
    const refused = 'This route does not accept the access_token query parameter; send an Authorization header.';
    expectError(
      await call(`/api/feed?access_token=${token}`),
      400,
      { error: 'invalid_request', error_description: refused },
      `${CHALLENGE}, error="invalid_request", error_description="${refused}"`,
    );
    // An empty value is malformed, not missing.
    expect((await call('/api/public/me?access_token=')).status).toBe(400);
  });

  it('takes access_token from a form or JSON POST body only where the route accepts body tokens', async () => {
    const token = await gateway.issue();
    expect((await call('/api/public/tickets', { method: 'POST', body: new URLSearchParams({ access_token: token }) })).status).toBe(200);
    expect(
      (
        await call('/api/public/tickets', {
          method: 'POST',
          body: JSON.stringify({ access_token: token }),
          headers: { 'content-type': 'application/json; charset=utf-8' },
        })
      ).status,
    ).toBe(200);
    // /api/feed does not read bodies: the parameter is just payload, so there is no credential.
    expect((await call('/api/feed', { method: 'POST', body: new URLSearchParams({ access_token: token }) })).status).toBe(401);
    // Other methods and other media types are not read either.
    expect((await call('/api/public/tickets', { method: 'PUT', body: new URLSearchParams({ access_token: token }) })).status).toBe(401);
    expect((await call('/api/public/tickets', { method: 'POST', body: `access_token=${token}`, headers: { 'content-type': 'text/plain' } })).status).toBe(401);
  });
});

describe('route and method errors', () => {
  it('answers a method the route does not list with 405 and Allow, before any token work', async () => {
    const storeCallsBefore = calls.getAccessToken;
    const answer = await call('/api/public/me', { method: 'POST', token: await gateway.issue() });
    expectError(answer, 405, { error: 'method_not_allowed', error_description: 'This route does not accept this method.' }, null);
    expect(answer.headers.get('allow')).toBe('GET, HEAD');
    expect(calls.getAccessToken).toBe(storeCallsBefore);
  });

  it('answers a path no route matches with 404 JSON and never forwards it', async () => {
    const token = await gateway.issue();
    const reached = await upstreamRequestsDuring(async () => {
      for (const path of ['/', '/api', '/api/public', '/api/public/meow', '/api/public/eventsx', '/API/public/me', '/api/Public/me']) {
        expectError(await call(path, { token }), 404, { error: 'not_found', error_description: 'No route matches this path.' }, null);
      }
    });
    expect(reached).toBe(0);
  });

  it("returns the request id on errors: the client's when it sent one, a fresh one otherwise", async () => {
    const kept = await call('/api/public/me', { headers: { 'x-request-id': 'trace-abc-123' } });
    expect(kept.headers.get('x-request-id')).toBe('trace-abc-123');
    const generated = await call('/api/public/me');
    expect(generated.headers.get('x-request-id')).toMatch(/^[A-Za-z0-9_-]{16}-[0-9a-z]+$/);
  });
});

describe('an unreachable token store', () => {
  it('answers 503 with Retry-After, never 401, and forwards nothing', async () => {
    const prefix = uniquePrefix('gateway-store-down');
    const unreachable = createTestRedisStore(prefix, { url: 'redis://127.0.0.1:1', commandTimeoutMs: 200 });
    const upstream = await startUpstream();
    const down = await startTokengate('gateway-store-down', {
      config: { gateway: { realm: REALM }, routes: [{ path: '/api/public/me', token: 'user', upstream: upstream.url }] },
      store: unreachable,
    });
    try {
      const token = down.tokengate.context.minter.mint();
      const response = await fetch(`${down.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
      expect(response.status).toBe(503);
      expect(response.headers.get('retry-after')).toBe('1');
      expect(response.headers.get('cache-control')).toBe('no-store');
      expect(response.headers.get('www-authenticate')).toBeNull();
      expect(await response.json()).toEqual({ error: 'temporarily_unavailable', error_description: 'The token store is unreachable; try again shortly.' });
      // A forged token still needs no store: 401 as usual.
      const forged = await fetch(`${down.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${'A'.repeat(43)}` } });
      expect(forged.status).toBe(401);
      expect(upstream.received).toHaveLength(0);
    } finally {
      await down.close();
      await upstream.close();
    }
  });
});

describe('metrics', () => {
  it('counts every decision by route, outcome and stable reason', async () => {
    const token = await gateway.issue();
    const before = await metricValue('tokengate_gateway_requests_total', { route: '/api/public/me', outcome: 'forwarded', reason: 'ok' });
    const missingBefore = await metricValue('tokengate_gateway_requests_total', { route: '/api/public/me', outcome: 'denied', reason: 'token_missing' });
    const notFoundBefore = await metricValue('tokengate_gateway_requests_total', { route: '(none)', outcome: 'denied', reason: 'not_found' });
    await call('/api/public/me', { token });
    await call('/api/public/me');
    await call('/nowhere');
    expect(await metricValue('tokengate_gateway_requests_total', { route: '/api/public/me', outcome: 'forwarded', reason: 'ok' })).toBe(before + 1);
    expect(await metricValue('tokengate_gateway_requests_total', { route: '/api/public/me', outcome: 'denied', reason: 'token_missing' })).toBe(
      missingBefore + 1,
    );
    expect(await metricValue('tokengate_gateway_requests_total', { route: '(none)', outcome: 'denied', reason: 'not_found' })).toBe(notFoundBefore + 1);
  });
});

async function metricValue(name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = await gateway.tokengate.context.metrics.registry.getSingleMetric(name)!.get();
  const value = metric.values.find((entry) => Object.entries(labels).every(([key, expected]) => entry.labels[key] === expected));
  return value?.value ?? 0;
}

/** Sends one Authorization header value byte for byte (fetch would refuse or normalize some). */
function rawAuthorization(value: string): Promise<{ status: number; body: unknown; challenge: string | undefined; cacheControl: string | undefined }> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest(
      `${gateway.baseUrl}/api/public/me`,
      { headers: { authorization: Buffer.from(value, 'utf8').toString('latin1') } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({
            status: response.statusCode!,
            body: text === '' ? null : JSON.parse(text),
            challenge: response.headers['www-authenticate'],
            cacheControl: response.headers['cache-control'],
          });
        });
      },
    );
    outgoing.on('error', reject);
    outgoing.end();
  });
}
