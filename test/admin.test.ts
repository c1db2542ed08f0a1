import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { verifyPassword } from '../src/issuer/passwords.js';
import { tokenDigest } from '../src/token/token-value.js';
import { rawRedis } from './support/redis.js';
import { issueAuthorizationCode, postForm, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';

const ADMIN_TOKEN = 'admin-token-for-tests-0123456789';

let running: RunningTokengate;

beforeAll(async () => {
  running = await startTokengate('admin', { config: { admin: { token: ADMIN_TOKEN }, issuer: { scopes: ['public', 'write'] } } });
});
afterAll(async () => {
  await running.close();
});

function admin(method: string, path: string, body?: unknown, token: string | null = ADMIN_TOKEN): Promise<Response> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetch(`${running.opsUrl}/admin${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function expectBadRequest(response: Response, fragment: string): Promise<void> {
  const body = (await response.json()) as { error: string; error_description: string };
  expect({ status: response.status, error: body.error }).toEqual({ status: 400, error: 'invalid_request' });
  expect(body.error_description).toContain(fragment);
}

interface Created {
  client_id: string;
  client_secret?: string;
  name: string;
  confidential: boolean;
  redirect_uris: string[];
  scopes: string[];
  created_at: string;
}

async function createApplication(overrides: Record<string, unknown> = {}): Promise<Created> {
  const response = await admin('POST', '/applications', { name: 'Box office', redirect_uris: ['https://box.example/callback'], ...overrides });
  expect(response.status).toBe(201);
  return (await response.json()) as Created;
}

async function issueApplicationToken(created: Created): Promise<string> {
  const response = await postForm(`${running.baseUrl}/oauth/token`, {
    grant_type: 'client_credentials',
    client_id: created.client_id,
    client_secret: created.client_secret,
  });
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
}

const isLive = async (token: string) => (await running.store.tokens.getAccessToken(tokenDigest(token))) !== null;

describe('admin API authentication', () => {
  it('requires the admin bearer token on every admin route, compared exactly', async () => {
    for (const token of [null, 'wrong', `${ADMIN_TOKEN}x`, ADMIN_TOKEN.slice(0, -1)]) {
      for (const [method, path] of [
        ['GET', '/applications'],
        ['POST', '/applications'],
        ['GET', '/users'],
        ['DELETE', '/users/x'],
        ['POST', '/tokens/revoke'],
      ] as const) {
        const response = await admin(method, path, method === 'POST' ? {} : undefined, token);
        expect(response.status, `${method} ${path} with ${token}`).toBe(401);
        expect(response.headers.get('www-authenticate')).toBe('Bearer realm="tokengate admin"');
        expect(await response.json()).toMatchObject({ error: 'unauthorized' });
      }
    }
    const basic = await fetch(`${running.opsUrl}/admin/applications`, {
      headers: { authorization: `Basic ${Buffer.from(`x:${ADMIN_TOKEN}`).toString('base64')}` },
    });
    expect(basic.status).toBe(401);
  });

  it('leaves health, readiness and metrics open', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics']) expect((await fetch(`${running.opsUrl}${path}`)).status).toBe(200);
  });
});

describe('admin API: applications', () => {
  it('creates a confidential application and shows its secret once; the store keeps only the digest', async () => {
    const created = await createApplication({ scopes: ['public', 'write'], redirect_uris: ['https://box.example/callback', 'http://localhost:3000/cb'] });
    expect(Object.keys(created)).toEqual([
      'client_id',
      'client_secret',
      'name',
      'confidential',
      'redirect_uris',
      'scopes',
      'dpop',
      'resources',
      'rate_limit',
      'token_exchange',
      'post_logout_redirect_uris',
      'backchannel_logout_uri',
      'backchannel_logout_session_required',
      'id_token_signed_response_alg',
      'created_at',
    ]);
    expect(created).toMatchObject({
      name: 'Box office',
      confidential: true,
      scopes: ['public', 'write'],
      redirect_uris: ['https://box.example/callback', 'http://localhost:3000/cb'],
    });
    expect(created.client_id).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(created.client_secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await running.store.applications.get(created.client_id)).toMatchObject({ secretDigest: clientSecretDigest(created.client_secret!) });

    const redis = rawRedis();
    try {
      for (const key of await redis.keys(`${running.prefix}*`)) {
        const value = (await redis.type(key)) === 'string' ? await redis.get(key) : JSON.stringify(await redis.hgetall(key).catch(() => ({})));
        expect(value ?? '').not.toContain(created.client_secret);
      }
    } finally {
      redis.disconnect();
    }
    // The secret works at the token endpoint.
    await issueApplicationToken(created);
  });

  it("creates a public application without a secret, with the issuer's default scopes", async () => {
    const created = await createApplication({ confidential: false });
    expect(created).not.toHaveProperty('client_secret');
    expect(created).toMatchObject({ confidential: false, scopes: ['public'] });
    expect((await running.store.applications.get(created.client_id))!.secretDigest).toBeNull();
  });

  it('lists applications without secrets or digests', async () => {
    const created = await createApplication({ name: 'Listed' });
    const response = await admin('GET', '/applications');
    const text = await response.text();
    expect(text).not.toContain(created.client_secret);
    expect(text).not.toContain(clientSecretDigest(created.client_secret!));
    const { applications } = JSON.parse(text) as { applications: Created[] };
    const { client_secret: _secret, ...shown } = created;
    expect(applications).toContainEqual(shown);
  });

  it('deletes an application and revokes its tokens; a second delete is 404', async () => {
    const created = await createApplication();
    const token = await issueApplicationToken(created);
    const response = await admin('DELETE', `/applications/${created.client_id}`);
    expect(await response.json()).toEqual({ client_id: created.client_id, deleted: true });
    expect(await isLive(token)).toBe(false);
    const again = await admin('DELETE', `/applications/${created.client_id}`);
    expect(again.status).toBe(404);
    expect(await again.json()).toMatchObject({ error: 'not_found' });
  });

  it('updates the fields it is given and keeps the others; the secret stays valid; unknown applications are 404', async () => {
    const created = await createApplication({ scopes: ['public'] });
    const response = await admin('PATCH', `/applications/${created.client_id}`, { name: 'Box office (renamed)', scopes: ['public', 'write'] });
    expect(response.status).toBe(200);
    const { client_secret: _secret, ...unchanged } = created;
    expect(await response.json()).toEqual({ ...unchanged, name: 'Box office (renamed)', scopes: ['public', 'write'] });
    expect(await running.store.applications.get(created.client_id)).toMatchObject({
      name: 'Box office (renamed)',
      scopes: ['public', 'write'],
      redirectUris: created.redirect_uris,
      secretDigest: clientSecretDigest(created.client_secret!),
    });
    await issueApplicationToken(created);

    const missing = await admin('PATCH', '/applications/no-such-client', { name: 'x' });
    expect(missing.status).toBe(404);
    await expectBadRequest(await admin('PATCH', `/applications/${created.client_id}`, {}), 'at least one field');
    await expectBadRequest(await admin('PATCH', `/applications/${created.client_id}`, { confidential: false }), 'cannot update confidential');
    await expectBadRequest(await admin('PATCH', `/applications/${created.client_id}`, { redirect_uris: ['http://box.example/cb'] }), 'must use https');
    await expectBadRequest(await admin('PATCH', `/applications/${created.client_id}`, { scopes: ['admin'] }), 'unknown scope "admin"');
    await expectBadRequest(await admin('PATCH', `/applications/${created.client_id}`, { dpop: 'always' }), 'dpop must be "required"');
    // A refused update changes nothing.
    expect(await running.store.applications.get(created.client_id)).toMatchObject({ name: 'Box office (renamed)', redirectUris: created.redirect_uris });
  });

  it('refuses unsafe or malformed redirect URIs with a 400 naming the problem', async () => {
    const cases: Array<[string, string]> = [
      ['/callback', 'is not an absolute URL'],
      ['http://box.example/callback', 'must use https'],
      ['https://box.example/callback#frag', 'fragment'],
      ['https://user:pw@box.example/callback', 'credentials'],
      ['javascript:alert(1)', 'must use https'],
      ['https://box.example/call back', 'spaces'],
      ['https://box.example/callback\n', 'control'],
      [`https://box.example/${'a'.repeat(2100)}`, 'longer than'],
    ];
    for (const [uri, fragment] of cases) await expectBadRequest(await admin('POST', '/applications', { name: 'Bad', redirect_uris: [uri] }), fragment);
    for (const uri of ['http://127.0.0.1:8000/cb', 'http://[::1]/cb', 'https://box.example/cb?source=app']) await createApplication({ redirect_uris: [uri] });
  });

  it('registers, shows, updates and removes the logout settings, each URI held to the redirect URI rule', async () => {
    const created = await createApplication();
    expect(created).toMatchObject({ post_logout_redirect_uris: [], backchannel_logout_uri: null, backchannel_logout_session_required: false });
    const withLogout = await createApplication({
      post_logout_redirect_uris: ['https://box.example/signed-out', 'http://127.0.0.1:8000/bye', 'https://box.example/signed-out'],
      backchannel_logout_uri: 'https://box.example/backchannel?source=tokengate',
      backchannel_logout_session_required: true,
    });
    expect(withLogout).toMatchObject({
      post_logout_redirect_uris: ['https://box.example/signed-out', 'http://127.0.0.1:8000/bye'],
      backchannel_logout_uri: 'https://box.example/backchannel?source=tokengate',
      backchannel_logout_session_required: true,
    });
    expect(await running.store.applications.get(withLogout.client_id)).toMatchObject({
      postLogoutRedirectUris: ['https://box.example/signed-out', 'http://127.0.0.1:8000/bye'],
      backchannelLogoutUri: 'https://box.example/backchannel?source=tokengate',
      backchannelLogoutSessionRequired: true,
    });

    const patch = (body: unknown) => admin('PATCH', `/applications/${withLogout.client_id}`, body);
    const removed = await patch({ post_logout_redirect_uris: [], backchannel_logout_uri: null, backchannel_logout_session_required: false });
    expect(await removed.json()).toMatchObject({ post_logout_redirect_uris: [], backchannel_logout_uri: null, backchannel_logout_session_required: false });
    expect(await running.store.applications.get(withLogout.client_id)).not.toHaveProperty('backchannelLogoutUri');
    const added = await patch({ backchannel_logout_uri: 'http://localhost:4000/logout' });
    expect(await added.json()).toMatchObject({ backchannel_logout_uri: 'http://localhost:4000/logout', post_logout_redirect_uris: [] });

    const cases: Array<[Record<string, unknown>, string]> = [
      [{ post_logout_redirect_uris: ['http://box.example/bye'] }, 'post_logout_redirect_uris: "http://box.example/bye" must use https'],
      [{ post_logout_redirect_uris: ['https://box.example/bye#top'] }, 'post_logout_redirect_uris: "https://box.example/bye#top" must not contain a fragment'],
      [{ post_logout_redirect_uris: 'https://box.example/bye' }, 'post_logout_redirect_uris must be a list of strings'],
      [{ backchannel_logout_uri: 'http://intranet.example/logout' }, 'backchannel_logout_uri: "http://intranet.example/logout" must use https'],
      [{ backchannel_logout_uri: 'https://user:pw@box.example/logout' }, 'must not contain credentials'],
      [{ backchannel_logout_uri: ['https://box.example/logout'] }, 'backchannel_logout_uri must be a URL, or null'],
      [{ backchannel_logout_session_required: 'yes' }, 'backchannel_logout_session_required must be true'],
    ];
    for (const [fields, fragment] of cases) {
      await expectBadRequest(await admin('POST', '/applications', { name: 'x', redirect_uris: ['https://a.example/cb'], ...fields }), fragment);
      await expectBadRequest(await patch(fields), fragment);
    }
    expect(await running.store.applications.get(withLogout.client_id)).toMatchObject({ backchannelLogoutUri: 'http://localhost:4000/logout' });
  });

  it('refuses other malformed input with clear 400s', async () => {
    await expectBadRequest(await admin('POST', '/applications', { redirect_uris: ['https://a.example/cb'] }), 'name is required');
    await expectBadRequest(await admin('POST', '/applications', { name: ' ', redirect_uris: ['https://a.example/cb'] }), 'name must be');
    await expectBadRequest(await admin('POST', '/applications', { name: 'x' }), 'redirect_uris must list at least one');
    await expectBadRequest(await admin('POST', '/applications', { name: 'x', redirect_uris: 'https://a.example/cb' }), 'list of strings');
    await expectBadRequest(
      await admin('POST', '/applications', { name: 'x', redirect_uris: ['https://a.example/cb'], scopes: ['admin'] }),
      'unknown scope "admin"',
    );
    await expectBadRequest(await admin('POST', '/applications', { name: 'x', redirect_uris: ['https://a.example/cb'], scopes: [] }), 'at least one scope');
    await expectBadRequest(await admin('POST', '/applications', { name: 'x', redirect_uris: ['https://a.example/cb'], confidential: 'yes' }), 'true or false');
    await expectBadRequest(await admin('POST', '/applications', ['x']), 'JSON object');
    const notJson = await fetch(`${running.opsUrl}/admin/applications`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: '{"name":',
    });
    expect(notJson.status).toBe(400);
  });
});

