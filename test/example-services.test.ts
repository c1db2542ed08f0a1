import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDemoApp } from '../examples/demo/demo-app.mjs';
import { IDENTITY_HEADERS, createTicketingApi } from '../examples/ticketing-api/server.mjs';
import { APPLICATION_TOKEN, closeServer } from './support/gateway.js';
import { startTokengate, TEST_ADMIN_TOKEN, type RunningTokengate } from './support/instance.js';
import { FormClient, application } from './support/issuer.js';
import { freePort } from './support/ports.js';

/**
 * The examples/ services behind a real tokengate: the ticketing API answers only what came
 * through the gateway, and the demo application refuses a callback its browser did not start.
 */

async function listen(server: Server, port = 0): Promise<string> {
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

interface Answer {
  status: number;
  body: Record<string, unknown> & { received: { query: string; identity: Record<string, unknown> | null; headers: Record<string, string> } };
}

async function call(url: string, init: RequestInit = {}): Promise<Answer> {
  const response = await fetch(url, init);
  return { status: response.status, body: (await response.json()) as Answer['body'] };
}

describe('examples/ticketing-api behind tokengate', () => {
  let api: Server;
  let apiUrl: string;
  let gateway: RunningTokengate;

  beforeAll(async () => {
    api = createTicketingApi({ api: 'all' });
    apiUrl = await listen(api);
    gateway = await startTokengate('example-ticketing-api', {
      config: {
        routes: [
          { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', scopes: ['public'], upstream: apiUrl },
          { path: '/api/public/tickets', token: 'user', scopes: ['public'], upstream: apiUrl },
          { path: '/api/public/events', token: 'application', scopes: ['public'], upstream: apiUrl },
        ],
      },
    });
  });
  afterAll(async () => {
    await gateway?.close();
    if (api) await closeServer(api);
  });

  it("answers /api/public/me with the identity tokengate vouched for, never a credential or a client's own identity header", async () => {
    const token = await gateway.issue({ userId: 'user-ana' });
    const me = await call(`${gateway.baseUrl}/api/public/me?access_token=${token}`, {
      headers: { [IDENTITY_HEADERS.userId]: 'user-mallory', [IDENTITY_HEADERS.tokenKind]: 'user' },
    });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ user_id: 'user-ana', scopes: ['public'] });
    expect(me.body.received.identity).toEqual({ user_id: 'user-ana', client_id: 'client-web', scopes: ['public'], token_kind: 'user' });
    expect(me.body.received.query).toBe('');
    expect(JSON.stringify(me.body)).not.toContain(token);
    expect(JSON.stringify(me.body)).not.toContain('user-mallory');
  });

  it('refuses a request that did not come through tokengate, or carries another kind of identity', async () => {
    const bare = await call(`${apiUrl}/api/public/me`);
    expect(bare.status).toBe(403);
    expect(bare.body).toMatchObject({ error: 'forbidden', received: { identity: null } });
    const applicationOnUserApi = await call(`${apiUrl}/api/public/tickets`, {
      headers: { [IDENTITY_HEADERS.clientId]: 'c', [IDENTITY_HEADERS.tokenKind]: 'application' },
    });
    expect(applicationOnUserApi.status).toBe(403);
    const kindWithoutUser = await call(`${apiUrl}/api/public/me`, { headers: { [IDENTITY_HEADERS.clientId]: 'c', [IDENTITY_HEADERS.tokenKind]: 'user' } });
    expect(kindWithoutUser.status).toBe(403);
  });

  it("keeps each user's tickets and each organizer's events to themselves", async () => {
    const [ana, bo, organizer] = await Promise.all([
      gateway.issue({ userId: 'user-ana' }),
      gateway.issue({ userId: 'user-bo' }),
      gateway.issue({ ...APPLICATION_TOKEN }),
    ]);
    const bearer = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });
    const bought = await call(`${gateway.baseUrl}/api/public/tickets`, {
      method: 'POST',
      headers: bearer(ana),
      body: JSON.stringify({ event: 'Summer festival' }),
    });
    expect(bought.status).toBe(201);
    expect(bought.body.ticket).toMatchObject({ event: 'Summer festival', user_id: 'user-ana' });
    expect((await call(`${gateway.baseUrl}/api/public/tickets`, { headers: bearer(ana) })).body.tickets).toEqual([bought.body.ticket]);
    expect((await call(`${gateway.baseUrl}/api/public/tickets`, { headers: bearer(bo) })).body.tickets).toEqual([]);

    const created = await call(`${gateway.baseUrl}/api/public/events`, {
      method: 'POST',
      headers: bearer(organizer),
      body: JSON.stringify({ name: 'Winter gala' }),
    });
    expect(created).toMatchObject({ status: 201, body: { event: { name: 'Winter gala', organizer: APPLICATION_TOKEN.clientId } } });
    expect((await call(`${gateway.baseUrl}/api/public/events`, { headers: bearer(organizer) })).body.events).toEqual([created.body.event]);
  });

  it("answers a bad body, an unknown path and another API's path with a JSON error", async () => {
    const token = await gateway.issue({ userId: 'user-ana' });
    const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    expect(await call(`${gateway.baseUrl}/api/public/tickets`, { method: 'POST', headers, body: '{"event":' })).toMatchObject({
      status: 400,
      body: { error: 'invalid_request' },
    });
    expect(await call(`${gateway.baseUrl}/api/public/tickets`, { method: 'POST', headers, body: '{}' })).toMatchObject({
      status: 400,
      body: { error: 'invalid_request' },
    });
    expect(await call(`${gateway.baseUrl}/api/public/tickets/x`, { headers })).toMatchObject({ status: 404, body: { error: 'not_found' } });
    expect(await call(`${gateway.baseUrl}/api/public/tickets`, { method: 'DELETE', headers })).toMatchObject({ status: 405 });

    const userOnly = createTicketingApi({ api: 'user' });
    try {
      const url = await listen(userOnly);
      const organizerHeaders = { [IDENTITY_HEADERS.clientId]: 'c', [IDENTITY_HEADERS.tokenKind]: 'application' };
      expect(await call(`${url}/api/public/events`, { headers: organizerHeaders })).toMatchObject({
        status: 404,
        body: { error_description: 'This user API has no /api/public/events.' },
      });
    } finally {
      await closeServer(userOnly);
    }
  });
});

