import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import {
  adminFetch,
  basicAuthorization,
  clientCredentials,
  issueAuthorizationCode,
  postForm,
  registerApplication,
  registerUser,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';
import { freePort } from './support/ports.js';
import { eventually } from './support/wait.js';

/**
 * Token exchange (RFC 8693): the tickets service, holding a user's token for its own API, trades
 * it for a token for the billing API on the user's behalf. Two sidecars of one deployment over
 * the shared Redis: the exchanged token is used at the second while the user's token is revoked
 * at the first.
 */

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

interface TokenAnswer {
  access_token: string;
  token_type: string;
  expires_in: number;
  refresh_token?: string;
  scope: string;
  issued_token_type?: string;
  error?: string;
  error_description?: string;
}

let upstream: Upstream;
let first: RunningTokengate;
let second: RunningTokengate;
let webApp: TestApplication;
let ticketsService: TestApplication;
let otherService: TestApplication;
let userId: string;
let ticketsApi: string;
let billingApi: string;

beforeAll(async () => {
  upstream = await startUpstream();
  const port = await freePort();
  const issuerUrl = `http://127.0.0.1:${port}`;
  ticketsApi = `${issuerUrl}/tickets`;
  billingApi = `${issuerUrl}/billing`;
  const config = {
    issuer: { issuerUrl, scopes: ['public', 'write'], defaultScopes: ['public'] },
    resources: [{ identifier: ticketsApi }, { identifier: billingApi }],
    routes: [
      { path: '/tickets', token: 'user', scopes: ['public'], upstream: upstream.url, resource: ticketsApi },
      { path: '/billing', token: 'user', scopes: ['public'], upstream: upstream.url, resource: billingApi, signedIdentity: 'beside' },
    ],
    signedIdentity: { enabled: true },
  };
  first = await startTokengate('token-exchange', { port, config });
  second = await startTokengate('token-exchange-2', { sharing: first, config });
  [webApp, ticketsService, otherService, userId] = await Promise.all([
    registerApplication(first.store, { scopes: ['public', 'write'] }),
    registerApplication(first.store, { scopes: ['public', 'write'] }),
    registerApplication(first.store, { scopes: ['public', 'write'] }),
    registerUser(first.store),
  ]);
  // The operator allows the tickets service, and it alone, to exchange tokens.
  const allowed = await adminFetch(first, `/applications/${encodeURIComponent(ticketsService.clientId)}`, {
    method: 'PATCH',
    body: JSON.stringify({ token_exchange: true }),
  });
  expect(allowed.status).toBe(200);
  expect(((await allowed.json()) as { token_exchange: boolean }).token_exchange).toBe(true);
});

afterAll(async () => {
  await second?.close();
  await first?.close();
  await upstream?.close();
});

/** The user signs in to the web app, which gets a token for the tickets API. */
async function userToken(scopes = ['public']): Promise<{ token: string; expiresIn: number }> {
  const { code } = await issueAuthorizationCode(first, webApp, userId, { scopes });
  const response = await postForm(`${first.baseUrl}/oauth/token`, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: webApp.redirectUri,
    resource: ticketsApi,
    ...clientCredentials(webApp),
  });
  expect(response.status).toBe(200);
  const answer = (await response.json()) as TokenAnswer;
  return { token: answer.access_token, expiresIn: answer.expires_in };
}

function exchange(client: TestApplication, parameters: Record<string, string | undefined>): Promise<Response> {
  return postForm(`${first.baseUrl}/oauth/token`, {
    grant_type: TOKEN_EXCHANGE,
    subject_token_type: ACCESS_TOKEN_TYPE,
    resource: billingApi,
    ...clientCredentials(client),
    ...parameters,
  });
}

async function refusal(response: Response): Promise<{ status: number; error: string | undefined }> {
  const body = (await response.json()) as TokenAnswer;
  return { status: response.status, error: body.error };
}

