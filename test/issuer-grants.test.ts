import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { s256CodeChallenge } from '../src/issuer/pkce.js';
import { deleteUserAndTokens } from '../src/store/deletions.js';
import { tokenDigest } from '../src/token/token-value.js';
import {
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
let tokenUrl: string;
let app: TestApplication;
let otherApp: TestApplication;
let publicApp: TestApplication;
let userId: string;

beforeAll(async () => {
  running = await startTokengate('issuer-grants', { config: { issuer: { scopes: ['public', 'write'], defaultScopes: ['public'] } } });
  tokenUrl = `${running.baseUrl}/oauth/token`;
  app = await registerApplication(running.store, { scopes: ['public', 'write'] });
  otherApp = await registerApplication(running.store, { redirectUri: app.redirectUri });
  publicApp = await registerApplication(running.store, { confidential: false, redirectUri: 'http://127.0.0.1:7000/callback' });
  userId = await registerUser(running.store);
});
afterAll(async () => {
  await running.close();
});

interface TokenBody {
  access_token: string;
  token_type: string;
  expires_in: number;
  refresh_token?: string;
  scope: string;
  created_at: number;
}

async function expectTokens(response: Response): Promise<TokenBody> {
  const body = (await response.json()) as TokenBody;
  expect(response.status, JSON.stringify(body)).toBe(200);
  return body;
}

async function expectError(response: Response, status: number, error: string): Promise<string> {
  const body = (await response.json()) as { error: string; error_description: string };
  expect({ status: response.status, error: body.error }).toEqual({ status, error });
  expect(response.headers.get('cache-control')).toBe('no-store');
  expect(response.headers.get('pragma')).toBe('no-cache');
  return body.error_description;
}

const exchange = (application: TestApplication, code: string, extra: Record<string, string | undefined> = {}) =>
  postForm(tokenUrl, { grant_type: 'authorization_code', code, redirect_uri: application.redirectUri, ...clientCredentials(application), ...extra });

const refresh = (application: TestApplication, refreshToken: string, extra: Record<string, string | undefined> = {}) =>
  postForm(tokenUrl, { grant_type: 'refresh_token', refresh_token: refreshToken, ...clientCredentials(application), ...extra });

const isLive = async (token: string) => (await running.store.tokens.getAccessToken(tokenDigest(token))) !== null;
const isLiveRefresh = async (token: string) => (await running.store.tokens.getRefreshToken(tokenDigest(token))) !== null;

const newVerifier = () => randomBytes(48).toString('base64url');

describe('authorization_code', () => {
  it("exchanges a code for a user token and a refresh token of the code's family, keys in the documented order", async () => {
    const { code, record } = await issueAuthorizationCode(running, app, userId, { scopes: ['public', 'write'] });
    const body = await expectTokens(await exchange(app, code));
    expect(Object.keys(body)).toEqual(['access_token', 'token_type', 'expires_in', 'refresh_token', 'scope', 'created_at']);
    expect(body).toMatchObject({ token_type: 'Bearer', expires_in: 7200, scope: 'public write' });
    expect(body.refresh_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(body.refresh_token).not.toBe(body.access_token);
    expect(await running.store.tokens.getAccessToken(tokenDigest(body.access_token))).toMatchObject({
      kind: 'user',
      clientId: app.clientId,
      userId,
      familyId: record.familyId,
      scopes: ['public', 'write'],
    });
    expect(await running.store.tokens.getRefreshToken(tokenDigest(body.refresh_token!))).toMatchObject({
      clientId: app.clientId,
      userId,
      familyId: record.familyId,
    });
  });

  it('requires code and redirect_uri, and names the missing one', async () => {
    const { code } = await issueAuthorizationCode(running, app, userId);
    expect(await expectError(await exchange(app, code, { code: undefined }), 400, 'invalid_request')).toBe('Missing required parameter: code.');
    expect(await expectError(await exchange(app, code, { redirect_uri: undefined }), 400, 'invalid_request')).toBe('Missing required parameter: redirect_uri.');
    // Those refusals did not spend the code.
    await expectTokens(await exchange(app, code));
  });

  it('refuses a redirect_uri that differs by one character', async () => {
    for (const redirectUri of [
      `${app.redirectUri}/`,
      app.redirectUri.replace('callback', 'callbacK'),
      app.redirectUri.slice(0, -1),
      app.redirectUri.replace('https', 'http'),
    ]) {
      const { code } = await issueAuthorizationCode(running, app, userId);
      const description = await expectError(await exchange(app, code, { redirect_uri: redirectUri }), 400, 'invalid_grant');
      expect(description).toContain('redirect_uri');
    }
  });

  it('refuses a code issued to another client, and spends it', async () => {
    const { code } = await issueAuthorizationCode(running, app, userId);
    await expectError(await exchange(otherApp, code), 400, 'invalid_grant');
    await expectError(await exchange(app, code), 400, 'invalid_grant');
  });

  it('refuses an expired code', async () => {
    const { code } = await issueAuthorizationCode(running, app, userId, { expiresAt: Date.now() + 150 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await expectError(await exchange(app, code), 400, 'invalid_grant');
  });

  it('refuses unknown codes, and forged ones even when the store holds them', async () => {
    await expectError(await exchange(app, running.tokengate.context.minter.mint()), 400, 'invalid_grant');
    await expectError(await exchange(app, 'not-a-code'), 400, 'invalid_grant');
    // A value of the right shape without this deployment's tag is refused before the store is asked.
    const forged = randomBytes(32).toString('base64url');
    await running.store.codes.save(tokenDigest(forged), {
      clientId: app.clientId,
      userId,
      redirectUri: app.redirectUri,
      scopes: ['public'],
      codeChallenge: null,
      codeChallengeMethod: null,
      familyId: 'forged',
      issuedAt: Date.now(),
      expiresAt: Date.now() + 60_000,
    });
    await expectError(await exchange(app, forged), 400, 'invalid_grant');
  });

  it('refuses a replayed code and revokes every token issued from it (RFC 6749 4.1.2)', async () => {
    const { code } = await issueAuthorizationCode(running, app, userId);
    const first = await expectTokens(await exchange(app, code));
    // The family grows by a refresh before the replay: those tokens go too.
    const refreshed = await expectTokens(await refresh(app, first.refresh_token!));
    expect(await isLive(refreshed.access_token)).toBe(true);

    const replay = await expectError(await exchange(app, code), 400, 'invalid_grant');
    expect(replay).toContain('already used');
    expect(await isLive(first.access_token)).toBe(false);
    expect(await isLive(refreshed.access_token)).toBe(false);
    expect(await isLiveRefresh(refreshed.refresh_token!)).toBe(false);
    await expectError(await refresh(app, refreshed.refresh_token!), 400, 'invalid_grant');
  });

  it('refuses a code whose user was deleted in the meantime', async () => {
    const doomed = await registerUser(running.store);
    const { code } = await issueAuthorizationCode(running, app, doomed);
    await deleteUserAndTokens(running.store, doomed);
    await expectError(await exchange(app, code), 400, 'invalid_grant');
  });
});

describe('authorization_code with PKCE (RFC 7636, S256)', () => {
  const pkceCode = (application: TestApplication, verifier: string) =>
    issueAuthorizationCode(running, application, userId, { codeChallenge: s256CodeChallenge(verifier), codeChallengeMethod: 'S256' });

  it('computes the S256 challenge of RFC 7636 appendix B', () => {
    expect(s256CodeChallenge('dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk')).toBe('E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM');
  });

  it('lets a public client exchange with client_id and the right verifier', async () => {
    const verifier = newVerifier();
    const { code } = await pkceCode(publicApp, verifier);
    const body = await expectTokens(await exchange(publicApp, code, { code_verifier: verifier }));
    expect(body.refresh_token).toBeDefined();
  });

  it('refuses a verifier that does not match', async () => {
    const { code } = await pkceCode(publicApp, newVerifier());
    expect(await expectError(await exchange(publicApp, code, { code_verifier: newVerifier() }), 400, 'invalid_grant')).toContain('does not match');
  });

  it('refuses a missing verifier when the authorization request had a challenge', async () => {
    const { code } = await pkceCode(app, newVerifier());
    expect(await expectError(await exchange(app, code), 400, 'invalid_grant')).toContain('Missing code_verifier');
  });

  it('refuses a verifier when the authorization request had no challenge (downgrade)', async () => {
    const { code } = await issueAuthorizationCode(running, app, userId);
    expect(await expectError(await exchange(app, code, { code_verifier: newVerifier() }), 400, 'invalid_grant')).toContain('no code_challenge');
  });

  it("refuses a public client's code without a challenge", async () => {
    const { code } = await issueAuthorizationCode(running, publicApp, userId);
    expect(await expectError(await exchange(publicApp, code), 400, 'invalid_grant')).toContain('Public clients must use PKCE');
  });

  it('refuses a malformed verifier as invalid_request without spending the code', async () => {
    const verifier = newVerifier();
    const { code } = await pkceCode(publicApp, verifier);
    for (const malformed of ['short', 'x'.repeat(129), `${'a'.repeat(42)}+`, `${'a'.repeat(42)} `]) {
      await expectError(await exchange(publicApp, code, { code_verifier: malformed }), 400, 'invalid_request');
    }
    await expectTokens(await exchange(publicApp, code, { code_verifier: verifier }));
  });
});

describe('refresh_token', () => {
  async function grant(application: TestApplication, scopes = ['public', 'write']): Promise<TokenBody> {
    const verifier = newVerifier();
    const { code } = await issueAuthorizationCode(running, application, userId, {
      scopes,
      codeChallenge: s256CodeChallenge(verifier),
      codeChallengeMethod: 'S256',
    });
    return expectTokens(await exchange(application, code, { code_verifier: verifier }));
  }

  it('rotates: a new access token and a new refresh token of the same family on every use', async () => {
    const first = await grant(app);
    const second = await expectTokens(await refresh(app, first.refresh_token!));
    expect(Object.keys(second)).toEqual(['access_token', 'token_type', 'expires_in', 'refresh_token', 'scope', 'created_at']);
    expect(second.refresh_token).not.toBe(first.refresh_token);
    expect(second.access_token).not.toBe(first.access_token);
    const familyOf = async (token: string) => (await running.store.tokens.getAccessToken(tokenDigest(token)))!.familyId;
    expect(await familyOf(second.access_token)).toBe(await familyOf(first.access_token));
    expect(await isLiveRefresh(first.refresh_token!)).toBe(false);
    const third = await expectTokens(await refresh(app, second.refresh_token!));
    expect(third.scope).toBe('public write');
  });

  it('revokes the whole family when a used refresh token comes back (RFC 9700)', async () => {
    const first = await grant(app);
    const second = await expectTokens(await refresh(app, first.refresh_token!));
    await expectError(await refresh(app, first.refresh_token!), 400, 'invalid_grant');
    expect(await isLive(first.access_token)).toBe(false);
    expect(await isLive(second.access_token)).toBe(false);
    await expectError(await refresh(app, second.refresh_token!), 400, 'invalid_grant');
  });

  it("narrows the access token's scope on request while the grant keeps its full scope (RFC 6749 6)", async () => {
    const first = await grant(app);
    const narrowed = await expectTokens(await refresh(app, first.refresh_token!, { scope: 'public' }));
    expect(narrowed.scope).toBe('public');
    expect((await running.store.tokens.getAccessToken(tokenDigest(narrowed.access_token)))!.scopes).toEqual(['public']);
    const full = await expectTokens(await refresh(app, narrowed.refresh_token!, { scope: 'write public' }));
    expect(full.scope).toBe('write public');
  });

  it('refuses to widen the scope, without spending the refresh token', async () => {
    const first = await grant(app, ['public']);
    expect(await expectError(await refresh(app, first.refresh_token!, { scope: 'public write' }), 400, 'invalid_scope')).toContain('exceeds');
    await expectError(await refresh(app, first.refresh_token!, { scope: 'bad"scope' }), 400, 'invalid_scope');
    await expectTokens(await refresh(app, first.refresh_token!));
  });

  it("gives at most the application's scopes of today: a scope taken from it leaves the grant for good, and a grant with none left is revoked", async () => {
    const shrinking = await registerApplication(running.store, { scopes: ['public', 'write'] });
    const registered = (await running.store.applications.get(shrinking.clientId))!;
    const { code } = await issueAuthorizationCode(running, shrinking, userId, { scopes: ['public', 'write'] });
    const first = await expectTokens(await exchange(shrinking, code));
    expect(first.scope).toBe('public write');

    // The operator takes `write` from the application (apps update --scopes public).
    await running.store.applications.put({ ...registered, scopes: ['public'] });
    const second = await expectTokens(await refresh(shrinking, first.refresh_token!));
    expect(second.scope).toBe('public');
    expect((await running.store.tokens.getAccessToken(tokenDigest(second.access_token)))?.scopes).toEqual(['public']);
    expect((await running.store.tokens.getRefreshToken(tokenDigest(second.refresh_token!)))?.scopes).toEqual(['public']);
    // Asking for it is too wide a scope now, and spends nothing.
    await expectError(await refresh(shrinking, second.refresh_token!, { scope: 'write' }), 400, 'invalid_scope');
    expect(await isLiveRefresh(second.refresh_token!)).toBe(true);

    // Given back to the application, it does not grow back into the grant: the user consents again for it.
    await running.store.applications.put({ ...registered, scopes: ['public', 'write'] });
    const third = await expectTokens(await refresh(shrinking, second.refresh_token!));
    expect(third.scope).toBe('public');

    // Nothing of the grant left to the application: refused, and the family revoked.
    await running.store.applications.put({ ...registered, scopes: ['write'] });
    const description = await expectError(await refresh(shrinking, third.refresh_token!), 400, 'invalid_grant');
    expect(description).toContain('authorize it again');
    expect(await isLive(third.access_token)).toBe(false);
    expect(await isLiveRefresh(third.refresh_token!)).toBe(false);
  });

  it('refuses a refresh token of another client and revokes its family, since it leaked', async () => {
    const first = await grant(app);
    await expectError(await refresh(otherApp, first.refresh_token!), 400, 'invalid_grant');
    expect(await isLive(first.access_token)).toBe(false);
    await expectError(await refresh(app, first.refresh_token!), 400, 'invalid_grant');
  });

  it('lets a public client refresh with its client_id', async () => {
    const first = await grant(publicApp, ['public']);
    const second = await expectTokens(await refresh(publicApp, first.refresh_token!));
    expect(second.refresh_token).toBeDefined();
  });

  it('refuses a missing, unknown or forged refresh token', async () => {
    expect(await expectError(await postForm(tokenUrl, { grant_type: 'refresh_token', ...clientCredentials(app) }), 400, 'invalid_request')).toBe(
      'Missing required parameter: refresh_token.',
    );
    await expectError(await refresh(app, running.tokengate.context.minter.mint()), 400, 'invalid_grant');
    await expectError(await refresh(app, randomBytes(32).toString('base64url')), 400, 'invalid_grant');
    // An access token is not a refresh token.
    const { access_token } = await grant(app);
    await expectError(await refresh(app, access_token), 400, 'invalid_grant');
  });

  it('issues no refresh token through client_credentials, so an application token cannot be refreshed', async () => {
    const body = await expectTokens(await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(app) }));
    expect(body.refresh_token).toBeUndefined();
    await expectError(await refresh(app, body.access_token), 400, 'invalid_grant');
  });
});