describe('examples/demo: the demo application', () => {
  let issuer: RunningTokengate;
  let demo: Server;
  let demoUrl: string;
  const clientId = 'demo-fan-app';

  beforeAll(async () => {
    const port = await freePort();
    issuer = await startTokengate('example-demo-app', { port, config: { issuer: { issuerUrl: `http://127.0.0.1:${port}` } } });
    const demoPort = await freePort();
    const callbackUrl = `http://127.0.0.1:${demoPort}/callback`;
    demo = createDemoApp({ callbackUrl, publicUrl: issuer.baseUrl, opsUrl: issuer.opsUrl, adminToken: TEST_ADMIN_TOKEN });
    demoUrl = await listen(demo, demoPort);
    await issuer.store.applications.put(application({ clientId, name: 'Fan <app>', secretDigest: null, confidential: false, redirectUris: [callbackUrl] }));
    await issuer.store.applications.put(application({ clientId: 'confidential-one', name: 'Box office', redirectUris: [callbackUrl] }));
  });
  afterAll(async () => {
    if (demo) await closeServer(demo);
    await issuer?.close();
  });

  it('offers the public applications registered with its callback, escaped, and not the confidential ones', async () => {
    const home = await new FormClient(demoUrl).get('/');
    expect(home.status).toBe(200);
    expect(home.text).toContain(`<a href="/sign-in?client_id=${clientId}">Sign in with Fan &#60;app&#62;</a>`);
    expect(home.text).not.toContain('Box office');
  });

  it('starts a sign-in with PKCE (S256) and a state bound to this browser by a cookie', async () => {
    const browser = new FormClient(demoUrl);
    const started = await browser.get(`/sign-in?client_id=${clientId}`);
    expect(started.status).toBe(303);
    const authorize = new URL(started.location!);
    expect(authorize.href.startsWith(`${issuer.baseUrl}/oauth/authorize?`)).toBe(true);
    expect(Object.fromEntries(authorize.searchParams)).toMatchObject({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: `${demoUrl}/callback`,
      code_challenge_method: 'S256',
    });
    expect(authorize.searchParams.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(browser.cookies.get('demo_state')).toBe(authorize.searchParams.get('state'));
    expect(started.headers.get('set-cookie')).toMatch(/; HttpOnly; SameSite=Lax;/);
  });

  it("refuses a callback whose state this browser did not start: a forged state, or another browser's sign-in", async () => {
    const forged = await new FormClient(demoUrl).get('/callback?code=x&state=forged');
    expect(forged.status).toBe(400);
    expect(forged.text).toContain('Not a sign-in of this browser');

    // An attacker starts a sign-in and sends the victim to the callback with the attacker's state (login CSRF).
    const attacker = new FormClient(demoUrl);
    const attackerState = new URL((await attacker.get(`/sign-in?client_id=${clientId}`)).location!).searchParams.get('state')!;
    const victim = new FormClient(demoUrl);
    await victim.get(`/sign-in?client_id=${clientId}`);
    const injected = await victim.get(`/callback?code=attacker-code&state=${attackerState}`);
    expect(injected.status).toBe(400);
    expect(injected.text).not.toContain('attacker-code');
  });
});
