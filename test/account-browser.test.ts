import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nginxDecisionCacheConf } from '../examples/ingress/configs.mjs';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { accessibilityViolations as violationsIn, launchChromium, personContext } from './support/browser.js';
import { installed, nginxCommand, startIngress, startTicketingApi, type Ingress } from './support/ingress.js';
import { postForm, startTokengate, type RunningTokengate } from './support/instance.js';
import { application, authorizePath, createUser } from './support/issuer.js';
import { freePort } from './support/ports.js';
import { eventually, sleep } from './support/wait.js';

/**
 * The user's side in headless Chromium, end to end: two tokengate sidecars on one Redis (the
 * user's browser talks to the first, the second guards a real upstream and answers nginx's
 * checks), and nginx keeping decisions and following the revocation feed.
 *
 * - a second authorization of an approved confidential application lands on its callback with
 *   no consent page; a public client is shown the page again;
 * - Disconnect on the account page: that application's access tokens answer 401 at the other
 *   sidecar and through nginx's decision cache within a second, its refresh token is refused,
 *   the user's other application keeps working;
 * - forged forms from another site (posted across sites, or from a same-site page without the
 *   token) and a cross-site GET disconnect and sign out nothing; sign-out ends the session;
 * - axe-core finds no WCAG 2.1 AA violation on the sign-in, consent and account pages, in
 *   light and dark colours.
 *
 * The person's browser runs without JavaScript and under the pages' own CSP, as the pages must
 * work; axe-core runs in a context of its own (./support/browser.ts); the CSP itself is checked
 * in the person's context, where no violation may show.
 */
/** The stated reach of a disconnection: every sidecar and every ingress within a second. */
const REVOCATION_BOUND_MS = 1_000;

const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats forever';
const FESTIVAL_SECRET = 'festival-secret-0123456789';

let userApi: Awaited<ReturnType<typeof startTicketingApi>>;
let organizerApi: Awaited<ReturnType<typeof startTicketingApi>>;
/** The sidecar whose pages the person uses. */
let issuer: RunningTokengate;
/** Another sidecar of the deployment, on the same Redis: its gateway forwards to the user API, its decision listener answers nginx. */
let sidecar: RunningTokengate;
let ingress: Ingress;
let ingressClient: Pool;
let callback: { server: Server; port: number; received: URL[] };
let browser: Browser;
/** The person's browser: no JavaScript, the pages' CSP enforced. */
let person: BrowserContext;
/** What Chromium reported of the pages' Content-Security-Policy (a refused stylesheet, a refused form target). */
const policyViolations: string[] = [];
/** Checks nginx asked the second sidecar's decision listener (polls of the feed are not checks). */
let checksAsked = 0;
let festival: { redirectUri: string; accessTokens: string[]; refreshToken: string };
let merch: { redirectUri: string; accessToken: string; refreshToken: string };

async function startCallback(): Promise<typeof callback> {
  const received: URL[] = [];
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', `http://${request.headers.host}`);
    // Chromium asks for /favicon.ico too.
    if (url.pathname === '/callback') received.push(url);
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Back at the application</title><p>Signed in.</p>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, received };
}

