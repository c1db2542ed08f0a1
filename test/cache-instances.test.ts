import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CachedTokens } from '../src/store/cached.js';
import { tokenDigest } from '../src/token/token-value.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { clientCredentials, postForm, registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { observationsOf, valueOf } from './support/metrics.js';
import { eventually } from './support/wait.js';

// Two tokengate instances (two sidecars, each also an issuer) over one Redis prefix, over HTTP.
let userApi: Upstream;
let organizerApi: Upstream;
let a: RunningTokengate;
let b: RunningTokengate;
let application: TestApplication;

beforeAll(async () => {
  [userApi, organizerApi] = await Promise.all([startUpstream(), startUpstream()]);
  const routes = [
    { path: '/api/public/me', methods: ['GET'], token: 'user', scopes: ['public'], upstream: userApi.url },
    { path: '/api/public/events', methods: ['GET'], token: 'application', scopes: ['public'], upstream: organizerApi.url },
  ];
  a = await startTokengate('cache-instances', { config: { routes } });
  b = await startTokengate('cache-instances-b', { config: { routes }, sharing: a });
  await Promise.all([a, b].map(subscribed));
  application = await registerApplication(a.store);
});
afterAll(async () => {
  await Promise.all([b?.close(), userApi?.close(), organizerApi?.close()]);
  await a?.close();
});

/** Until its revocation subscription is up an instance reads every token from Redis; tests wait for it. */
async function subscribed(instance: RunningTokengate): Promise<void> {
  const tokens = instance.tokengate.context.store.tokens;
  expect(tokens).toBeInstanceOf(CachedTokens);
  await (tokens as CachedTokens).subscribed;
}

const metricsOf = (instance: RunningTokengate) => instance.tokengate.context.metrics;

async function issueThroughTokenEndpoint(instance: RunningTokengate): Promise<string> {
  const response = await postForm(`${instance.baseUrl}/oauth/token`, { grant_type: 'client_credentials', ...clientCredentials(application) });
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
}

function get(instance: RunningTokengate, path: string, token: string): Promise<Response> {
  return fetch(`${instance.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });
}

async function status(instance: RunningTokengate, path: string, token: string): Promise<number> {
  const response = await get(instance, path, token);
  await response.arrayBuffer();
  return response.status;
}

describe('two gateways sharing one Redis', () => {
  it("a token revoked through one instance's /oauth/revoke is refused by the other, which had it cached", async () => {
    const token = await issueThroughTokenEndpoint(a);
    expect(await status(b, '/api/public/events', token)).toBe(200);
    const hits = await valueOf(metricsOf(b).cacheHits);
    expect(await status(b, '/api/public/events', token)).toBe(200);
    expect(await valueOf(metricsOf(b).cacheHits)).toBe(hits + 1);

    const revoked = await postForm(`${a.baseUrl}/oauth/revoke`, { token, ...clientCredentials(application) });
    expect(revoked.status).toBe(200);
    await eventually(async () => (await status(b, '/api/public/events', token)) === 401);
    const refused = await get(b, '/api/public/events', token);
    expect(refused.status).toBe(401);
    expect(refused.headers.get('www-authenticate')).toMatch(/error="invalid_token"/);
    expect(await refused.json()).toMatchObject({ error: 'invalid_token' });
    expect(await valueOf(metricsOf(b).revocationMessages)).toBeGreaterThanOrEqual(1);
    expect(await observationsOf(metricsOf(b).revocationDelay)).toBeGreaterThanOrEqual(1);
  });

  it("a user's tokens revoked on one instance are refused by the other; another user's are not", async () => {
    const first = await a.issue({ userId: 'user-revoked' });
    const second = await a.issue({ userId: 'user-revoked', familyId: 'family-2' });
    const other = await a.issue({ userId: 'user-kept' });
    for (const token of [first, second, other]) expect(await status(b, '/api/public/me', token)).toBe(200);

    expect(await a.tokengate.context.store.tokens.revokeUserTokens('user-revoked')).toBe(2);
    await eventually(async () => (await status(b, '/api/public/me', first)) === 401 && (await status(b, '/api/public/me', second)) === 401);
    expect(await status(b, '/api/public/me', other)).toBe(200);
    // The instance that revoked never answered with the revoked tokens again, not even once.
    expect(await status(a, '/api/public/me', first)).toBe(401);
  });

  it('introspection on the other instance turns inactive as well', async () => {
    const token = await issueThroughTokenEndpoint(a);
    const active = async (instance: RunningTokengate) =>
      ((await (await postForm(`${instance.baseUrl}/oauth/introspect`, { token, ...clientCredentials(application) })).json()) as { active: boolean }).active;
    expect(await active(b)).toBe(true);
    await a.tokengate.context.store.tokens.revokeAccessToken(tokenDigest(token));
    await eventually(async () => !(await active(b)));
  });

  it('a token issued on one instance is accepted by the other at once', async () => {
    const token = await issueThroughTokenEndpoint(a);
    expect(await status(b, '/api/public/events', token)).toBe(200);
  });
});
