import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DPOP_SIGNING_ALGORITHMS } from '../src/dpop/index.js';
import { ConfigError, parseConfig } from '../src/load-config.js';
import { APPLICATION_TOKEN, rawRequest, startUpstream, statusOf, type Upstream } from './support/gateway.js';
import { exchange } from './support/ingress.js';
import {
  basicAuthorization,
  issueAuthorizationCode,
  postForm,
  registerApplication,
  registerUser,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';
import { FormClient, authorizePath, createUser, formFields } from './support/issuer.js';

/**
 * Resource indicators (RFC 8707) and protected resource metadata (RFC 9728) against a running
 * tokengate: the issuer binds tokens to resources, the gateway and the decision listener refuse
 * a token at a resource it is not for, and each resource describes itself.
 */

const USER_API = 'https://api.ticketing.example/api/public';
const ORGANIZER_API = 'https://api.ticketing.example/organizer';
const ADMIN_TOKEN = 'admin-token-for-resource-tests-0123';
const METADATA = '/.well-known/oauth-protected-resource';

let upstream: Upstream;
let running: RunningTokengate;
let decisionsPort: number;

beforeAll(async () => {
  upstream = await startUpstream();
  running = await startTokengate('resource', {
    config: {
      admin: { token: ADMIN_TOKEN },
      decisions: { enabled: true },
      resources: [{ identifier: USER_API }, { identifier: ORGANIZER_API }],
      routes: [
        { path: '/api/public/me', methods: ['GET'], token: 'any', scopes: ['public'], upstream: upstream.url, resource: USER_API },
        { path: '/api/public/staff', token: 'any', scopes: ['staff'], upstream: upstream.url, resource: USER_API, allowQueryToken: false },
        { path: '/organizer/events', token: 'any', scopes: ['public'], upstream: upstream.url, resource: ORGANIZER_API, allowBodyToken: false },
        { path: '/open', token: 'any', upstream: upstream.url },
      ],
    },
  });
  decisionsPort = Number(new URL(running.decisionsUrl!).port);
});

afterAll(async () => {
  await running?.close();
  await upstream?.close();
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

function tokenRequest(application: TestApplication, parameters: Record<string, string | string[]>): Promise<Response> {
  return tokenRequestTo('/oauth/token', application, parameters);
}

async function introspect(application: TestApplication, token: string): Promise<Record<string, unknown>> {
  const response = await tokenRequestTo('/oauth/introspect', application, { token });
  return (await response.json()) as Record<string, unknown>;
}

function tokenRequestTo(path: string, application: TestApplication, parameters: Record<string, string | string[]>): Promise<Response> {
  return postForm(`${running.baseUrl}${path}`, parameters, { authorization: basicAuthorization(application.clientId, application.clientSecret!) });
}

async function clientCredentialsToken(application: TestApplication, resource?: string | string[]): Promise<string> {
  const response = await tokenRequest(application, { grant_type: 'client_credentials', ...(resource === undefined ? {} : { resource }) });
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
}

function admin(method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${running.opsUrl}/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

describe('protected resource metadata (RFC 9728)', () => {
  it('describes each resource at the well-known path followed by its own path: issuer, scopes and how its routes take a token', async () => {
    const response = await fetch(`${running.baseUrl}${METADATA}/api/public`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(response.headers.get('cache-control')).toBe('public, max-age=3600');
    expect(await response.json()).toEqual({
      resource: USER_API,
      authorization_servers: [running.tokengate.context.config.issuer.issuerUrl],
      scopes_supported: ['public', 'staff'],
      bearer_methods_supported: ['header', 'body', 'query'],
      dpop_signing_alg_values_supported: [...DPOP_SIGNING_ALGORITHMS],
      dpop_bound_access_tokens_required: false,
    });
    const organizer = await fetch(`${running.baseUrl}${METADATA}/organizer`);
    expect(await organizer.json()).toMatchObject({ resource: ORGANIZER_API, scopes_supported: ['public'], bearer_methods_supported: ['header', 'query'] });
  });

  it('reads the same whichever host or forwarding headers the request came with (behind an ingress)', async () => {
    const direct = await (await fetch(`${running.baseUrl}${METADATA}/api/public`)).text();
    const forwarded = await exchange(running.port, 'GET', `${METADATA}/api/public`, [
      ['X-Forwarded-Host', 'attacker.example'],
      ['X-Forwarded-Proto', 'http'],
      ['Forwarded', 'host=attacker.example;proto=http'],
    ]);
    expect(forwarded.status).toBe(200);
    expect(forwarded.body).toBe(direct);
    expect(forwarded.body).not.toContain('attacker');
  });

  it('serves no document for a path that is not a resource, nor for one that tries to escape to another', async () => {
    expect((await fetch(`${running.baseUrl}${METADATA}`)).status).toBe(404);
    expect((await fetch(`${running.baseUrl}${METADATA}/api`)).status).toBe(404);
    expect((await fetch(`${running.baseUrl}${METADATA}/api/public/`)).status).toBe(404);
    // Raw targets, as an attacker sends them (fetch would resolve the dots itself).
    const escapes = [
      `${METADATA}/api/public/../../organizer`,
      `${METADATA}/api/public/%2e%2e/%2e%2e/organizer`,
      `${METADATA}/api/public/.%2E/.%2E/organizer`,
      `${METADATA}/api%2Fpublic`,
      `${METADATA}/api%2fpublic`,
      `${METADATA}/organizer%2F..%2Fapi%2Fpublic`,
      `${METADATA}/api/public/%252e%252e/%252e%252e/organizer`,
      `${METADATA}/api%252Fpublic`,
      `${METADATA}//api/public`,
      `${METADATA}/api/public/..;/..;/organizer`,
      `${METADATA}/./api/public`,
      `${METADATA}/api\\public`,
    ];
    for (const target of escapes) {
      const answer = await rawRequest(running.port, `GET ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`);
      expect(statusOf(answer), target).not.toBe(200);
      expect(answer, target).not.toContain('"resource"');
    }
  });
});

describe('challenges of a route with a resource name its metadata (RFC 9728 section 5.1)', () => {
  it('on every challenge: no token, an invalid token, a token for another resource, a missing scope', async () => {
    const expected = `resource_metadata="https://api.ticketing.example${METADATA}/api/public"`;
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const userApiToken = await clientCredentialsToken(application, USER_API);
    const organizerToken = await clientCredentialsToken(application, ORGANIZER_API);
    const cases: Array<[string, Record<string, string>, number, string | null]> = [
      ['/api/public/me', {}, 401, null],
      ['/api/public/me', bearer('not-a-token'), 401, 'invalid_token'],
      ['/api/public/me', bearer(organizerToken), 401, 'invalid_token'],
      ['/api/public/staff', bearer(userApiToken), 403, 'insufficient_scope'],
    ];
    for (const [path, headers, status, error] of cases) {
      const response = await fetch(`${running.baseUrl}${path}`, { headers });
      expect(response.status).toBe(status);
      const challenge = response.headers.get('www-authenticate')!;
      expect(challenge).toContain(expected);
      if (error !== null) expect(challenge).toContain(`error="${error}"`);
    }
  });

  it('but not on a route without a resource', async () => {
    const response = await fetch(`${running.baseUrl}/open`);
    expect(response.status).toBe(401);
    expect(response.headers.get('www-authenticate')).not.toContain('resource_metadata');
  });
});

describe('tokens bound to resources (RFC 8707)', () => {
  it('a token for one resource passes at its routes and is refused at another resource, by the gateway and the decision listener', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const organizerToken = await clientCredentialsToken(application, ORGANIZER_API);
    expect(await introspect(application, organizerToken)).toMatchObject({ active: true, aud: [ORGANIZER_API] });

    expect((await fetch(`${running.baseUrl}/organizer/events`, { headers: bearer(organizerToken) })).status).toBe(200);
    const refused = await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(organizerToken) });
    expect(refused.status).toBe(401);
    expect(await refused.json()).toEqual({ error: 'invalid_token', error_description: 'The access token was not issued for this resource.' });
    // The same token through a query parameter is refused the same way.
    expect((await fetch(`${running.baseUrl}/api/public/me?access_token=${organizerToken}`)).status).toBe(401);

    const allowed = await exchange(decisionsPort, 'GET', '/auth-request', [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', '/organizer/events'],
      ['Authorization', `Bearer ${organizerToken}`],
    ]);
    expect(allowed.status).toBe(200);
    const denied = await exchange(decisionsPort, 'GET', '/auth-request', [
      ['X-Original-Method', 'GET'],
      ['X-Original-URI', '/api/public/me'],
      ['Authorization', `Bearer ${organizerToken}`],
    ]);
    expect(denied.status).toBe(401);
    expect(denied.header('www-authenticate')).toContain(`resource_metadata="https://api.ticketing.example${METADATA}/api/public"`);
  });

  it('counts the refusal under its own reason', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const organizerToken = await clientCredentialsToken(application, ORGANIZER_API);
    await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(organizerToken) });
    const metrics = await (await fetch(`${running.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/tokengate_gateway_requests_total\{route="\/api\/public\/me",outcome="denied",reason="wrong_audience"\} [1-9]/);
  });

  it('without resource, a token is for every resource its application may use; a route without a resource takes any token', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const token = await clientCredentialsToken(application);
    expect(await introspect(application, token)).toMatchObject({ aud: [USER_API, ORGANIZER_API] });
    for (const path of ['/api/public/me', '/organizer/events', '/open'])
      expect((await fetch(`${running.baseUrl}${path}`, { headers: bearer(token) })).status).toBe(200);
  });

  it('a token with no audience (issued before resources were configured) is refused on a route with a resource, accepted on one without', async () => {
    const token = await running.issue(APPLICATION_TOKEN);
    expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) })).status).toBe(401);
    expect((await fetch(`${running.baseUrl}/open`, { headers: bearer(token) })).status).toBe(200);
  });

  it('an unknown, malformed or unpermitted resource is invalid_target, for every grant', async () => {
    const limited = await registerApplication(running.store, { scopes: ['public'] });
    expect((await admin('PATCH', `/applications/${limited.clientId}`, { resources: [USER_API] })).status).toBe(200);
    const attempts: Array<string | string[]> = [
      'https://api.ticketing.example/elsewhere',
      'https://api.ticketing.example/api/public#fragment',
      'not a uri',
      ORGANIZER_API,
      [USER_API, ORGANIZER_API],
    ];
    for (const resource of attempts) {
      const response = await tokenRequest(limited, { grant_type: 'client_credentials', resource });
      expect(response.status, String(resource)).toBe(400);
      const body = (await response.json()) as { error: string; error_description: string };
      expect(body.error).toBe('invalid_target');
      // The client's own value is never echoed unless it is a registered identifier.
      expect(body.error_description).not.toContain('elsewhere');
    }
    // Its default is what it may use.
    expect(await introspect(limited, await clientCredentialsToken(limited))).toMatchObject({ aud: [USER_API] });
  });

  it('says which of unknown, malformed or not permitted a refused resource is', async () => {
    const limited = await registerApplication(running.store, { scopes: ['public'] });
    expect((await admin('PATCH', `/applications/${limited.clientId}`, { resources: [USER_API] })).status).toBe(200);
    const unknown = 'A requested resource is not registered with this issuer.';
    const malformed = 'A resource parameter is not an absolute URI without a fragment (RFC 8707).';
    const cases: Array<[string, string]> = [
      // An absolute URI, only not one of ours: it was once described as not an absolute URI.
      ['https://elsewhere.example/', unknown],
      ['https://api.ticketing.example/elsewhere', unknown],
      // RFC 8707 discourages a query but allows it: unknown, not malformed.
      [`${USER_API}?version=2`, unknown],
      // Another spelling of a registered identifier: identifiers are compared exactly, the registered one is named.
      [`${USER_API}/`, `${unknown} Identifiers are compared exactly: did you mean ${USER_API}?`],
      ['HTTPS://API.TICKETING.EXAMPLE/api/public', `${unknown} Identifiers are compared exactly: did you mean ${USER_API}?`],
      [`${USER_API}#fragment`, malformed],
      ['not a uri', malformed],
      ['/api/public', malformed],
      [ORGANIZER_API, `The application may not request tokens for ${ORGANIZER_API}.`],
    ];
    for (const [resource, description] of cases) {
      const response = await tokenRequest(limited, { grant_type: 'client_credentials', resource });
      expect({ resource, status: response.status, body: await response.json() }).toEqual({
        resource,
        status: 400,
        body: { error: 'invalid_target', error_description: description },
      });
    }
  });
});

