import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRemoteJWKSet, decodeJwt, jwtVerify, type JWTPayload } from 'jose';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { BACKCHANNEL_LOGOUT_EVENT } from '../src/logout/logout-token.js';
import { accessibilityViolations, launchChromium, personContext } from './support/browser.js';
import { postForm, startTokengate, type RunningTokengate } from './support/instance.js';
import { application, authorizePath, createUser } from './support/issuer.js';
import { eventually } from './support/wait.js';

/**
 * Sign-out for the applications in headless Chromium, the person's browser without JavaScript:
 *
 * - the application's sign-out link with the ID token it got (the code flow with `openid`) and its registered
 *   post_logout_redirect_uri asks, then ends the session and lands on the application's page
 *   with `state`; the next authorization asks to sign in, and signing in right there sends the
 *   person on to the application with a code whose ID token names the new session; the
 *   application's back-channel endpoint receives a logout token for that session, which verifies
 *   with jose against /.well-known/jwks.json;
 * - after the account page's sign-out, the same: a sign-in on the authorization page of an
 *   application approved before ends at the application with a code (the sign-in page's CSP
 *   form-action lets that redirect through);
 * - the application's sign-out form, posted from its own site (no session cookie comes along:
 *   SameSite=Lax), still reaches the question with the session;
 * - another site's link only asks, and its forged answer signs no one out;
 * - a back-channel endpoint that hangs keeps no page waiting: sign-out and Disconnect answer
 *   while it holds their requests, and Disconnect's token (sub alone) verifies;
 * - axe-core finds no WCAG 2.1 AA violation on the confirmation page, light or dark.
 */

const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats forever';
const USER_ID = 'user-fan';
const SECRET = 'festival-secret-0123456789';

let issuer: RunningTokengate;
let site: { server: Server; port: number; origin: string };
let receiver: { server: Server; uri: string; tokens: string[]; held: ServerResponse[]; hang: boolean };
let browser: Browser;
let person: BrowserContext;
const policyViolations: string[] = [];
let festival: { redirectUri: string; signedOut: string };

/** The application's site: its callback, its signed-out page, and a page with its sign-out form. */
async function startSite(): Promise<typeof site> {
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', `http://${request.headers.host}`);
    const page = (title: string, body = '') =>
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(`<!doctype html><title>${title}</title><h1>${title}</h1>${body}`);
    if (url.pathname === '/sign-out-form') {
      const fields = Object.entries({ client_id: 'festival', post_logout_redirect_uri: festival.signedOut, state: 'from-form' })
        .map(([name, value]) => `<input type="hidden" name="${name}" value="${value}">`)
        .join('');
      return page('Festival account', `<form method="post" action="${issuer.baseUrl}/oauth/logout">${fields}<button>Sign out everywhere</button></form>`);
    }
    if (url.pathname === '/attack') {
      return page(
        'Win tickets',
        `<a href="${issuer.baseUrl}/oauth/logout?client_id=festival">Click here</a><form method="post" action="${issuer.baseUrl}/oauth/logout/confirm"><input type="hidden" name="csrf_token" value="guessed"><input type="hidden" name="decision" value="sign-out"><button>Claim your prize</button></form>`,
      );
    }
    return page(url.pathname === '/signed-out' ? 'Signed out of Festival' : 'Back at the application');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { server, port, origin: `http://festival.test:${port}` };
}

