import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import * as oidc from 'openid-client';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { adminFetch, postForm, startTokengate, type RunningTokengate } from './support/instance.js';
import { application, authorizePath, createUser, FormClient, formFields } from './support/issuer.js';
import { freePort } from './support/ports.js';

/**
 * OpenID Connect as relying parties use it: openid-client (a certified relying-party library)
 * and Authlib's client in Python discover tokengate, sign a user in through the real pages in
 * headless Chromium, validate the ID token, call UserInfo and refresh for a new ID token. Then
 * the prompt rules, max_age, login_hint and id_token_hint over HTTP, and the attacks: a forged or
 * foreign id_token_hint, a replayed code, UserInfo without `openid` or with a revoked token.
 */

const CHROMIUM = process.env.TOKENGATE_TEST_CHROMIUM ?? '/usr/bin/chromium';
const PYTHON = '/usr/bin/python3';
const HOSTS = '--host-resolver-rules=MAP festival.test 127.0.0.1';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic', '--no-first-run', HOSTS];
const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats forever';
const OTHER_EMAIL = 'other@example.com';
const SECRET = 'festival-secret-0123456789';
const PUBLIC_CLIENT = 'festival-app';

let issuer: RunningTokengate;
let issuerUrl: string;
let callback: { server: Server; port: number };
let redirectUri: string;
let profile: string;
let browser: BrowserContext;