describe('the authorization code and refresh grants', () => {
  it('down-scope the audience at the token endpoint and on refresh, and never widen it; a refused refresh does not spend the token', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const userId = await registerUser(running.store);
    const { code } = await issueAuthorizationCode(running, application, userId, { audience: [USER_API, ORGANIZER_API] });
    const exchanged = await tokenRequest(application, { grant_type: 'authorization_code', code, redirect_uri: application.redirectUri, resource: USER_API });
    expect(exchanged.status).toBe(200);
    const first = (await exchanged.json()) as { access_token: string; refresh_token: string };
    expect(await introspect(application, first.access_token)).toMatchObject({ aud: [USER_API] });
    // The refresh token keeps the whole grant.
    expect(await introspect(application, first.refresh_token)).toMatchObject({ aud: [USER_API, ORGANIZER_API] });

    const narrowed = await tokenRequest(application, { grant_type: 'refresh_token', refresh_token: first.refresh_token, resource: ORGANIZER_API });
    expect(narrowed.status).toBe(200);
    const second = (await narrowed.json()) as { access_token: string; refresh_token: string };
    expect(await introspect(application, second.access_token)).toMatchObject({ aud: [ORGANIZER_API] });
    expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(second.access_token) })).status).toBe(401);

    // A grant for the user API alone cannot be refreshed into the organizer API.
    const { code: narrowCode } = await issueAuthorizationCode(running, application, userId, { audience: [USER_API] });
    const narrowGrant = (await (
      await tokenRequest(application, { grant_type: 'authorization_code', code: narrowCode, redirect_uri: application.redirectUri })
    ).json()) as { access_token: string; refresh_token: string };
    for (const resource of [ORGANIZER_API, [USER_API, ORGANIZER_API], 'https://api.ticketing.example/unknown']) {
      const widened = await tokenRequest(application, { grant_type: 'refresh_token', refresh_token: narrowGrant.refresh_token, resource });
      expect(widened.status).toBe(400);
      expect(((await widened.json()) as { error: string }).error).toBe('invalid_target');
    }
    const stillValid = await tokenRequest(application, { grant_type: 'refresh_token', refresh_token: narrowGrant.refresh_token });
    expect(stillValid.status).toBe(200);
    const refreshed = (await stillValid.json()) as { access_token: string };
    expect(await introspect(application, refreshed.access_token)).toMatchObject({ aud: [USER_API] });

    // A code cannot be exchanged for a resource outside it either.
    const { code: otherCode } = await issueAuthorizationCode(running, application, userId, { audience: [USER_API] });
    const outside = await tokenRequest(application, {
      grant_type: 'authorization_code',
      code: otherCode,
      redirect_uri: application.redirectUri,
      resource: ORGANIZER_API,
    });
    expect(((await outside.json()) as { error: string }).error).toBe('invalid_target');
  });

  it('a refresh gives at most the resources the application may use today: one taken from it is gone from the grant, and the gateway refuses the new token there', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const userId = await registerUser(running.store);
    const { code } = await issueAuthorizationCode(running, application, userId, { audience: [USER_API, ORGANIZER_API] });
    const first = (await (await tokenRequest(application, { grant_type: 'authorization_code', code, redirect_uri: application.redirectUri })).json()) as {
      refresh_token: string;
    };
    expect((await admin('PATCH', `/applications/${application.clientId}`, { resources: [ORGANIZER_API] })).status).toBe(200);
    const refreshed = await tokenRequest(application, { grant_type: 'refresh_token', refresh_token: first.refresh_token });
    expect(refreshed.status).toBe(200);
    const second = (await refreshed.json()) as { access_token: string; refresh_token: string };
    expect(await introspect(application, second.access_token)).toMatchObject({ aud: [ORGANIZER_API] });
    expect(await introspect(application, second.refresh_token)).toMatchObject({ aud: [ORGANIZER_API] });
    expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(second.access_token) })).status).toBe(401);
    expect((await fetch(`${running.baseUrl}/organizer/events`, { headers: bearer(second.access_token) })).status).toBe(200);
    // Naming the resource taken away is invalid_target, and spends nothing.
    const named = await tokenRequest(application, { grant_type: 'refresh_token', refresh_token: second.refresh_token, resource: USER_API });
    expect(((await named.json()) as { error: string }).error).toBe('invalid_target');
    // A grant for the user API alone has nothing left once the application may use only the organizer API: revoked.
    const { code: userOnly } = await issueAuthorizationCode(running, application, userId, { audience: [USER_API] });
    const grant = (await (
      await tokenRequest(application, { grant_type: 'authorization_code', code: userOnly, redirect_uri: application.redirectUri })
    ).json()) as {
      refresh_token: string;
    };
    const emptied = await tokenRequest(application, { grant_type: 'refresh_token', refresh_token: grant.refresh_token });
    expect(emptied.status).toBe(400);
    expect(((await emptied.json()) as { error: string }).error).toBe('invalid_grant');
    expect(await introspect(application, grant.refresh_token)).toEqual({ active: false });
  });

  it('a refresh token issued before resources were configured is given the application default', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const userId = await registerUser(running.store);
    const { code } = await issueAuthorizationCode(running, application, userId);
    const grant = (await (await tokenRequest(application, { grant_type: 'authorization_code', code, redirect_uri: application.redirectUri })).json()) as {
      access_token: string;
    };
    expect(await introspect(application, grant.access_token)).toMatchObject({ aud: [USER_API, ORGANIZER_API] });
  });

  it('/oauth/authorize takes repeated resource parameters into the code, and sends invalid_target back to the application', async () => {
    const email = `fan-${randomBytes(4).toString('hex')}@example.com`;
    await createUser(running.store, `user-${randomBytes(4).toString('hex')}`, email, 'correct horse battery');
    const application = await registerApplication(running.store, { scopes: ['public'], confidential: false });
    const verifier = randomBytes(32).toString('base64url');
    const base = {
      client_id: application.clientId,
      redirect_uri: application.redirectUri,
      response_type: 'code',
      state: 'state-1',
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    };
    const browser = new FormClient(running.baseUrl, { 'x-forwarded-for': `10.${randomBytes(3).join('.')}` });
    const unknown = await browser.get(authorizePath({ ...base, resource: 'https://api.ticketing.example/unknown' }));
    expect(unknown.status).toBe(302);
    const refusal = new URL(unknown.location!);
    expect(refusal.searchParams.get('error')).toBe('invalid_target');
    expect(refusal.searchParams.get('state')).toBe('state-1');

    const login = await browser.get(authorizePath({ ...base, resource: [USER_API, ORGANIZER_API] }));
    const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email, password: 'correct horse battery' });
    const consent = await browser.follow(signedIn);
    expect(consent.status).toBe(200);
    // The user sees which APIs the approval is for.
    expect(consent.text).toContain('Only at <strong>api.ticketing.example/api/public</strong>, <strong>api.ticketing.example/organizer</strong>.');
    const approved = await browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    const code = new URL(approved.location!).searchParams.get('code')!;
    const exchanged = await postForm(`${running.baseUrl}/oauth/token`, {
      grant_type: 'authorization_code',
      client_id: application.clientId,
      code,
      redirect_uri: application.redirectUri,
      code_verifier: verifier,
      resource: ORGANIZER_API,
    });
    expect(exchanged.status).toBe(200);
    const { access_token: token } = (await exchanged.json()) as { access_token: string };
    expect((await fetch(`${running.baseUrl}/organizer/events`, { headers: bearer(token) })).status).toBe(200);
    expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) })).status).toBe(401);
  });
});