describe('admin API: users and token revocation', () => {
  let userId: string;

  it('creates a user with a scrypt hash, lower-casing the e-mail; a duplicate is 409', async () => {
    const response = await admin('POST', '/users', { email: ' Ana@Example.com ', password: 'correct horse battery' });
    expect(response.status).toBe(201);
    const user = (await response.json()) as { id: string; email: string; created_at: string };
    expect(Object.keys(user)).toEqual(['id', 'email', 'created_at']);
    expect(user.email).toBe('ana@example.com');
    userId = user.id;
    const stored = (await running.store.users.get(user.id))!;
    expect(stored.passwordHash).toMatch(/^scrypt\$/);
    expect(await verifyPassword('correct horse battery', stored.passwordHash)).toBe(true);

    const duplicate = await admin('POST', '/users', { email: 'ANA@example.com', password: 'another password' });
    expect(duplicate.status).toBe(409);
    expect(await duplicate.json()).toMatchObject({ error: 'conflict' });
  });

  it('refuses malformed users with clear 400s', async () => {
    await expectBadRequest(await admin('POST', '/users', { email: 'not-an-email', password: 'long enough' }), 'email must be');
    await expectBadRequest(await admin('POST', '/users', { email: 'bo@example.com', password: 'short' }), 'at least 8 characters');
    await expectBadRequest(await admin('POST', '/users', { email: 'bo@example.com', password: 'x'.repeat(1025) }), 'at most 1024');
    await expectBadRequest(await admin('POST', '/users', { email: 'bo@example.com' }), 'password is required');
    await expectBadRequest(await admin('POST', '/users', { email: 'bo@example.com', password: 12345678 }), 'password must be a non-empty string');
  });

  it('lists users without password hashes', async () => {
    const text = await (await admin('GET', '/users')).text();
    expect(text).not.toContain('scrypt');
    expect((JSON.parse(text) as { users: Array<{ id: string }> }).users.map((user) => user.id)).toContain(userId);
  });

  it('revokes every token of a user, and every token of an application', async () => {
    const created = await createApplication();
    const application: TestApplication = { clientId: created.client_id, clientSecret: created.client_secret, redirectUri: 'https://box.example/callback' };
    const exchange = async () => {
      const { code } = await issueAuthorizationCode(running, application, userId);
      const response = await postForm(`${running.baseUrl}/oauth/token`, {
        grant_type: 'authorization_code',
        code,
        redirect_uri: application.redirectUri,
        client_id: created.client_id,
        client_secret: created.client_secret,
      });
      return (await response.json()) as { access_token: string; refresh_token: string };
    };
    const userTokens = await exchange();
    const appToken = await issueApplicationToken(created);
    const byUser = await admin('POST', '/tokens/revoke', { user_id: userId });
    expect(await byUser.json()).toEqual({ revoked: 2 });
    expect(await isLive(userTokens.access_token)).toBe(false);
    expect(await running.store.tokens.getRefreshToken(tokenDigest(userTokens.refresh_token))).toBeNull();
    expect(await isLive(appToken)).toBe(true);

    const again = await exchange();
    const byClient = await admin('POST', '/tokens/revoke', { client_id: created.client_id });
    expect(await byClient.json()).toEqual({ revoked: 3 });
    expect(await isLive(appToken)).toBe(false);
    expect(await isLive(again.access_token)).toBe(false);

    await expectBadRequest(await admin('POST', '/tokens/revoke', {}), 'exactly one of user_id, client_id and identity_provider (with subject)');
    await expectBadRequest(await admin('POST', '/tokens/revoke', { user_id: userId, client_id: created.client_id }), 'exactly one');
  });

  it('deletes a user and revokes their tokens; a second delete is 404', async () => {
    const created = await createApplication();
    const application: TestApplication = { clientId: created.client_id, clientSecret: created.client_secret, redirectUri: 'https://box.example/callback' };
    const { code } = await issueAuthorizationCode(running, application, userId);
    const response = await postForm(`${running.baseUrl}/oauth/token`, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: application.redirectUri,
      client_id: created.client_id,
      client_secret: created.client_secret,
    });
    const { access_token } = (await response.json()) as { access_token: string };
    expect(await (await admin('DELETE', `/users/${userId}`)).json()).toEqual({ id: userId, deleted: true });
    expect(await isLive(access_token)).toBe(false);
    expect((await admin('DELETE', `/users/${userId}`)).status).toBe(404);
    expect(await running.store.users.findByEmail('ana@example.com')).toBeNull();
  });
});