/** The application's callback: a page that says it is back (the relying parties read the URL). */
async function startCallback(): Promise<typeof callback> {
  const server = createServer((_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>Back</title>'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

/** A person in Chromium (no JavaScript): opens the authorization URL, signs in, approves when asked; returns where the browser was sent back to. */
async function signInInBrowser(page: Page, authorizationUrl: string, options: { approve: boolean } = { approve: true }): Promise<string> {
  await page.goto(authorizationUrl);
  await page.getByLabel('E-mail address').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await Promise.all([
    page.waitForURL((url) => url.href.startsWith(redirectUri) || url.pathname === '/oauth/authorize'),
    page.getByRole('button', { name: 'Sign in' }).click(),
  ]);
  if (options.approve && !page.url().startsWith(redirectUri))
    await Promise.all([page.waitForURL((url) => url.href.startsWith(redirectUri)), page.getByRole('button', { name: 'Approve' }).click()]);
  return page.url();
}

async function discovered(clientId = 'festival', secret: string | undefined = SECRET): Promise<oidc.Configuration> {
  return oidc.discovery(new URL(issuerUrl), clientId, secret, secret === undefined ? oidc.None() : oidc.ClientSecretBasic(secret), {
    execute: [oidc.allowInsecureRequests],
  });
}

function atHash(accessToken: string): string {
  return createHash('sha256').update(accessToken).digest().subarray(0, 16).toString('base64url');
}

beforeAll(async () => {
  callback = await startCallback();
  redirectUri = `http://festival.test:${callback.port}/callback`;
  const port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  issuer = await startTokengate('openid-connect', { port, config: { openidConnect: { enabled: true, jwksMaxAgeSeconds: 55, keyRefreshSeconds: 1 } } });
  const scopes = ['public', 'openid', 'email', 'profile'];
  await issuer.store.applications.put(
    application({ clientId: 'festival', name: 'Festival Tickets', secretDigest: clientSecretDigest(SECRET), redirectUris: [redirectUri], scopes }),
  );
  await issuer.store.applications.put(
    application({ clientId: PUBLIC_CLIENT, name: 'Festival App', secretDigest: null, confidential: false, redirectUris: [redirectUri], scopes }),
  );
  await issuer.store.applications.put(
    application({ clientId: 'no-openid', name: 'Plain', secretDigest: clientSecretDigest(SECRET), redirectUris: [redirectUri] }),
  );
  await createUser(issuer.store, 'user-fan', EMAIL, PASSWORD);
  await createUser(issuer.store, 'user-other', OTHER_EMAIL, PASSWORD);
  profile = await mkdtemp(join(tmpdir(), 'tokengate-chromium-'));
  browser = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, javaScriptEnabled: false });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  if (profile) await rm(profile, { recursive: true, force: true });
  await issuer?.close();
  callback?.server.closeAllConnections();
  await new Promise((resolve) => callback?.server.close(resolve));
});

describe('discovery', () => {
  it('publishes an OpenID provider configuration that agrees with the RFC 8414 metadata', async () => {
    const configuration = (await (await fetch(`${issuerUrl}/.well-known/openid-configuration`)).json()) as Record<string, unknown>;
    const oauth = (await (await fetch(`${issuerUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    for (const [field, value] of Object.entries(oauth)) expect({ field, value: configuration[field] }).toEqual({ field, value });
    expect(configuration).toMatchObject({
      issuer: issuerUrl,
      userinfo_endpoint: `${issuerUrl}/oauth/userinfo`,
      jwks_uri: `${issuerUrl}/.well-known/jwks.json`,
      response_types_supported: ['code'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256', 'ES256'],
      prompt_values_supported: ['none', 'login', 'consent', 'select_account'],
    });
    expect(configuration.scopes_supported).toEqual(expect.arrayContaining(['openid', 'email', 'profile']));
    expect(configuration.claims_supported).toEqual(expect.arrayContaining(['sub', 'email', 'email_verified', 'auth_time', 'nonce', 'sid']));
  });
});

describe('openid-client, signing in through the pages in Chromium', () => {
  it('validates the ID token, calls UserInfo and refreshes for a new ID token', async () => {
    const config = await discovered();
    // Verify ID token signatures against the JWKS too (openid-client skips it for the token endpoint's answer unless asked).
    oidc.enableNonRepudiationChecks(config);
    const verifier = oidc.randomPKCECodeVerifier();
    const nonce = oidc.randomNonce();
    const state = oidc.randomState();
    const authorizationUrl = oidc.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: 'openid email',
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      nonce,
      state,
    });
    const page = await browser.newPage();
    const before = Math.floor(Date.now() / 1000);
    const back = await signInInBrowser(page, authorizationUrl.href);
    await page.close();

    const tokens = await oidc.authorizationCodeGrant(config, new URL(back), {
      pkceCodeVerifier: verifier,
      expectedNonce: nonce,
      expectedState: state,
      idTokenExpected: true,
    });
    const claims = tokens.claims()!;
    expect(claims).toMatchObject({ iss: issuerUrl, sub: 'user-fan', aud: 'festival', nonce, email: EMAIL, email_verified: false });
    expect(claims.auth_time).toBeGreaterThanOrEqual(before - 1);
    expect(claims.sid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(claims.at_hash).toBe(atHash(tokens.access_token));
    expect(decodeProtectedHeader(tokens.id_token!)).toMatchObject({ alg: 'RS256', typ: 'JWT' });

    const userinfo = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub);
    expect(userinfo).toEqual({ sub: 'user-fan', email: EMAIL, email_verified: false });
    // POST too (Core 1.0 section 5.3.1).
    const posted = await fetch(`${issuerUrl}/oauth/userinfo`, { method: 'POST', headers: { authorization: `Bearer ${tokens.access_token}` } });
    expect(await posted.json()).toEqual(userinfo);

    const refreshed = await oidc.refreshTokenGrant(config, tokens.refresh_token!);
    const again = refreshed.claims()!;
    expect(refreshed.id_token).not.toBe(tokens.id_token);
    expect(again).toMatchObject({ iss: issuerUrl, sub: 'user-fan', aud: 'festival', sid: claims.sid, auth_time: claims.auth_time });
    expect(again).not.toHaveProperty('nonce');
    expect(again.at_hash).toBe(atHash(refreshed.access_token));
  });

  it('signs a public client in with DPoP: the tokens are bound, and UserInfo takes them with a proof', async () => {
    const config = await discovered(PUBLIC_CLIENT, undefined);
    const dpop = oidc.getDPoPHandle(config, await oidc.randomDPoPKeyPair('ES256'));
    const verifier = oidc.randomPKCECodeVerifier();
    const nonce = oidc.randomNonce();
    const authorizationUrl = oidc.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: 'openid email',
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      nonce,
    });
    const page = await browser.newPage();
    // Signed in already (the browser kept its session): a public client is shown the consent page every time.
    await page.goto(authorizationUrl.href);
    await Promise.all([page.waitForURL((url) => url.href.startsWith(redirectUri)), page.getByRole('button', { name: 'Approve' }).click()]);
    const back = page.url();
    await page.close();
    const redeem = () =>
      oidc.authorizationCodeGrant(config, new URL(back), { pkceCodeVerifier: verifier, expectedNonce: nonce, idTokenExpected: true }, undefined, {
        DPoP: dpop,
      });
    // The token endpoint asks for its DPoP nonce first (use_dpop_nonce): the handle keeps it for the retry.
    const tokens = await redeem().catch((error: unknown) => {
      if (error instanceof oidc.WWWAuthenticateChallengeError && error.cause[0]?.parameters.error === 'use_dpop_nonce') return redeem();
      throw error;
    });
    expect(tokens.token_type.toLowerCase()).toBe('dpop');
    expect(await oidc.fetchUserInfo(config, tokens.access_token, tokens.claims()!.sub, { DPoP: dpop })).toMatchObject({ sub: 'user-fan' });
    // The same token as Bearer proves nothing about its key.
    const asBearer = await fetch(`${issuerUrl}/oauth/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    expect(asBearer.status).toBe(401);
    expect(asBearer.headers.get('www-authenticate')).toMatch(/^Bearer realm=.*error="invalid_token"/);
  });

  it('signs ES256 ID tokens for an application that chose it', async () => {
    const patched = await adminFetch(issuer, '/applications/festival', { method: 'PATCH', body: JSON.stringify({ id_token_signed_response_alg: 'ES256' }) });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({ id_token_signed_response_alg: 'ES256' });
    const refused = await adminFetch(issuer, '/applications/festival', { method: 'PATCH', body: JSON.stringify({ id_token_signed_response_alg: 'HS256' }) });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({
      error: 'invalid_request',
      error_description: expect.stringContaining('id_token_signed_response_alg') as string,
    });
    try {
      const { tokens } = await codeFlow(new FormClient(issuerUrl), { scope: 'openid' });
      expect(decodeProtectedHeader(tokens.id_token!)).toMatchObject({ alg: 'ES256' });
    } finally {
      await adminFetch(issuer, '/applications/festival', { method: 'PATCH', body: JSON.stringify({ id_token_signed_response_alg: 'RS256' }) });
    }
  });
});

describe("Authlib's OpenID Connect client (Python), signing in through the pages in Chromium", () => {
  it('validates the ID token (signature, nonce, at_hash), calls UserInfo and refreshes for a new ID token', async () => {
    const python = spawn(PYTHON, ['test/support/python/authlib_client.py', issuerUrl, 'festival', SECRET, redirectUri], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    python.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const lines = createInterface({ input: python.stdout })[Symbol.asyncIterator]();
    const next = async () => {
      const line = await lines.next();
      if (line.done === true) throw new Error(`the Authlib client ended: ${stderr}`);
      return JSON.parse(line.value) as Record<string, unknown>;
    };
    const { authorization_url } = (await next()) as { authorization_url: string };
    const page = await browser.newPage();
    // Signed in already, and the confidential application approved before: straight back to it.
    await page.goto(authorization_url);
    await page.waitForURL((url) => url.href.startsWith(redirectUri));
    python.stdin.write(`${page.url()}\n`);
    await page.close();
    const result = (await next()) as { id_token_claims: Record<string, unknown>; userinfo: Record<string, unknown>; refreshed_claims: Record<string, unknown> };
    expect(result.id_token_claims).toMatchObject({ iss: issuerUrl, sub: 'user-fan', aud: 'festival', email: EMAIL });
    expect(result.id_token_claims.nonce).toEqual(expect.any(String));
    expect(result.userinfo).toEqual({ sub: 'user-fan', email: EMAIL, email_verified: false });
    expect(result.refreshed_claims).toMatchObject({ sub: 'user-fan', sid: result.id_token_claims.sid });
    expect(result.refreshed_claims).not.toHaveProperty('nonce');
  }, 30_000);
});

/** A code flow of the confidential application over HTTP, the browser a FormClient (signed in, or signing in as `EMAIL`). */
async function codeFlow(
  browserStandIn: FormClient,
  parameters: Record<string, string>,
): Promise<{ tokens: oidc.TokenEndpointResponse & oidc.TokenEndpointResponseHelpers; code: string }> {
  const config = await discovered();
  const state = oidc.randomState();
  const url = oidc.buildAuthorizationUrl(config, { redirect_uri: redirectUri, state, ...parameters });
  let page = await browserStandIn.get(url.pathname + url.search);
  if (page.status === 200 && page.text.includes('name="password"'))
    page = await browserStandIn.follow(await browserStandIn.post('/oauth/authorize/login', { ...formFields(page.text), email: EMAIL, password: PASSWORD }));
  if (page.status === 200) page = await browserStandIn.post('/oauth/authorize/decision', { ...formFields(page.text), decision: 'approve' });
  const back = new URL(page.location!);
  const tokens = await oidc.authorizationCodeGrant(config, back, {
    expectedState: state,
    expectedNonce: parameters.nonce,
    idTokenExpected: parameters.scope?.includes('openid'),
  });
  return { tokens, code: back.searchParams.get('code')! };
}

/** A FormClient signed in as `EMAIL` that has approved the confidential application for openid and email. */
async function signedIn(): Promise<FormClient> {
  const standIn = new FormClient(issuerUrl);
  await codeFlow(standIn, { scope: 'openid email' });
  return standIn;
}

function authorize(parameters: Record<string, string>): string {
  return authorizePath({ client_id: 'festival', redirect_uri: redirectUri, response_type: 'code', scope: 'openid', state: 'st-1', ...parameters });
}

function sentBack(location: string | null): URLSearchParams {
  expect(location).not.toBeNull();
  expect(location!.startsWith(redirectUri)).toBe(true);
  return new URL(location!).searchParams;
}

describe('prompt, max_age, login_hint and id_token_hint', () => {
  it('prompt=none without a session: login_required, with the state, on the redirect URI', async () => {
    const answer = await new FormClient(issuerUrl).get(authorize({ prompt: 'none' }));
    expect(answer.status).toBe(302);
    expect(Object.fromEntries(sentBack(answer.location))).toMatchObject({ error: 'login_required', state: 'st-1', iss: issuerUrl });
  });

  it('prompt=none with a session: a code when the approval is remembered; consent_required for more; interaction_required for a public client', async () => {
    const standIn = await signedIn();
    const answer = await standIn.get(authorize({ prompt: 'none', scope: 'openid email' }));
    expect(answer.status).toBe(302);
    expect(sentBack(answer.location).get('code')).toEqual(expect.any(String));
    const more = await standIn.get(authorize({ prompt: 'none', scope: 'openid email profile' }));
    expect(Object.fromEntries(sentBack(more.location))).toMatchObject({ error: 'consent_required', state: 'st-1' });
    const publicClient = await standIn.get(
      authorize({ prompt: 'none', client_id: PUBLIC_CLIENT, code_challenge: 'a'.repeat(43), code_challenge_method: 'S256' }),
    );
    expect(sentBack(publicClient.location).get('error')).toMatch(/^(consent_required|interaction_required)$/);
    expect(await new FormClient(issuerUrl).get(authorize({ prompt: 'none login' }))).toMatchObject({ status: 302 });
    expect(sentBack((await standIn.get(authorize({ prompt: 'none login' }))).location).get('error')).toBe('invalid_request');
  });

  it('max_age=0 and prompt=login ask for the password again, then go on with a newer auth_time', async () => {
    const standIn = await signedIn();
    const first = await codeFlow(standIn, { scope: 'openid', nonce: 'n-0' });
    const firstAuthTime = first.tokens.claims()!.auth_time!;
    for (const parameters of [{ max_age: '0' }, { prompt: 'login' }] as Array<Record<string, string>>) {
      const page = await standIn.get(authorize(parameters));
      expect(page.status).toBe(200);
      expect(page.text).toContain('name="password"');
      // Signing in again takes at least a second for auth_time to show it.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const { tokens } = await codeFlow(standIn, { scope: 'openid', nonce: 'n-1', ...parameters });
      expect(tokens.claims()!.auth_time!).toBeGreaterThan(firstAuthTime);
    }
    // A sign-in younger than max_age serves.
    const recent = await standIn.get(authorize({ max_age: '3600' }));
    expect(recent.status).toBe(302);
    expect(sentBack(recent.location).get('code')).toEqual(expect.any(String));
  });

  it('prompt=consent shows the consent page although the approval is remembered; select_account offers another account', async () => {
    const standIn = await signedIn();
    for (const prompt of ['consent', 'select_account']) {
      const page = await standIn.get(authorize({ prompt }));
      expect(page.status).toBe(200);
      expect(page.text).toContain('Approve');
      expect(page.text).toContain('Use another account');
    }
  });

  it('login_hint fills in the e-mail address of the sign-in page', async () => {
    const page = await new FormClient(issuerUrl).get(authorize({ login_hint: 'hinted@example.com' }));
    expect(page.status).toBe(200);
    expect(page.text).toMatch(/<input[^>]*name="email"[^>]*value="hinted@example.com"/);
  });

  it('an id_token_hint of the signed-in user serves; one of another user asks to sign in (login_required with prompt=none)', async () => {
    const standIn = await signedIn();
    const { tokens } = await codeFlow(standIn, { scope: 'openid' });
    const own = await standIn.get(authorize({ prompt: 'none', id_token_hint: tokens.id_token! }));
    expect(sentBack(own.location).get('code')).toEqual(expect.any(String));

    const other = new FormClient(issuerUrl);
    const login = await other.get(authorize({}));
    await other.post('/oauth/authorize/login', { ...formFields(login.text), email: OTHER_EMAIL, password: PASSWORD });
    const foreign = await other.get(authorize({ prompt: 'none', id_token_hint: tokens.id_token! }));
    expect(Object.fromEntries(sentBack(foreign.location))).toMatchObject({ error: 'login_required', state: 'st-1' });
    const asked = await other.get(authorize({ id_token_hint: tokens.id_token! }));
    expect(asked.status).toBe(200);
    expect(asked.text).toContain('name="password"');
  });
});

describe('attacks', () => {
  it('refuses a forged id_token_hint: invalid_request on the redirect URI', async () => {
    const standIn = await signedIn();
    const { tokens } = await codeFlow(standIn, { scope: 'openid' });
    const [header, payload, signature] = tokens.id_token!.split('.');
    const claims = { ...decodeJwt(tokens.id_token!), sub: 'user-other' };
    const forged = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${signature}`;
    expect(payload).not.toBe(forged.split('.')[1]);
    const answer = await standIn.get(authorize({ id_token_hint: forged }));
    expect(Object.fromEntries(sentBack(answer.location))).toMatchObject({ error: 'invalid_request', state: 'st-1' });
  });

  it('never issues a second ID token for a replayed code, and revokes what the first one got', async () => {
    const standIn = await signedIn();
    const config = await discovered();
    const page = await standIn.get(authorize({ nonce: 'replay' }));
    const code = sentBack(page.location).get('code')!;
    const redeem = () =>
      postForm(`${issuerUrl}/oauth/token`, { grant_type: 'authorization_code', code, redirect_uri: redirectUri, client_id: 'festival', client_secret: SECRET });
    const first = (await (await redeem()).json()) as { id_token?: string; access_token: string };
    expect(first.id_token).toEqual(expect.any(String));
    const replay = await redeem();
    expect(replay.status).toBe(400);
    const body = (await replay.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ error: 'invalid_grant' });
    expect(body).not.toHaveProperty('id_token');
    // The first redemption's tokens are revoked with the family (RFC 6749 section 4.1.2).
    await expect(oidc.fetchUserInfo(config, first.access_token, oidc.skipSubjectCheck)).rejects.toThrow();
  });

  it('UserInfo: 403 insufficient_scope without openid, 401 invalid_token when revoked or unknown, 401 without a token', async () => {
    const standIn = new FormClient(issuerUrl);
    const plainConfig = await oidc.discovery(new URL(issuerUrl), 'no-openid', SECRET, oidc.ClientSecretBasic(SECRET), {
      execute: [oidc.allowInsecureRequests],
    });
    const login = await standIn.get(authorizePath({ client_id: 'no-openid', redirect_uri: redirectUri, response_type: 'code', scope: 'public', state: 's' }));
    const consent = await standIn.follow(await standIn.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: PASSWORD }));
    const approved = await standIn.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    const plain = await oidc.authorizationCodeGrant(plainConfig, new URL(approved.location!), { expectedState: 's' });
    const withoutOpenid = await fetch(`${issuerUrl}/oauth/userinfo`, { headers: { authorization: `Bearer ${plain.access_token}` } });
    expect(withoutOpenid.status).toBe(403);
    expect(await withoutOpenid.json()).toMatchObject({ error: 'insufficient_scope' });
    expect(withoutOpenid.headers.get('www-authenticate')).toMatch(
      /^Bearer realm="[^"]*", error="insufficient_scope", error_description="[^"]*", scope="openid"$/,
    );

    const { tokens } = await codeFlow(await signedIn(), { scope: 'openid' });
    expect((await fetch(`${issuerUrl}/oauth/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } })).status).toBe(200);
    expect((await postForm(`${issuerUrl}/oauth/revoke`, { token: tokens.access_token, client_id: 'festival', client_secret: SECRET })).status).toBe(200);
    const revoked = await fetch(`${issuerUrl}/oauth/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } });
    expect(revoked.status).toBe(401);
    expect(await revoked.json()).toMatchObject({ error: 'invalid_token' });
    expect(revoked.headers.get('www-authenticate')).toMatch(/^Bearer realm=".*", error="invalid_token"/);
    const none = await fetch(`${issuerUrl}/oauth/userinfo`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer realm="[^"]*"$/);
  });
});