describe('applications limited to resources (admin API)', () => {
  it('PATCH resources takes configured identifiers only, shows them, and [] lifts the limit', async () => {
    const application = await registerApplication(running.store, { scopes: ['public'] });
    const unknown = await admin('PATCH', `/applications/${application.clientId}`, { resources: ['https://elsewhere.example/api'] });
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as { error_description: string }).error_description).toContain(
      'resources: unknown resource "https://elsewhere.example/api"',
    );
    const limited = await admin('PATCH', `/applications/${application.clientId}`, { resources: [ORGANIZER_API] });
    expect(((await limited.json()) as { resources: string[] }).resources).toEqual([ORGANIZER_API]);
    expect(await introspect(application, await clientCredentialsToken(application))).toMatchObject({ aud: [ORGANIZER_API] });
    const lifted = await admin('PATCH', `/applications/${application.clientId}`, { resources: [] });
    expect(((await lifted.json()) as { resources: string[] }).resources).toEqual([]);
    expect(await introspect(application, await clientCredentialsToken(application))).toMatchObject({ aud: [USER_API, ORGANIZER_API] });
  });
});

describe('resources in the config', () => {
  function problemsOf(text: string) {
    try {
      parseConfig(text, 'tokengate.yaml', {});
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      return (error as ConfigError).problems;
    }
    throw new Error('the config was accepted');
  }

  it('names the key and line of an identifier that is not an https URI without query or fragment, or listed twice', () => {
    const problems = problemsOf(`server:
  port: 8080
resources:
  - identifier: http://api.ticketing.example/api
  - identifier: https://api.ticketing.example/api#top
  - identifier: https://api.ticketing.example/api/
  - identifier: https://API.ticketing.example/api
  - identifier: https://api.ticketing.example/a%2Fb
  - identifier: api/public
  - identifier: http://localhost:8080/api
  - identifier: http://localhost:8080/api
  - identifier: https://other.example/api
`);
    expect(problems).toEqual([
      { path: 'resources[0].identifier', line: 4, message: expect.stringContaining('must be https') },
      { path: 'resources[1].identifier', line: 5, message: expect.stringContaining('must not have a query or fragment') },
      { path: 'resources[2].identifier', line: 6, message: expect.stringContaining('must not end with "/"') },
      { path: 'resources[3].identifier', line: 7, message: expect.stringContaining('must be written as https://api.ticketing.example/api') },
      { path: 'resources[4].identifier', line: 8, message: expect.stringContaining('canonical form') },
      { path: 'resources[5].identifier', line: 9, message: expect.stringContaining('is not an absolute URI') },
      { path: 'resources[7].identifier', line: 11, message: expect.stringContaining('listed more than once') },
      { path: 'resources[8].identifier', line: 12, message: expect.stringContaining('same path as resources[6]') },
    ]);
  });

  it('names a route whose resource is not listed', () => {
    expect(
      problemsOf(`resources:
  - identifier: https://api.ticketing.example/api/public
routes:
  - path: /api/public/me
    upstream: http://127.0.0.1:3001
    resource: https://api.ticketing.example/api/publik
`),
    ).toEqual([{ path: 'routes[0].resource', line: 6, message: expect.stringContaining('is not the identifier of one of resources[]') }]);
  });
});

