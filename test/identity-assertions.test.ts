import { randomBytes, randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { SignJWT } from 'jose';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/load-config.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { generateProviderKey, TestIdentityProvider } from './support/identity-provider.js';
import { clientCredentials, postForm, registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { readDocument, sectionOf, tableUnder } from './support/markdown.js';
import { freePort } from './support/ports.js';
import { eventually } from './support/wait.js';

/**
 * Identity assertions (ID-JAG over the RFC 7523 JWT bearer grant) against two sidecars of one
 * deployment, with a provider of the test's own: real ES256 keys published over https. Every
 * check of the grant is attacked with the assertion it exists to refuse.
 */

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const ADMIN_TOKEN = `admin-${randomBytes(16).toString('hex')}`;
const EMAIL = 'ada@company.example';

let idp: TestIdentityProvider;
let upstream: Upstream;
let first: RunningTokengate;
let second: RunningTokengate;
let app: TestApplication;
let otherApp: TestApplication;
let issuerUrl: string;
let api: string;
let userId: string;
let config: Record<string, unknown>;
/** Every line either sidecar logged. */
const logged: string[] = [];

beforeAll(async () => {
  [idp, upstream] = await Promise.all([TestIdentityProvider.start(), startUpstream()]);
  const port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  api = `${issuerUrl}/api`;
  config = {
    admin: { token: ADMIN_TOKEN },
    issuer: { issuerUrl, scopes: ['public', 'admin'] },
    resources: [{ identifier: api }, { identifier: `${issuerUrl}/other` }],
    routes: [{ path: '/api/tickets', token: 'user', scopes: ['public'], upstream: upstream.url, resource: api }],
    identityProviders: [idp.config({ keyRefreshCooldownSeconds: 0, maxAssertionLifetimeSeconds: 300 })],
    logging: { level: 'info' },
  };
  const logger = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _encoding, done) => (logged.push(chunk.toString()), done()) }));
  first = await startTokengate('id-jag', { port, config, logger });
  second = await startTokengate('id-jag-2', { sharing: first, config, logger });
  app = await registerApplication(first.store, { scopes: ['public'] });
  otherApp = await registerApplication(first.store, { scopes: ['public'] });
  userId = randomUUID();
  await first.store.users.create({ id: userId, email: EMAIL, passwordHash: 'scrypt$placeholder', createdAt: Date.now() });
});

afterAll(async () => {
  await second?.close();
  await first?.close();
  await upstream?.close();
  await idp?.close();
});

/** The claims of a good assertion for the application, the user and the API. */
function claims(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { sub: `idp-${EMAIL}`, email: EMAIL, aud: issuerUrl, client_id: app.clientId, resource: api, scope: 'public', ...overrides };
}

function exchange(sidecar: RunningTokengate, assertion: string, extra: Record<string, string> = {}, client = app): Promise<Response> {
  return postForm(`${sidecar.baseUrl}/oauth/token`, { grant_type: JWT_BEARER, assertion, ...clientCredentials(client), ...extra });
}

async function refusal(response: Response): Promise<{ status: number; error: string; description: string }> {
  const body = (await response.json()) as { error: string; error_description: string };
  return { status: response.status, error: body.error, description: body.error_description };
}

function callApi(sidecar: RunningTokengate, token: string): Promise<Response> {
  return fetch(`${sidecar.baseUrl}/api/tickets`, { headers: { authorization: `Bearer ${token}` } });
}

async function tokenFor(sidecar: RunningTokengate, subjectClaims: Record<string, unknown> = {}): Promise<string> {
  const response = await exchange(sidecar, await idp.assertion(claims(subjectClaims)));
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
}