/** The application's back-channel logout endpoint: records each logout token; answers 200, or holds the request while `hang`. */
async function startReceiver(): Promise<typeof receiver> {
  const tokens: string[] = [];
  const held: ServerResponse[] = [];
  const state = { server: undefined as unknown as Server, uri: '', tokens, held, hang: false };
  state.server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      tokens.push(new URLSearchParams(body).get('logout_token')!);
      if (state.hang) held.push(response);
      else response.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve));
  state.uri = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}/backchannel-logout`;
  return state;
}

beforeAll(async () => {
  [site, receiver] = await Promise.all([startSite(), startReceiver()]);
  festival = { redirectUri: `${site.origin}/callback`, signedOut: `${site.origin}/signed-out` };
  issuer = await startTokengate('logout-browser', { config: { openidConnect: { enabled: true } } });
  await issuer.store.applications.put(
    application({
      clientId: 'festival',
      name: 'Festival Tickets',
      secretDigest: clientSecretDigest(SECRET),
      redirectUris: [festival.redirectUri],
      postLogoutRedirectUris: [festival.signedOut],
      backchannelLogoutUri: receiver.uri,
      scopes: ['public', 'openid'],
    }),
  );
  await createUser(issuer.store, USER_ID, EMAIL, PASSWORD);
  browser = await launchChromium(['festival.test', 'attacker.test']);
  person = await personContext(browser, policyViolations);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await issuer?.close();
  for (const server of [site?.server, receiver?.server]) {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  }
});

const authorizeUrl = () =>
  `${issuer.baseUrl}${authorizePath({ client_id: 'festival', redirect_uri: festival.redirectUri, response_type: 'code', scope: 'openid public', state: 'a', nonce: 'n-1' })}`;

/**
 * Festival asks for authorization; the person signs in on that page unless signed in already, and
 * approves Festival the first time. Returns the code Festival receives.
 */
async function signIn(): Promise<string> {
  const page = await person.newPage();
  await page.goto(authorizeUrl());
  const code = (await page.title()) === 'Sign in · Ticketing' ? await signInOnThisPage(page) : await codeAfterApproval(page);
  await page.close();
  return code;
}

/**
 * Signs in on the authorization request's sign-in page `page` shows; returns Festival's code. The
 * consent page has the sign-in page's URL, so the wait is for the sign-in form to go, not for a URL.
 */
async function signInOnThisPage(page: Page): Promise<string> {
  await page.getByLabel('E-mail address').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  const signInButton = page.getByRole('button', { name: 'Sign in' });
  await signInButton.click();
  await signInButton.waitFor({ state: 'detached', timeout: 10_000 });
  return codeAfterApproval(page);
}

/** Festival's code: on its callback already when it is approved, else after Approve on the consent page. */
async function codeAfterApproval(page: Page): Promise<string> {
  if (!page.url().startsWith(festival.redirectUri)) {
    await Promise.all([page.waitForURL((url) => url.href.startsWith(festival.redirectUri)), page.getByRole('button', { name: 'Approve' }).click()]);
  }
  const code = new URL(page.url()).searchParams.get('code');
  expect(code).toEqual(expect.any(String));
  return code!;
}

/** The ID token Festival gets for `code` at the token endpoint. */
async function idTokenFor(code: string): Promise<string> {
  const response = await postForm(`${issuer.baseUrl}/oauth/token`, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: festival.redirectUri,
    client_id: 'festival',
    client_secret: SECRET,
  });
  const body = (await response.json()) as { id_token?: string };
  expect(response.status, JSON.stringify(body)).toBe(200);
  return body.id_token!;
}

/** An ID token for Festival, verified with jose against /.well-known/jwks.json. */
async function verifiedIdToken(token: string): Promise<JWTPayload> {
  const keys = createRemoteJWKSet(new URL(`${issuer.baseUrl}/.well-known/jwks.json`));
  const { payload } = await jwtVerify(token, keys, { issuer: issuer.tokengate.context.openid!.issuer, audience: 'festival', algorithms: ['RS256'] });
  return payload;
}

async function verifiedLogoutToken(token: string): Promise<JWTPayload> {
  const keys = createRemoteJWKSet(new URL(`${issuer.baseUrl}/.well-known/jwks.json`));
  const { payload } = await jwtVerify(token, keys, {
    issuer: issuer.tokengate.context.openid!.issuer,
    audience: 'festival',
    typ: 'logout+jwt',
    algorithms: ['RS256'],
  });
  expect(payload.events).toEqual({ [BACKCHANNEL_LOGOUT_EVENT]: {} });
  expect(payload).not.toHaveProperty('nonce');
  return payload;
}

async function signedIn(): Promise<boolean> {
  const page = await person.newPage();
  await page.goto(`${issuer.baseUrl}/oauth/account`);
  const title = await page.title();
  await page.close();
  return title === 'Connected applications · Ticketing';
}

describe('sign-out for the applications in Chromium', () => {
  it("the application's link with an id_token_hint asks, then ends the session and lands on its page with state; its back-channel endpoint gets a logout token for the session", async () => {
    const hint = await idTokenFor(await signIn());
    const { sid } = decodeJwt(hint);
    expect(sid).toEqual(expect.any(String));
    const page = await person.newPage();
    const query = new URLSearchParams({ id_token_hint: hint, post_logout_redirect_uri: festival.signedOut, state: 'st 1' });
    await page.goto(`${issuer.baseUrl}/oauth/logout?${query.toString()}`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Sign out of Ticketing?');
    expect(await page.locator('main').textContent()).toContain('Festival Tickets asks to sign you out. You are signed in as fan@example.com.');
    expect(receiver.tokens).toEqual([]);

    await Promise.all([page.waitForURL((url) => url.href.startsWith(festival.signedOut)), page.getByRole('button', { name: 'Sign out', exact: true }).click()]);
    expect(new URL(page.url()).searchParams.get('state')).toBe('st 1');
    expect(await page.title()).toBe('Signed out of Festival');
    await page.goto(authorizeUrl());
    expect(await page.title()).toBe('Sign in · Ticketing');

    // Signing in again right there: Festival is approved already, so its code follows the sign-in
    // at once, and its ID token names the new session.
    const again = await verifiedIdToken(await idTokenFor(await signInOnThisPage(page)));
    expect(again).toMatchObject({ sub: USER_ID, nonce: 'n-1' });
    expect(again.sid).toEqual(expect.any(String));
    expect(again.sid).not.toBe(sid);
    await page.close();

    await eventually(() => receiver.tokens.length === 1);
    expect(await verifiedLogoutToken(receiver.tokens[0]!)).toMatchObject({ sub: USER_ID, sid });
  });

  it('after sign-out on the account page, signing in on the authorization page of an approved application lands on it with a code', async () => {
    await signIn();
    const page = await person.newPage();
    await page.goto(`${issuer.baseUrl}/oauth/account`);
    await Promise.all([page.waitForURL(`${issuer.baseUrl}/oauth/account/signed-out`), page.getByRole('button', { name: 'Sign out', exact: true }).click()]);
    await page.goto(authorizeUrl());
    expect(await page.title()).toBe('Sign in · Ticketing');
    const idToken = await verifiedIdToken(await idTokenFor(await signInOnThisPage(page)));
    expect(idToken).toMatchObject({ sub: USER_ID, nonce: 'n-1' });
    await page.close();
  });

  it("the application's sign-out form, posted from its site without the session cookie, still reaches the question with the session", async () => {
    await signIn();
    const page = await person.newPage();
    await page.goto(`${site.origin}/sign-out-form`);
    await Promise.all([
      page.waitForURL((url) => url.href.startsWith(`${issuer.baseUrl}/oauth/logout?`)),
      page.getByRole('button', { name: 'Sign out everywhere' }).click(),
    ]);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Sign out of Ticketing?');
    await Promise.all([page.waitForURL((url) => url.href.startsWith(festival.signedOut)), page.getByRole('button', { name: 'Stay signed in' }).click()]);
    expect(new URL(page.url()).searchParams.get('state')).toBe('from-form');
    await page.close();
    expect(await signedIn()).toBe(true);
  });

  it("another site's link only asks, and its forged answer signs no one out", async () => {
    const page = await person.newPage();
    const attacker = `http://attacker.test:${site.port}/attack`;
    await page.goto(attacker);
    await Promise.all([page.waitForURL((url) => url.href.startsWith(issuer.baseUrl)), page.getByRole('link', { name: 'Click here' }).click()]);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Sign out of Ticketing?');
    await page.goto(attacker);
    await Promise.all([page.waitForURL((url) => url.href.startsWith(issuer.baseUrl)), page.getByRole('button', { name: 'Claim your prize' }).click()]);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('This page has expired');
    await page.close();
    expect(await signedIn()).toBe(true);
  });

  it('finds no WCAG 2.1 AA violation on the confirmation page and the refusal page, light or dark', async () => {
    const confirmation = `${issuer.baseUrl}/oauth/logout?${new URLSearchParams({ client_id: 'festival', post_logout_redirect_uri: festival.signedOut }).toString()}`;
    const refusal = `${issuer.baseUrl}/oauth/logout?${new URLSearchParams({ client_id: 'festival', post_logout_redirect_uri: 'https://evil.example/' }).toString()}`;
    for (const colorScheme of ['light', 'dark'] as const) {
      for (const [title, url] of [
        ['Sign out · Ticketing', confirmation],
        ['This sign-out link is not valid · Ticketing', refusal],
      ] as const) {
        expect({ colorScheme, ...(await accessibilityViolations(browser, url, colorScheme, person)) }).toEqual({ colorScheme, title, violations: [] });
      }
    }
  });

  it('a back-channel endpoint that hangs keeps no page waiting: sign-out and Disconnect answer while it holds their requests', async () => {
    receiver.hang = true;
    const received = receiver.tokens.length;
    const page = await person.newPage();
    await page.goto(
      `${issuer.baseUrl}/oauth/logout?${new URLSearchParams({ client_id: 'festival', post_logout_redirect_uri: festival.signedOut }).toString()}`,
    );
    await Promise.all([page.waitForURL((url) => url.href.startsWith(festival.signedOut)), page.getByRole('button', { name: 'Sign out', exact: true }).click()]);
    await eventually(() => receiver.held.length === 1);
    const signOutToken = receiver.tokens[received]!;

    // Signed in again, the person disconnects Festival while the endpoint still holds the sign-out's token.
    await signIn();
    await page.goto(`${issuer.baseUrl}/oauth/account`);
    await page.getByRole('button', { name: 'Disconnect Festival Tickets' }).click();
    await expect.poll(() => page.getByRole('status').textContent()).toBe('Festival Tickets is disconnected: its access has ended.');
    await page.close();
    await eventually(() => receiver.tokens.slice(received).some((token) => token !== signOutToken));
    // Nothing it was sent has been answered.
    expect(receiver.held.every((response) => !response.writableEnded)).toBe(true);

    // Disconnect's token names the user alone: every session of theirs at Festival ends with the grant.
    const disconnected = await verifiedLogoutToken(receiver.tokens.slice(received).find((token) => token !== signOutToken)!);
    expect(disconnected.sub).toBe(USER_ID);
    expect(disconnected).not.toHaveProperty('sid');
    expect(policyViolations).toEqual([]);
  });
});