describe('a config reload', () => {
  it('applies new resources with the routes: their metadata, their challenges and the issuer see them; an unknown one keeps the running config', async () => {
    const reloaded = await startTokengate('resource-reload', { config: { routes: [{ path: '/mcp', token: 'any', upstream: upstream.url }] } });
    try {
      const mcp = 'https://mcp.ticketing.example/mcp';
      const reloadWith = (changes: Record<string, unknown>) => {
        const current = reloaded.tokengate.context.config;
        return reloaded.tokengate.reload(() => parseConfig(JSON.stringify({ ...current, ...changes }), 'reloaded config', {}));
      };
      expect((await fetch(`${reloaded.baseUrl}${METADATA}/mcp`)).status).toBe(404);
      const applied = reloadWith({
        resources: [{ identifier: mcp }],
        routes: [{ path: '/mcp', token: 'any', upstream: upstream.url, resource: mcp, dpop: 'required' }],
      });
      expect(applied).toMatchObject({ result: 'success', applied: ['resources', 'routes'] });
      // Its one route takes DPoP-bound tokens only, and its metadata says so (RFC 9449 section 5.2).
      expect(await (await fetch(`${reloaded.baseUrl}${METADATA}/mcp`)).json()).toMatchObject({ resource: mcp, dpop_bound_access_tokens_required: true });
      expect((await fetch(`${reloaded.baseUrl}/mcp`)).headers.get('www-authenticate')).toContain(
        `resource_metadata="https://mcp.ticketing.example${METADATA}/mcp"`,
      );
      const application = await registerApplication(reloaded.store, { scopes: ['public'] });
      const response = await postForm(
        `${reloaded.baseUrl}/oauth/token`,
        { grant_type: 'client_credentials', resource: mcp },
        { authorization: basicAuthorization(application.clientId, application.clientSecret!) },
      );
      expect(response.status).toBe(200);

      const refused = reloadWith({ routes: [{ path: '/mcp', token: 'any', upstream: upstream.url, resource: 'https://mcp.ticketing.example/other' }] });
      expect(refused).toMatchObject({ result: 'failure', problems: [expect.objectContaining({ path: 'routes[0].resource' })] });
      expect(reloaded.tokengate.context.config.routes[0]!.resource).toBe(mcp);
    } finally {
      await reloaded.close();
    }
  });
});