beforeAll(async () => {
  if (!installed('nginx', '-v') || !existsSync('/usr/lib/nginx/modules/ngx_http_lua_module.so')) {
    throw new Error('nginx and its Lua module are not installed: apt-get install -y nginx libnginx-mod-http-lua (.ci/run installs them)');
  }
  [userApi, organizerApi, callback] = await Promise.all([startTicketingApi('user'), startTicketingApi('organizer'), startCallback()]);
  const routes = [
    { path: '/api/public/me', methods: ['GET'], token: 'user', scopes: ['public'], upstream: `http://${userApi.address}`, decisionCacheSeconds: 30 },
  ];
  const issuerConfig = {
    scopes: ['public', 'organizer'],
    scopeDescriptions: { public: 'See your profile and manage your tickets', organizer: 'Manage the events you organize' },
  };
  issuer = await startTokengate('account-browser', { config: { routes, issuer: issuerConfig } });
  const decisionsPort = await freePort();
  sidecar = await startTokengate('account-browser-sidecar', {
    sharing: issuer,
    config: { routes, issuer: issuerConfig, decisions: { enabled: true, port: decisionsPort } },
  });
  sidecar.tokengate.decisions!.server.prependListener('request', (request: IncomingMessage) => {
    if (!request.url!.startsWith('/revocations')) checksAsked += 1;
  });
  const decisions = `127.0.0.1:${decisionsPort}`;
  ingress = await startIngress(
    'nginx',
    (address) => nginxDecisionCacheConf({ ingress: address, decisions, userApi: userApi.address, organizerApi: organizerApi.address }),
    nginxCommand,
  );
  ingressClient = new Pool(`http://127.0.0.1:${ingress.port}`, { connections: 4 });

  festival = { redirectUri: `http://festival.test:${callback.port}/callback`, accessTokens: [], refreshToken: '' };
  merch = { redirectUri: `http://merch.test:${callback.port}/callback`, accessToken: '', refreshToken: '' };
  await issuer.store.applications.put(
    application({
      clientId: 'festival',
      name: 'Festival Tickets',
      secretDigest: clientSecretDigest(FESTIVAL_SECRET),
      redirectUris: [festival.redirectUri],
      scopes: ['public', 'organizer'],
    }),
  );
  await issuer.store.applications.put(
    application({ clientId: 'merch', name: 'Merch Shop', secretDigest: null, confidential: false, redirectUris: [merch.redirectUri] }),
  );
  await createUser(issuer.store, 'user-fan', EMAIL, PASSWORD);

  browser = await launchChromium(['festival.test', 'merch.test', 'attacker.test']);
  person = await personContext(browser, policyViolations);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await ingressClient?.close();
  await ingress?.close();
  await sidecar?.close();
  await issuer?.close();
  await Promise.all([userApi?.close(), organizerApi?.close()]);
  callback?.server.closeAllConnections();
  await new Promise((resolve) => callback?.server.close(resolve));
});

function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

function authorizeUrl(clientId: string, redirectUri: string, extra: Record<string, string> = {}): string {
  return `${issuer.baseUrl}${authorizePath({ client_id: clientId, redirect_uri: redirectUri, response_type: 'code', state: randomBytes(4).toString('hex'), ...extra })}`;
}

/** Approves on the consent page the browser shows, and returns the code the application's callback received. */
async function approve(page: Page, redirectUri: string): Promise<string> {
  await Promise.all([page.waitForURL((url) => url.href.startsWith(redirectUri)), page.getByRole('button', { name: 'Approve' }).click()]);
  return new URL(page.url()).searchParams.get('code')!;
}

async function exchange(code: string, clientId: string, redirectUri: string, verifier?: string): Promise<{ access_token: string; refresh_token: string }> {
  const credentials = verifier === undefined ? { client_secret: FESTIVAL_SECRET } : { code_verifier: verifier };
  const response = await postForm(`${issuer.baseUrl}/oauth/token`, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: redirectUri,
    client_id: clientId,
    ...credentials,
  });
  const body = (await response.json()) as { access_token: string; refresh_token: string };
  expect(response.status, JSON.stringify(body)).toBe(200);
  return body;
}

