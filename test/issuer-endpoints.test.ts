import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeBlocks, readDocument, sectionOf, tableUnder } from './support/markdown.js';
import { s256CodeChallenge } from '../src/issuer/pkce.js';
import { tokenDigest } from '../src/token/token-value.js';
import {
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

let running: RunningTokengate;
let app: TestApplication;
let otherApp: TestApplication;
let publicApp: TestApplication;
let userId: string;

beforeAll(async () => {
  running = await startTokengate('issuer-endpoints', { config: { issuer: { issuerUrl: 'https://auth.example.com/', scopes: ['public', 'write'] } } });
  app = await registerApplication(running.store, { scopes: ['public', 'write'] });
  otherApp = await registerApplication(running.store);
  publicApp = await registerApplication(running.store, { confidential: false });
  userId = await registerUser(running.store);
});
afterAll(async () => {
  await running.close();
});

interface Tokens {
  access_token: string;
  refresh_token?: string;
}

async function userTokens(application: TestApplication, scopes = ['public']): Promise<Tokens> {
  const verifier = randomBytes(32).toString('base64url');
  const { code } = await issueAuthorizationCode(running, application, userId, {
    scopes,
    codeChallenge: s256CodeChallenge(verifier),
    codeChallengeMethod: 'S256',
  });
  const response = await postForm(`${running.baseUrl}/oauth/token`, {
    grant_type: 'authorization_code',
    code,
    code_verifier: verifier,
    redirect_uri: application.redirectUri,
    ...clientCredentials(application),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as Tokens;
}

async function applicationToken(application: TestApplication): Promise<string> {
  const response = await postForm(`${running.baseUrl}/oauth/token`, { grant_type: 'client_credentials', ...clientCredentials(application) });
  return ((await response.json()) as Tokens).access_token;
}

const revoke = (application: TestApplication, token: string, hint?: string) =>
  postForm(`${running.baseUrl}/oauth/revoke`, { token, token_type_hint: hint, ...clientCredentials(application) });

const introspect = (application: TestApplication, token: string, hint?: string) =>
  postForm(`${running.baseUrl}/oauth/introspect`, { token, token_type_hint: hint, ...clientCredentials(application) });

const tokenInfo = (authorization?: string) => fetch(`${running.baseUrl}/oauth/token/info`, { headers: authorization === undefined ? {} : { authorization } });

/** A value of the right shape without this deployment's tag, which the store nevertheless holds: only the tag check refuses it. */
async function storedForgery(application: TestApplication): Promise<string> {
  const forged = randomBytes(32).toString('base64url');
  await running.store.tokens.saveAccessToken(tokenDigest(forged), {
    kind: 'application',
    clientId: application.clientId,
    userId: null,
    scopes: ['public'],
    familyId: null,
    issuedAt: Date.now(),
    expiresAt: Date.now() + 60_000,
  });
  return forged;
}

const isLive = async (token: string) => (await running.store.tokens.getAccessToken(tokenDigest(token))) !== null;

async function expectRevoked200(response: Response): Promise<void> {
  expect(response.status).toBe(200);
  expect(await response.text()).toBe('');
  expect(response.headers.get('cache-control')).toBe('no-store');
}

describe('POST /oauth/revoke (RFC 7009)', () => {
  it('revokes an access token, with or without a hint, leaving its refresh token', async () => {
    const tokens = await userTokens(app);
    await expectRevoked200(await revoke(app, tokens.access_token, 'access_token'));
    expect(await isLive(tokens.access_token)).toBe(false);
    expect(await running.store.tokens.getRefreshToken(tokenDigest(tokens.refresh_token!))).not.toBeNull();
    const application = await applicationToken(app);
    // A wrong hint only changes the search order.
    await expectRevoked200(await revoke(app, application, 'refresh_token'));
    expect(await isLive(application)).toBe(false);
  });

  it('revokes a refresh token together with the access tokens of its grant', async () => {
    const tokens = await userTokens(app);
    const unrelated = await userTokens(app);
    await expectRevoked200(await revoke(app, tokens.refresh_token!));
    expect(await running.store.tokens.getRefreshToken(tokenDigest(tokens.refresh_token!))).toBeNull();
    expect(await isLive(tokens.access_token)).toBe(false);
    expect(await isLive(unrelated.access_token)).toBe(true);
  });

  it('answers 200 for unknown, forged, already revoked tokens and unknown hints', async () => {
    await expectRevoked200(await revoke(app, running.tokengate.context.minter.mint()));
    await expectRevoked200(await revoke(app, randomBytes(32).toString('base64url')));
    await expectRevoked200(await revoke(app, 'x'));
    const forged = await storedForgery(app);
    await expectRevoked200(await revoke(app, forged));
    expect(await isLive(forged)).toBe(true);
    const tokens = await userTokens(app);
    await expectRevoked200(await revoke(app, tokens.access_token, 'id_token'));
    expect(await isLive(tokens.access_token)).toBe(false);
    await expectRevoked200(await revoke(app, tokens.access_token));
  });

  it("answers 200 for another client's token and does not revoke it", async () => {
    const tokens = await userTokens(app);
    await expectRevoked200(await revoke(otherApp, tokens.access_token));
    await expectRevoked200(await revoke(otherApp, tokens.refresh_token!));
    expect(await isLive(tokens.access_token)).toBe(true);
    expect(await running.store.tokens.getRefreshToken(tokenDigest(tokens.refresh_token!))).not.toBeNull();
  });

  it('lets a public client revoke its own tokens with its client_id', async () => {
    const tokens = await userTokens(publicApp);
    await expectRevoked200(await postForm(`${running.baseUrl}/oauth/revoke`, { token: tokens.refresh_token, client_id: publicApp.clientId }));
    expect(await isLive(tokens.access_token)).toBe(false);
  });

  it('requires client authentication and the token parameter', async () => {
    const tokens = await userTokens(app);
    const anonymous = await postForm(`${running.baseUrl}/oauth/revoke`, { token: tokens.access_token });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toBe('Basic realm="tokengate"');
    const wrongSecret = await postForm(`${running.baseUrl}/oauth/revoke`, { token: tokens.access_token, client_id: app.clientId, client_secret: 'wrong' });
    expect(wrongSecret.status).toBe(401);
    expect(await isLive(tokens.access_token)).toBe(true);
    const missing = await postForm(`${running.baseUrl}/oauth/revoke`, clientCredentials(app));
    expect(missing.status).toBe(400);
    expect(await missing.json()).toMatchObject({ error: 'invalid_request', error_description: 'Missing required parameter: token.' });
    const repeated = await postForm(`${running.baseUrl}/oauth/revoke`, { ...clientCredentials(app), token: [tokens.access_token, tokens.access_token] });
    expect(repeated.status).toBe(400);
    expect(await isLive(tokens.access_token)).toBe(true);
  });
});

describe('POST /oauth/introspect (RFC 7662)', () => {
  it('describes a live user access token of the caller', async () => {
    const tokens = await userTokens(app, ['public', 'write']);
    const record = (await running.store.tokens.getAccessToken(tokenDigest(tokens.access_token)))!;
    const response = await postForm(
      `${running.baseUrl}/oauth/introspect`,
      { token: tokens.access_token },
      { authorization: basicAuthorization(app.clientId, app.clientSecret!) },
    );
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toEqual({
      active: true,
      scope: 'public write',
      client_id: app.clientId,
      token_type: 'Bearer',
      exp: Math.floor(record.expiresAt / 1000),
      iat: Math.floor(record.issuedAt / 1000),
      sub: userId,
    });
    expect(Object.keys(body)).toEqual(['active', 'scope', 'client_id', 'token_type', 'exp', 'iat', 'sub']);
  });

  it('describes an application token without sub, and a refresh token without token_type', async () => {
    const application = await applicationToken(app);
    const applicationBody = await (await introspect(app, application)).json();
    expect(applicationBody).toMatchObject({ active: true, client_id: app.clientId, token_type: 'Bearer' });
    expect(applicationBody).not.toHaveProperty('sub');
    const tokens = await userTokens(app);
    const refreshBody = await (await introspect(app, tokens.refresh_token!, 'refresh_token')).json();
    expect(refreshBody).toMatchObject({ active: true, client_id: app.clientId, sub: userId });
    expect(refreshBody).not.toHaveProperty('token_type');
  });

  it('answers {"active":false} for unknown, forged, revoked, spent and expired tokens', async () => {
    const inactive = async (token: string) => expect(await (await introspect(app, token)).json()).toEqual({ active: false });
    await inactive(running.tokengate.context.minter.mint());
    await inactive(randomBytes(32).toString('base64url'));
    await inactive(await storedForgery(app));
    const revoked = await userTokens(app);
    await revoke(app, revoked.access_token);
    await inactive(revoked.access_token);
    const rotated = await userTokens(app);
    await postForm(`${running.baseUrl}/oauth/token`, { grant_type: 'refresh_token', refresh_token: rotated.refresh_token, ...clientCredentials(app) });
    await inactive(rotated.refresh_token!);
    const expiring = running.tokengate.context.minter.mint();
    await running.store.tokens.saveAccessToken(tokenDigest(expiring), {
      kind: 'application',
      clientId: app.clientId,
      userId: null,
      scopes: ['public'],
      familyId: null,
      issuedAt: Date.now(),
      expiresAt: Date.now() + 150,
    });
    expect(await (await introspect(app, expiring)).json()).toMatchObject({ active: true });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await inactive(expiring);
  });

  it('answers {"active":false} for another client\'s live token', async () => {
    const tokens = await userTokens(app);
    expect(await (await introspect(otherApp, tokens.access_token)).json()).toEqual({ active: false });
    expect(await (await introspect(app, tokens.access_token)).json()).toMatchObject({ active: true });
  });

  it('refuses public clients and unauthenticated callers with 401 invalid_client', async () => {
    const tokens = await userTokens(publicApp);
    const asPublic = await postForm(`${running.baseUrl}/oauth/introspect`, { token: tokens.access_token, client_id: publicApp.clientId });
    expect(asPublic.status).toBe(401);
    expect(await asPublic.json()).toMatchObject({ error: 'invalid_client' });
    const anonymous = await postForm(`${running.baseUrl}/oauth/introspect`, { token: tokens.access_token });
    expect(anonymous.status).toBe(401);
    const missing = await postForm(`${running.baseUrl}/oauth/introspect`, clientCredentials(app));
    expect(await missing.json()).toMatchObject({ error: 'invalid_request', error_description: 'Missing required parameter: token.' });
  });
});

describe('GET /oauth/token/info (Doorkeeper)', () => {
  it("describes the presented access token in Doorkeeper's shape", async () => {
    const tokens = await userTokens(app, ['public', 'write']);
    const record = (await running.store.tokens.getAccessToken(tokenDigest(tokens.access_token)))!;
    const response = await tokenInfo(`Bearer ${tokens.access_token}`);
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const body = (await response.json()) as { expires_in: number };
    expect(Object.keys(body)).toEqual(['resource_owner_id', 'scope', 'expires_in', 'application', 'created_at']);
    expect(body).toEqual({
      resource_owner_id: userId,
      scope: ['public', 'write'],
      expires_in: expect.any(Number),
      application: { uid: app.clientId },
      created_at: Math.floor(record.issuedAt / 1000),
    });
    expect(body.expires_in).toBeGreaterThan(7190);
    expect(body.expires_in).toBeLessThanOrEqual(7200);
    // The scheme is case-insensitive (RFC 7235).
    expect((await tokenInfo(`bearer ${tokens.access_token}`)).status).toBe(200);
  });

  it('gives an application token a null resource owner', async () => {
    const body = await (await tokenInfo(`Bearer ${await applicationToken(app)}`)).json();
    expect(body).toMatchObject({ resource_owner_id: null, application: { uid: app.clientId } });
  });

  it('answers 401 with a bare Bearer challenge when no token is presented (RFC 6750 3.1)', async () => {
    for (const authorization of [undefined, 'Basic abc']) {
      const response = await tokenInfo(authorization);
      expect(response.status).toBe(401);
      expect(response.headers.get('www-authenticate')).toBe('Bearer realm="tokengate"');
      expect(await response.json()).toMatchObject({ error: 'invalid_token' });
    }
  });

  it("reads the Authorization header with the gateway's grammar: a malformed Bearer credential is 400 invalid_request", async () => {
    for (const authorization of ['Bearer', 'Bearer a b', 'Bearer tok"en', 'Bearer  ']) {
      const response = await tokenInfo(authorization);
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ error: 'invalid_request' });
    }
  });

  it('answers 401 invalid_token for unknown, forged, revoked and refresh tokens', async () => {
    const tokens = await userTokens(app);
    await revoke(app, tokens.access_token);
    for (const token of [tokens.access_token, tokens.refresh_token!, running.tokengate.context.minter.mint(), await storedForgery(app), 'x']) {
      const response = await tokenInfo(`Bearer ${token}`);
      expect(response.status).toBe(401);
      expect(response.headers.get('www-authenticate')).toBe(
        'Bearer realm="tokengate", error="invalid_token", error_description="The access token is invalid, expired or revoked."',
      );
      expect(await response.json()).toEqual({ error: 'invalid_token', error_description: 'The access token is invalid, expired or revoked.' });
    }
  });
});

describe('GET /.well-known/oauth-authorization-server (RFC 8414)', () => {
  it('names every endpoint under the configured issuer URL', async () => {
    const response = await fetch(`${running.baseUrl}/.well-known/oauth-authorization-server`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      issuer: 'https://auth.example.com',
      authorization_endpoint: 'https://auth.example.com/oauth/authorize',
      token_endpoint: 'https://auth.example.com/oauth/token',
      revocation_endpoint: 'https://auth.example.com/oauth/revoke',
      introspection_endpoint: 'https://auth.example.com/oauth/introspect',
      grant_types_supported: ['authorization_code', 'client_credentials', 'refresh_token', 'urn:ietf:params:oauth:grant-type:token-exchange'],
      response_types_supported: ['code'],
      code_challenge_methods_supported: ['S256'],
      authorization_response_iss_parameter_supported: true,
      token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
      revocation_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'none'],
      introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
      scopes_supported: ['public', 'write'],
      dpop_signing_alg_values_supported: ['ES256', 'EdDSA', 'Ed25519', 'RS256', 'PS256'],
    });
  });
});