describe('the JWT bearer grant with an identity assertion', () => {
  it('is advertised in the metadata with the ID-JAG profile', async () => {
    const metadata = (await (await fetch(`${first.baseUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    expect(metadata.grant_types_supported).toContain(JWT_BEARER);
    expect(metadata.authorization_grant_profiles_supported).toEqual(['urn:ietf:params:oauth:grant-profile:id-jag']);
  });

  it('issues an access token for the asserted resource and user, without a refresh token, good on every sidecar', async () => {
    const response = await exchange(first, await idp.assertion(claims()));
    expect(response.status).toBe(200);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ token_type: 'Bearer', scope: 'public' });
    expect(body).not.toHaveProperty('refresh_token');
    for (const sidecar of [first, second]) {
      const call = await callApi(sidecar, body.access_token as string);
      expect(call.status).toBe(200);
      expect(upstream.received.at(-1)!.headers['x-auth-user-id']).toBe(userId);
    }
    const introspection = await postForm(`${first.baseUrl}/oauth/introspect`, { token: body.access_token as string, ...clientCredentials(app) });
    expect(await introspection.json()).toMatchObject({ active: true, aud: [api] });
  });

  it('refuses an assertion used before, on the same sidecar and on another', async () => {
    const assertion = await idp.assertion(claims());
    expect((await exchange(first, assertion)).status).toBe(200);
    for (const sidecar of [second, first]) {
      expect(await refusal(await exchange(sidecar, assertion))).toMatchObject({
        status: 400,
        error: 'invalid_grant',
        description: expect.stringContaining('jti'),
      });
    }
  });

  it('does not spend an assertion on a request refused for another reason', async () => {
    const assertion = await idp.assertion(claims());
    expect((await refusal(await exchange(first, assertion, { scope: 'public admin' }))).error).toBe('invalid_grant');
    expect((await exchange(second, assertion)).status).toBe(200);
  });

  it('narrows the scope to the one asked for', async () => {
    const response = await exchange(first, await idp.assertion(claims({ scope: 'public admin' })), { scope: 'public' });
    expect(await response.json()).toMatchObject({ scope: 'public' });
  });

  it('refuses each broken assertion with invalid_grant naming its claim, never echoing or logging the assertion', async () => {
    const now = Math.floor(Date.now() / 1000);
    const unpublished = await generateProviderKey();
    const header = (fields: Record<string, unknown>) => Buffer.from(JSON.stringify(fields)).toString('base64url');
    const cases: Array<[string, () => Promise<string>, string, Record<string, string>?]> = [
      ['a wrong typ', () => idp.assertion(claims(), { typ: 'JWT' }), 'typ'],
      [
        'alg none',
        async () =>
          `${header({ alg: 'none', typ: 'oauth-id-jag+jwt' })}.${header({ iss: idp.issuer, ...claims(), iat: now, exp: now + 60, jti: randomUUID() })}.`,
        'alg',
      ],
      [
        "HMAC with the provider's public key as the secret",
        () =>
          new SignJWT({ iss: idp.issuer, ...claims(), jti: randomUUID() })
            .setProtectedHeader({ alg: 'HS256', typ: 'oauth-id-jag+jwt', kid: idp.current.kid })
            .setIssuedAt()
            .setExpirationTime('1m')
            .sign(new TextEncoder().encode(JSON.stringify(idp.current.publicJwk))),
        'alg',
      ],
      ['a kid the provider does not publish', () => idp.assertion(claims(), { key: unpublished }), 'kid'],
      ['a foreign iss', () => idp.assertion(claims({ iss: 'https://idp.elsewhere.example' })), 'iss'],
      ['a wrong aud', () => idp.assertion(claims({ aud: 'https://another-issuer.example' })), 'aud'],
      ['the client_id of another client', () => idp.assertion(claims({ client_id: otherApp.clientId })), 'client_id'],
      ['a resource not of this issuer', () => idp.assertion(claims({ resource: 'https://api.elsewhere.example' })), 'resource'],
      ['no resource', () => idp.assertion(claims({ resource: undefined })), 'resource'],
      ['an expired one', () => idp.assertion(claims({ iat: now - 200, exp: now - 100 })), 'exp'],
      ['one not yet valid', () => idp.assertion(claims({ nbf: now + 120 })), 'nbf'],
      ['a lifetime over the maximum', () => idp.assertion(claims({ exp: now + 3_600 })), 'exp'],
      ['a scope asked for beyond the asserted one', () => idp.assertion(claims({ scope: 'public' })), 'scope', { scope: 'public admin' }],
      ['a subject that is no user', () => idp.assertion(claims({ sub: 'idp-nobody', email: 'nobody@company.example' })), 'sub'],
      [
        'no jti',
        () =>
          new SignJWT({ iss: idp.issuer, ...claims(), iat: now, exp: now + 60 })
            .setProtectedHeader({ alg: 'ES256', typ: 'oauth-id-jag+jwt', kid: idp.current.kid })
            .sign(idp.current.privateKey),
        'jti',
      ],
    ];
    for (const [name, make, claim, extra] of cases) {
      const assertion = await make();
      const fetchesBefore = idp.keySetFetches;
      const response = await exchange(first, assertion, extra);
      const text = await response.text();
      expect({ name, status: response.status }).toEqual({ name, status: 400 });
      const body = JSON.parse(text) as { error: string; error_description: string };
      expect({ name, error: body.error }).toEqual({ name, error: 'invalid_grant' });
      expect({ name, description: body.error_description }).toEqual({ name, description: expect.stringContaining(`'s ${claim} `) });
      expect(text).not.toContain(assertion.split('.')[1]!);
      if (claim === 'kid') expect(idp.keySetFetches).toBeGreaterThan(fetchesBefore);
    }
    const signatures = logged.join('').match(/[A-Za-z0-9_-]{40,}\.[A-Za-z0-9_-]{40,}/g);
    expect(signatures).toBeNull();
  });

  it('keeps the key set as its caching headers say: good assertions cost no fetch', async () => {
    const before = idp.keySetFetches;
    for (let round = 0; round < 3; round += 1) expect((await exchange(first, await idp.assertion(claims()))).status).toBe(200);
    expect(idp.keySetFetches).toBe(before);
  });

  it('keeps the key set in hand when a fetch fails: an unknown kid is still refused as such, good assertions still taken', async () => {
    idp.failKeySet();
    try {
      const fetchesBefore = idp.keySetFetches;
      const unknown = await refusal(await exchange(first, await idp.assertion(claims(), { key: await generateProviderKey() })));
      expect(unknown).toMatchObject({ status: 400, error: 'invalid_grant', description: expect.stringContaining("'s kid ") });
      expect(idp.keySetFetches).toBeGreaterThan(fetchesBefore);
      expect((await exchange(first, await idp.assertion(claims()))).status).toBe(200);
    } finally {
      idp.publishKeys([idp.current]);
    }
  });

  it('answers 503 temporarily_unavailable, not invalid_grant, while a provider of no key set in hand cannot be reached', async () => {
    const unreachable = { issuer: 'https://login.down.example', jwksUrl: `https://127.0.0.1:${await freePort()}/jwks`, algorithms: ['ES256'] };
    const reload = (providers: unknown[]) =>
      first.tokengate.reload(() => parseConfig(JSON.stringify({ ...first.tokengate.context.config, identityProviders: providers }), 'reloaded', {}));
    expect(reload([...(config.identityProviders as unknown[]), unreachable])).toMatchObject({ result: 'success' });
    try {
      const response = await exchange(first, await idp.assertion(claims({ iss: unreachable.issuer })));
      expect(await refusal(response)).toMatchObject({ status: 503, error: 'temporarily_unavailable' });
      expect(response.headers.get('retry-after')).not.toBeNull();
    } finally {
      reload(config.identityProviders as unknown[]);
    }
  });

  it('takes a key the provider rotated in at once, and never the key it removed', async () => {
    const previous = idp.current;
    const next = await generateProviderKey();
    const signedBefore = await idp.assertion(claims());
    idp.publishKeys([next]);
    const response = await exchange(first, await idp.assertion(claims(), { key: next }));
    expect(response.status).toBe(200);
    expect((await refusal(await exchange(first, signedBefore))).description).toContain('kid');
    idp.publishKeys([previous]);
  });
});

describe('access ends when the company says so', () => {
  const admin = (path: string, body: unknown) =>
    fetch(`${first.opsUrl}/admin${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('lists the trusted providers on the admin API', async () => {
    const response = await fetch(`${first.opsUrl}/admin/identity-providers`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(await response.json()).toMatchObject({
      identityProviders: [{ issuer: idp.issuer, jwksUrl: idp.jwksUrl, algorithms: ['ES256'], userClaim: 'email' }],
    });
  });

  it("revoking a subject of the provider ends every token of it on every sidecar, and no other's", async () => {
    const subject = `idp-${randomUUID()}`;
    const tokens = [await tokenFor(first, { sub: subject }), await tokenFor(second, { sub: subject })];
    const bystander = await tokenFor(first);
    for (const token of [...tokens, bystander]) for (const sidecar of [first, second]) expect((await callApi(sidecar, token)).status).toBe(200);
    const response = await admin('/tokens/revoke', { identity_provider: idp.issuer, subject });
    expect(await response.json()).toEqual({ revoked: 2 });
    await eventually(async () => {
      for (const token of tokens) for (const sidecar of [first, second]) if ((await callApi(sidecar, token)).status !== 401) return false;
      return true;
    });
    for (const sidecar of [first, second]) expect((await callApi(sidecar, bystander)).status).toBe(200);
    // The subject is not banned: the provider may vouch for it again.
    expect((await callApi(first, await tokenFor(first, { sub: subject }))).status).toBe(200);
  });

  it('a provider removed from the trusted list at a reload takes its tokens with it', async () => {
    const token = await tokenFor(second);
    const reloadWithout = (running: RunningTokengate) =>
      running.tokengate.reload(() => parseConfig(JSON.stringify({ ...running.tokengate.context.config, identityProviders: [] }), 'reloaded', {}));
    expect(reloadWithout(first)).toMatchObject({ result: 'success', applied: ['identityProviders'] });
    await eventually(async () => (await callApi(second, token)).status === 401);
    expect(await refusal(await exchange(first, await idp.assertion(claims())))).toMatchObject({ error: 'unsupported_grant_type' });
    const metadata = (await (await fetch(`${first.baseUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    expect(metadata).not.toHaveProperty('authorization_grant_profiles_supported');
    // Trusted again: a fresh assertion is taken.
    first.tokengate.reload(() =>
      parseConfig(JSON.stringify({ ...first.tokengate.context.config, identityProviders: config.identityProviders }), 'reloaded', {}),
    );
    expect((await exchange(first, await idp.assertion(claims()))).status).toBe(200);
  });
});

describe('a resource other than the asserted one', () => {
  it('is 400 invalid_target, as docs/issuer.md lists it at the token endpoint', async () => {
    const answer = await exchange(first, await idp.assertion(claims()), { resource: `${issuerUrl}/other` });
    const refused = await refusal(answer);
    expect(refused).toMatchObject({ status: 400, error: 'invalid_target' });
    const issuerDocs = readDocument('docs/issuer.md');
    const [row] = tableUnder(issuerDocs, '## `POST /oauth/token`').filter((line) => line.startsWith('| `invalid_target`'));
    expect(row).toContain(`("${refused.description}")`);
    expect(sectionOf(issuerDocs, '## Identity assertions (ID-JAG)')).toMatch(
      /`resource` parameter naming another resource\s+than the asserted one is \*\*400\*\* `invalid_target`/,
    );
  });
});

describe('a key the provider rotates in', () => {
  it('works at once, even within the cooldown of a routine fetch; made-up kids still cost at most one fetch per cooldown', async () => {
    const rotating = await TestIdentityProvider.start();
    const sidecar = await startTokengate('id-jag-rotation', {
      sharing: first,
      config: { ...config, identityProviders: [rotating.config({ keyRefreshCooldownSeconds: 30, maxAssertionLifetimeSeconds: 300 })] },
    });
    try {
      // The first fetch, a routine one: the set holds k1.
      expect((await exchange(sidecar, await rotating.assertion(claims()))).status).toBe(200);
      expect(rotating.keySetFetches).toBe(1);
      // The provider publishes k2 beside k1 and signs with it, seconds later: fetched at once, taken.
      const k2 = await generateProviderKey();
      rotating.publishKeys([rotating.current, k2]);
      const rotated = await exchange(sidecar, await rotating.assertion(claims(), { key: k2 }));
      expect(rotated.status, await rotated.clone().text()).toBe(200);
      expect(rotating.keySetFetches).toBe(2);
      // A flood of made-up kids within the cooldown of that fetch: refused, and no fetch more.
      for (let index = 0; index < 20; index += 1) {
        const forged = await refusal(await exchange(sidecar, await rotating.assertion(claims(), { key: await generateProviderKey() })));
        expect(forged).toMatchObject({ status: 400, error: 'invalid_grant', description: expect.stringContaining("'s kid ") });
      }
      expect(rotating.keySetFetches).toBe(2);
    } finally {
      await sidecar.close();
      await rotating.close();
    }
  });
});