/** The status of the user API through the other sidecar's gateway. */
async function atSidecar(token: string): Promise<number> {
  const response = await fetch(`${sidecar.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
  await response.arrayBuffer();
  return response.status;
}

/** The status of the user API through nginx. */
async function atIngress(token: string): Promise<number> {
  const { statusCode, body } = await ingressClient.request({ method: 'GET', path: '/api/public/me', headers: { authorization: `Bearer ${token}` } });
  await body.dump();
  return statusCode;
}

/** nginx keeps the token's decision: asked once, then answered from its cache. */
async function keptAtIngress(token: string): Promise<boolean> {
  expect(await atIngress(token)).toBe(200);
  const before = checksAsked;
  return (await atIngress(token)) === 200 && checksAsked === before;
}

/** The WCAG 2.1 A and AA violations on the page at `url`: with the person's cookies (`signedIn`), or none. */
function accessibilityViolations(url: string, colorScheme: 'light' | 'dark', signedIn: boolean) {
  return violationsIn(browser, url, colorScheme, signedIn ? person : null);
}

describe('the user side in Chromium', () => {
  it('signs in and approves two applications; a second authorization of the confidential one shows no consent page', async () => {
    const page = await person.newPage();
    await page.goto(authorizeUrl('festival', festival.redirectUri));
    expect(await page.title()).toBe('Sign in · Ticketing');
    await page.getByLabel('E-mail address').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Festival Tickets wants to access your Ticketing account');
    const first = await exchange(await approve(page, festival.redirectUri), 'festival', festival.redirectUri);

    // Again: straight back to the application, no page in between.
    const received = callback.received.length;
    await page.goto(authorizeUrl('festival', festival.redirectUri));
    expect(page.url().startsWith(festival.redirectUri)).toBe(true);
    expect(await page.title()).toBe('Back at the application');
    expect(callback.received.length).toBe(received + 1);
    const second = await exchange(new URL(page.url()).searchParams.get('code')!, 'festival', festival.redirectUri);
    festival.accessTokens = [first.access_token, second.access_token];
    festival.refreshToken = second.refresh_token;

    // The public client: the consent page, each time.
    for (let round = 0; round < 2; round++) {
      const proof = pkce();
      await page.goto(authorizeUrl('merch', merch.redirectUri, { code_challenge: proof.challenge, code_challenge_method: 'S256' }));
      await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Merch Shop wants to access your Ticketing account');
      if (round === 1) expect(await page.locator('main').textContent()).toContain('You are asked each time');
      const tokens = await exchange(await approve(page, merch.redirectUri), 'merch', merch.redirectUri, proof.verifier);
      merch.accessToken = tokens.access_token;
      merch.refreshToken = tokens.refresh_token;
    }
    await page.close();

    // Both work at the other sidecar and through nginx, which keeps their decisions.
    for (const token of [...festival.accessTokens, merch.accessToken]) {
      expect(await atSidecar(token)).toBe(200);
      await eventually(() => keptAtIngress(token), 5_000);
    }
  });

  it('finds no WCAG 2.1 AA violation on the sign-in, consent and account pages (and the signed-out page), light or dark', async () => {
    const pages: Array<[string, string, boolean]> = [
      ['Sign in · Ticketing', authorizeUrl('merch', merch.redirectUri, { code_challenge: pkce().challenge, code_challenge_method: 'S256' }), false],
      ['Authorize Festival Tickets · Ticketing', authorizeUrl('festival', festival.redirectUri, { prompt: 'consent' }), true],
      ['Authorize Festival Tickets · Ticketing', authorizeUrl('festival', festival.redirectUri, { scope: 'public organizer' }), true],
      ['Connected applications · Ticketing', `${issuer.baseUrl}/oauth/account`, true],
      ['Signed out · Ticketing', `${issuer.baseUrl}/oauth/account/signed-out`, false],
    ];
    for (const colorScheme of ['light', 'dark'] as const) {
      for (const [title, url, signedIn] of pages) {
        expect({ colorScheme, ...(await accessibilityViolations(url, colorScheme, signedIn)) }).toEqual({ colorScheme, title, violations: [] });
      }
    }
  });

  it('forged forms from other sites, and a cross-site GET, disconnect and sign out nothing', async () => {
    const attacker = createServer((request, response) => {
      const target = `${issuer.baseUrl}${request.url === '/sign-out' ? '/oauth/account/sign-out' : '/oauth/account/disconnect'}`;
      response
        .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
        .end(
          `<!doctype html><title>Win tickets</title><form method="post" action="${target}"><input type="hidden" name="client_id" value="merch"><input type="hidden" name="csrf_token" value="guessed"><button>Claim your prize</button></form><a href="${issuer.baseUrl}/oauth/account/sign-out">Or here</a>`,
        );
    });
    await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
    const port = (attacker.address() as AddressInfo).port;
    const page = await person.newPage();
    try {
      // Another site (no session cookie comes along: SameSite=Lax), and a page of the same site (the cookie comes, the token is wrong).
      for (const origin of [`http://attacker.test:${port}`, `http://127.0.0.1:${port}`]) {
        for (const path of ['/disconnect', '/sign-out']) {
          await page.goto(`${origin}${path}`);
          await Promise.all([page.waitForURL((url) => url.href.startsWith(issuer.baseUrl)), page.getByRole('button', { name: 'Claim your prize' }).click()]);
          expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('This page has expired');
        }
        await page.goto(`${origin}/`);
        await Promise.all([page.waitForURL((url) => url.href.startsWith(issuer.baseUrl)), page.getByRole('link', { name: 'Or here' }).click()]);
      }
    } finally {
      await page.close();
      attacker.closeAllConnections();
      await new Promise((resolve) => attacker.close(resolve));
    }
    // Still signed in, still connected, still working.
    const account = await person.newPage();
    await account.goto(`${issuer.baseUrl}/oauth/account`);
    expect(await account.getByRole('heading', { level: 2 }).allTextContents()).toEqual(['Merch Shop', 'Festival Tickets']);
    await account.close();
    expect(await atSidecar(merch.accessToken)).toBe(200);
  });

  it(`Disconnect ends the application's tokens at the other sidecar and through nginx within ${REVOCATION_BOUND_MS} ms, its refresh token with them; the other application keeps working`, async () => {
    const page = await person.newPage();
    await page.goto(`${issuer.baseUrl}/oauth/account`);
    expect(await page.title()).toBe('Connected applications · Ticketing');
    const connection = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'Festival Tickets' }) });
    expect(await connection.locator('.muted').textContent()).toBe(`festival.test:${callback.port}`);
    expect(await connection.getByRole('list').getByRole('listitem').allTextContents()).toEqual(['See your profile and manage your tickets']);
    for (const token of festival.accessTokens) expect([await atSidecar(token), await keptAtIngress(token)]).toEqual([200, true]);

    await page.getByRole('button', { name: 'Disconnect Festival Tickets' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Festival Tickets is disconnected: its access has ended.');
    const disconnected = performance.now();
    const refusedEverywhere = async () => {
      const statuses = await Promise.all(festival.accessTokens.flatMap((token) => [atSidecar(token), atIngress(token)]));
      return statuses.every((status) => status === 401);
    };
    while (!(await refusedEverywhere())) {
      if (performance.now() - disconnected > 5_000) break;
      await sleep(10);
    }
    const delay = performance.now() - disconnected;
    process.stdout.write(`disconnection seen at the other sidecar and through nginx after ${delay.toFixed(1)} ms\n`);
    expect(await refusedEverywhere()).toBe(true);
    expect(delay).toBeLessThanOrEqual(REVOCATION_BOUND_MS);
    expect(await page.getByRole('heading', { level: 2 }).allTextContents()).toEqual(['Merch Shop']);
    await page.close();

    const refresh = await postForm(`${issuer.baseUrl}/oauth/token`, {
      grant_type: 'refresh_token',
      refresh_token: festival.refreshToken,
      client_id: 'festival',
      client_secret: FESTIVAL_SECRET,
    });
    expect([refresh.status, ((await refresh.json()) as { error: string }).error]).toEqual([400, 'invalid_grant']);

    // The other application: its token, its refresh, its kept decision.
    expect([await atSidecar(merch.accessToken), await atIngress(merch.accessToken)]).toEqual([200, 200]);
    const renewed = await postForm(`${issuer.baseUrl}/oauth/token`, { grant_type: 'refresh_token', refresh_token: merch.refreshToken, client_id: 'merch' });
    expect(renewed.status).toBe(200);
  });

  it('signs out: the session ends, and the next authorization asks to sign in; the CSP held on every page', async () => {
    const page = await person.newPage();
    await page.goto(`${issuer.baseUrl}/oauth/account`);
    await Promise.all([page.waitForURL(`${issuer.baseUrl}/oauth/account/signed-out`), page.getByRole('button', { name: 'Sign out' }).click()]);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('You are signed out');
    await page.goto(authorizeUrl('festival', festival.redirectUri));
    expect(await page.title()).toBe('Sign in · Ticketing');
    await page.close();
    expect(policyViolations).toEqual([]);
  });
});