function call(sidecar: RunningTokengate, path: string, token: string): Promise<Response> {
  return fetch(`${sidecar.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });
}

describe('token exchange', () => {
  it('trades a user token for one for another resource; the upstream and introspection see who acted', async () => {
    const { token } = await userToken(['public', 'write']);
    const response = await exchange(ticketsService, { subject_token: token, scope: 'public' });
    expect(response.status).toBe(200);
    const exchanged = (await response.json()) as TokenAnswer;
    expect(exchanged.issued_token_type).toBe(ACCESS_TOKEN_TYPE);
    expect(exchanged.token_type).toBe('Bearer');
    expect(exchanged.scope).toBe('public');
    expect(exchanged.refresh_token).toBeUndefined();

    // For the billing API, not the tickets API.
    const forged = await fetch(`${second.baseUrl}/billing/invoices`, {
      headers: { authorization: `Bearer ${exchanged.access_token}`, 'x-auth-actor-client-id': 'someone-else', 'x-auth-user-id': 'someone-else' },
    });
    expect(forged.status).toBe(200);
    const seen = upstream.received.at(-1)!;
    expect(seen.headers['x-auth-user-id']).toBe(userId);
    expect(seen.headers['x-auth-client-id']).toBe(ticketsService.clientId);
    expect(seen.headers['x-auth-actor-client-id']).toBe(ticketsService.clientId);
    // The signed identity says so too (its signature is the signed identity tests' business).
    expect(decodeJwt(String(seen.headers['x-tokengate-identity']))).toMatchObject({ sub: userId, act: { client_id: ticketsService.clientId } });
    expect((await call(second, '/tickets/1', exchanged.access_token)).status).toBe(401);

    const introspection = await postForm(
      `${first.baseUrl}/oauth/introspect`,
      { token: exchanged.access_token },
      {
        authorization: basicAuthorization(ticketsService.clientId, ticketsService.clientSecret!),
      },
    );
    const described = (await introspection.json()) as Record<string, unknown>;
    expect(described).toMatchObject({ active: true, sub: userId, client_id: ticketsService.clientId, scope: 'public', aud: [billingApi] });
    expect(described.act).toEqual({ client_id: ticketsService.clientId });
  });

  it('revoking the user token ends the exchanged one on every sidecar, and a token exchanged from that', async () => {
    const { token } = await userToken();
    const exchanged = ((await (await exchange(ticketsService, { subject_token: token })).json()) as TokenAnswer).access_token;
    // Exchanged again, by the same service, for the tickets API: a chain of two.
    const chained = (await (await exchange(ticketsService, { subject_token: exchanged, resource: ticketsApi })).json()) as TokenAnswer;
    expect((await call(second, '/billing/a', exchanged)).status).toBe(200);
    expect((await call(second, '/tickets/a', chained.access_token)).status).toBe(200);
    const seen = upstream.received.at(-1)!;
    expect(seen.headers['x-auth-actor-client-id']).toBe(ticketsService.clientId);

    const revoked = await postForm(`${first.baseUrl}/oauth/revoke`, { token, ...clientCredentials(webApp) });
    expect(revoked.status).toBe(200);
    // The second sidecar held both in its token cache: the revocation feed tells it.
    await eventually(async () => (await call(second, '/billing/a', exchanged)).status === 401);
    await eventually(async () => (await call(second, '/tickets/a', chained.access_token)).status === 401);
    expect(await first.store.tokens.getAccessToken(tokenDigest(chained.access_token))).toBeNull();
  });

  it('an exchanged token never outlives its subject token', async () => {
    const { token, expiresIn } = await userToken();
    // A subject token with a minute left.
    const record = (await first.store.tokens.getAccessToken(tokenDigest(token)))!;
    const shortLived = await first.issue({ ...record, expiresAt: Date.now() + 60_000 });
    const answer = (await (await exchange(ticketsService, { subject_token: shortLived })).json()) as TokenAnswer;
    expect(answer.expires_in).toBeLessThanOrEqual(60);
    const exchanged = (await first.store.tokens.getAccessToken(tokenDigest(answer.access_token)))!;
    const subject = (await first.store.tokens.getAccessToken(tokenDigest(shortLived)))!;
    expect(exchanged.expiresAt).toBeLessThanOrEqual(subject.expiresAt);
    // A subject with the usual lifetime left: the usual lifetime.
    const usual = (await (await exchange(ticketsService, { subject_token: token })).json()) as TokenAnswer;
    expect(usual.expires_in).toBeLessThanOrEqual(expiresIn);
    expect(usual.expires_in).toBeGreaterThan(60);
  });

  it('refuses a client the operator did not allow, and a public client', async () => {
    const { token } = await userToken();
    expect(await refusal(await exchange(otherService, { subject_token: token }))).toEqual({ status: 400, error: 'unauthorized_client' });
    const publicClient = await registerApplication(first.store, { confidential: false });
    expect(await refusal(await exchange(publicClient, { subject_token: token }))).toEqual({ status: 400, error: 'unauthorized_client' });
    // The operator turns it off again.
    const off = await adminFetch(first, `/applications/${encodeURIComponent(otherService.clientId)}`, {
      method: 'PATCH',
      body: JSON.stringify({ token_exchange: 'yes' }),
    });
    expect(off.status).toBe(400);
  });

  it('refuses more scope than the subject token has', async () => {
    const { token } = await userToken(['public']);
    expect(await refusal(await exchange(ticketsService, { subject_token: token, scope: 'public write' }))).toEqual({ status: 400, error: 'invalid_scope' });
  });

  it('refuses a revoked, unknown or foreign subject token, and other token types', async () => {
    const { token } = await userToken();
    await first.store.tokens.revokeAccessToken(tokenDigest(token));
    expect(await refusal(await exchange(ticketsService, { subject_token: token }))).toEqual({ status: 400, error: 'invalid_grant' });
    expect(await refusal(await exchange(ticketsService, { subject_token: 'not-a-token-of-ours' }))).toEqual({ status: 400, error: 'invalid_grant' });
    const live = (await userToken()).token;
    expect(await refusal(await exchange(ticketsService, { subject_token: live, subject_token_type: 'urn:ietf:params:oauth:token-type:id_token' }))).toEqual({
      status: 400,
      error: 'invalid_request',
    });
    // An actor token of another client: nobody names another service as the one who acted.
    const othersToken = await first.issue({ clientId: otherService.clientId });
    expect(await refusal(await exchange(ticketsService, { subject_token: live, actor_token: othersToken, actor_token_type: ACCESS_TOKEN_TYPE }))).toEqual({
      status: 400,
      error: 'invalid_grant',
    });
    // A DPoP-bound subject token without a proof by its key: a thief cannot launder it into a Bearer token.
    const liveRecord = (await first.store.tokens.getAccessToken(tokenDigest(live)))!;
    const bound = await first.issue({ ...liveRecord, jkt: 'NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs' });
    expect(await refusal(await exchange(ticketsService, { subject_token: bound }))).toEqual({ status: 400, error: 'invalid_grant' });
    const ownToken = await first.issue({ clientId: ticketsService.clientId });
    expect((await exchange(ticketsService, { subject_token: live, actor_token: ownToken, actor_token_type: ACCESS_TOKEN_TYPE })).status).toBe(200);
  });

  it('refuses a resource neither of this issuer nor one the user’s application may reach', async () => {
    const { token } = await userToken();
    expect(await refusal(await exchange(ticketsService, { subject_token: token, resource: 'https://elsewhere.example/api' }))).toEqual({
      status: 400,
      error: 'invalid_target',
    });
    await first.store.applications.put({ ...(await first.store.applications.get(webApp.clientId))!, resources: [ticketsApi] });
    try {
      expect(await refusal(await exchange(ticketsService, { subject_token: token }))).toEqual({ status: 400, error: 'invalid_target' });
    } finally {
      await first.store.applications.put({ ...(await first.store.applications.get(webApp.clientId))!, resources: [] });
    }
  });

  it('is advertised in the metadata', async () => {
    const metadata = (await (await fetch(`${first.baseUrl}/.well-known/oauth-authorization-server`)).json()) as { grant_types_supported: string[] };
    expect(metadata.grant_types_supported).toContain(TOKEN_EXCHANGE);
  });
});