describe('docs/issuer.md against the issuer', () => {
  const issuerDocs = readDocument('docs/issuer.md');

  it("shows the metadata's grant types as served, token exchange included", async () => {
    const served = (await (await fetch(`${running.baseUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    const shown = JSON.parse(codeBlocks(sectionOf(issuerDocs, '## `GET /.well-known/oauth-authorization-server` (RFC 8414)'), 'json')[0]!) as Record<
      string,
      unknown
    >;
    expect(shown.grant_types_supported).toEqual(served.grant_types_supported);
    for (const member of Object.keys(shown)) expect(served, member).toHaveProperty(member);
  });

  it('lists the unsupported_grant_type answers as given: an unknown grant, and the JWT bearer grant with no provider trusted', async () => {
    const [row] = tableUnder(issuerDocs, '## `POST /oauth/token`').filter((line) => line.startsWith('| `unsupported_grant_type`'));
    for (const grantType of ['password', 'urn:ietf:params:oauth:grant-type:jwt-bearer']) {
      const answer = await postForm(`${running.baseUrl}/oauth/token`, { grant_type: grantType, assertion: 'x', ...clientCredentials(app) });
      const body = (await answer.json()) as { error: string; error_description: string };
      expect({ grantType, status: answer.status, error: body.error }).toEqual({ grantType, status: 400, error: 'unsupported_grant_type' });
      expect(row, grantType).toContain(`("${body.error_description}")`);
    }
  });
});
