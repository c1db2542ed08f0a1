import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRemoteJWKSet, decodeProtectedHeader, generateKeyPair, jwtVerify, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKCHANNEL_LOGOUT_EVENT } from '../src/logout/logout-token.js';
import { adminFetch, startTokengate, type RunningTokengate } from './support/instance.js';
import { eventually } from './support/wait.js';
import { FormClient, application, authorizePath, createUser, formFields, hiddenField, type PageResponse } from './support/issuer.js';

/**
 * RP-Initiated Logout over real HTTP (a browser stand-in that keeps cookies): what a request may
 * name and what is refused (an unregistered post_logout_redirect_uri, one of another
 * application, a repeated parameter, a forged or foreign id_token_hint), the confirmation page
 * that stands between any link and the sign-out, and every way of answering it without the
 * session's CSRF token, which signs no one out. Back-Channel Logout to real receivers on ports:
 * the logout token verifies with jose against /.well-known/jwks.json, a receiver that fails
 * first is reached by a retry, one that hangs keeps no page waiting. The same in Chromium:
 * test/logout-browser.test.ts.
 */

const ANN = { id: 'user-ann', email: 'ann@example.com', password: 'ann likes the front row' };
const BOB = { id: 'user-bob', email: 'bob@example.com', password: 'bob sits in the back' };
const SIGNED_OUT = 'https://box-office.example/signed-out';

let issuer: RunningTokengate;

beforeAll(async () => {
  issuer = await startTokengate('logout', { config: { openidConnect: { enabled: true } } });
  await issuer.store.applications.put(
    application({ clientId: 'box-office', name: 'Box Office', redirectUris: ['https://box-office.example/cb'], postLogoutRedirectUris: [SIGNED_OUT] }),
  );
  await issuer.store.applications.put(application({ clientId: 'scanner', name: 'Door Scanner', postLogoutRedirectUris: ['https://scanner.example/bye'] }));
  await createUser(issuer.store, ANN.id, ANN.email, ANN.password);
  await createUser(issuer.store, BOB.id, BOB.email, BOB.password);
});

afterAll(async () => {
  await issuer?.close();
});

/** A browser signed in through the account page. */
async function signedIn(user: { email: string; password: string }): Promise<FormClient> {
  const browser = new FormClient(issuer.baseUrl);
  const signInPage = await browser.get('/oauth/account');
  const answer = await browser.post('/oauth/authorize/login', { ...formFields(signInPage.text), email: user.email, password: user.password });
  expect(answer.status).toBe(303);
  return browser;
}

async function isSignedIn(browser: FormClient): Promise<boolean> {
  return (await browser.get('/oauth/account')).text.includes('<h1 id="title">Connected applications</h1>');
}

const logoutPath = (parameters: Record<string, string | string[]>) => authorizePath(parameters).replace('/oauth/authorize', '/oauth/logout');

/** The confirmation form's fields as the page carries them. */
function confirmationFields(page: PageResponse): Record<string, string> {
  const form = /<form method="post" action="\/oauth\/logout\/confirm"[^>]*>([\s\S]*?)<\/form>/.exec(page.text)![1]!;
  const unescaped = (value: string) =>
    value.replace(/&(amp|lt|gt|quot|#39);/g, (_entity, name: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[name]!);
  return Object.fromEntries([...form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((match) => [match[1]!, unescaped(match[2]!)]));
}

describe('the metadata', () => {
  it('names the end_session_endpoint and back-channel logout with sid, in the RFC 8414 and the discovery documents, with OpenID Connect on', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const metadata = (await (await fetch(`${issuer.baseUrl}${path}`)).json()) as Record<string, unknown>;
      expect(metadata, path).toMatchObject({
        end_session_endpoint: `${issuer.tokengate.context.openid!.issuer}/oauth/logout`,
        backchannel_logout_supported: true,
        backchannel_logout_session_supported: true,
      });
    }
  });
});

describe('a sign-out request', () => {
  it.each([
    [
      'a post_logout_redirect_uri the application did not register',
      { client_id: 'box-office', post_logout_redirect_uri: 'https://evil.example/' },
      'Box Office did not register',
    ],
    ['a registered URI with more after it', { client_id: 'box-office', post_logout_redirect_uri: `${SIGNED_OUT}/more` }, 'Box Office did not register'],
    [
      'a registered URI written differently',
      { client_id: 'box-office', post_logout_redirect_uri: 'https://BOX-OFFICE.example/signed-out' },
      'did not register',
    ],
    ["another application's URI", { client_id: 'box-office', post_logout_redirect_uri: 'https://scanner.example/bye' }, 'did not register'],
    ['a URI without the application it belongs to', { post_logout_redirect_uri: SIGNED_OUT }, 'not the application it belongs to'],
    ['an unknown application', { client_id: 'no-such-app', post_logout_redirect_uri: SIGNED_OUT }, 'not known to this service'],
    ['a repeated parameter', { client_id: 'box-office', post_logout_redirect_uri: [SIGNED_OUT, 'https://evil.example/'] }, 'repeats post_logout_redirect_uri'],
    [
      'an id_token_hint that is no ID token of ours',
      { id_token_hint: 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1c2VyLWFubiJ9.', client_id: 'box-office' },
      'did not issue',
    ],
  ])('with %s is refused with a page: no redirect, nobody signed out', async (_case, parameters, problem) => {
    const ann = await signedIn(ANN);
    for (const answer of [await ann.get(logoutPath(parameters)), await ann.post('/oauth/logout', parameters)]) {
      expect([answer.status, answer.location]).toEqual([400, null]);
      expect(answer.text).toContain('This sign-out link is not valid');
      expect(answer.text).toContain(problem);
      expect(answer.headers.get('content-security-policy')).toContain("form-action 'self';");
    }
    expect(await isSignedIn(ann)).toBe(true);
  });

  it('only asks: a GET (a link, an image, a redirect from any site) shows the confirmation page and signs no one out', async () => {
    const ann = await signedIn(ANN);
    const page = await ann.get(logoutPath({ client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT, state: 'st-1', ui_locales: 'fr' }));
    expect(page.status).toBe(200);
    expect(page.text).toContain('<h1 id="title">Sign out of Ticketing?</h1>');
    expect(page.text).toContain('<strong>Box Office</strong> asks to sign you out. You are signed in as <strong>ann@example.com</strong>.');
    expect(page.text).toContain('you will be sent back to <strong>box-office.example</strong>');
    // The form may lead on to the application's page, and nowhere else.
    expect(page.headers.get('content-security-policy')).toContain("form-action 'self' https://box-office.example;");
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(confirmationFields(page)).toEqual({
      csrf_token: hiddenField((await ann.get('/oauth/account')).text, 'csrf_token'),
      client_id: 'box-office',
      post_logout_redirect_uri: SIGNED_OUT,
      state: 'st-1',
    });
    expect(await isSignedIn(ann)).toBe(true);
  });

  it.each([
    ['without a CSRF token', (fields: Record<string, string>) => ({ ...fields, csrf_token: undefined })],
    ['with a wrong CSRF token', (fields: Record<string, string>) => ({ ...fields, csrf_token: 'A'.repeat(43) })],
    ["with another session's CSRF token", (fields: Record<string, string>, bobs: string) => ({ ...fields, csrf_token: bobs })],
  ])('answered %s signs no one out', async (_case, forge) => {
    const [ann, bob] = [await signedIn(ANN), await signedIn(BOB)];
    const fields = confirmationFields(await ann.get(logoutPath({ client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT, state: 's' })));
    const bobs = hiddenField((await bob.get('/oauth/account')).text, 'csrf_token');
    const form = Object.fromEntries(Object.entries(forge(fields, bobs)).filter((entry): entry is [string, string] => entry[1] !== undefined));
    const answer = await ann.post('/oauth/logout/confirm', { ...form, decision: 'sign-out' });
    expect([answer.status, answer.location]).toEqual([403, null]);
    expect(answer.text).toContain('This page has expired');
    expect([await isSignedIn(ann), await isSignedIn(bob)]).toEqual([true, true]);
  });

  it("answered from a browser without the session's cookie (another site's form: SameSite=Lax) signs no one out", async () => {
    const ann = await signedIn(ANN);
    const fields = confirmationFields(await ann.get(logoutPath({ client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT })));
    const stranger = new FormClient(issuer.baseUrl);
    const answer = await stranger.post('/oauth/logout/confirm', { ...fields, decision: 'sign-out' });
    expect(answer.status).toBe(403);
    expect(await isSignedIn(ann)).toBe(true);
  });

  it('answered "Sign out" ends the session and sends the user back to the registered page with state; the next authorization asks to sign in', async () => {
    const ann = await signedIn(ANN);
    const cookie = ann.cookieHeader();
    const page = await ann.get(logoutPath({ client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT, state: 'back & forth' }));
    const answer = await ann.post('/oauth/logout/confirm', { ...confirmationFields(page), decision: 'sign-out' });
    expect([answer.status, answer.location]).toEqual([303, `${SIGNED_OUT}?state=back+%26+forth`]);
    expect(answer.headers.getSetCookie().join('\n')).toMatch(/tokengate_session=;.*Expires=Thu, 01 Jan 1970/);
    // The cookie, kept by someone, opens nothing any more.
    const authorize = await fetch(
      `${issuer.baseUrl}${authorizePath({ client_id: 'box-office', redirect_uri: 'https://box-office.example/cb', response_type: 'code' })}`,
      {
        headers: { cookie },
        redirect: 'manual',
      },
    );
    expect([authorize.status, (await authorize.text()).includes('<h1 id="title">Sign in</h1>')]).toEqual([200, true]);
  });

  it('answered "Stay signed in" keeps the session and goes back to the application (or the account page when it named none)', async () => {
    const ann = await signedIn(ANN);
    const toApplication = await ann.get(logoutPath({ client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT, state: 's2' }));
    const stayed = await ann.post('/oauth/logout/confirm', { ...confirmationFields(toApplication), decision: 'stay' });
    expect([stayed.status, stayed.location]).toEqual([303, `${SIGNED_OUT}?state=s2`]);
    const alone = await ann.get('/oauth/logout');
    expect(alone.text).toContain('An application asks to sign you out.');
    expect(alone.headers.get('content-security-policy')).toContain("form-action 'self';");
    const toAccount = await ann.post('/oauth/logout/confirm', { ...confirmationFields(alone), decision: 'stay' });
    expect([toAccount.status, toAccount.location]).toEqual([303, '/oauth/account']);
    expect(await isSignedIn(ann)).toBe(true);
  });

  it('answered after the application took its URI back is refused: the page is checked again, not trusted', async () => {
    await issuer.store.applications.put(application({ clientId: 'moving', name: 'Moving App', postLogoutRedirectUris: ['https://moving.example/bye'] }));
    const ann = await signedIn(ANN);
    const page = await ann.get(logoutPath({ client_id: 'moving', post_logout_redirect_uri: 'https://moving.example/bye' }));
    await issuer.store.applications.put(application({ clientId: 'moving', name: 'Moving App', postLogoutRedirectUris: [] }));
    const answer = await ann.post('/oauth/logout/confirm', { ...confirmationFields(page), decision: 'sign-out' });
    expect([answer.status, answer.location]).toEqual([400, null]);
    expect(await isSignedIn(ann)).toBe(true);
  });

  it('without a session goes straight back to the registered page with state (nobody to sign out), or to the signed-out page', async () => {
    const stranger = new FormClient(issuer.baseUrl);
    const back = await stranger.get(logoutPath({ client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT, state: 'xyz' }));
    expect([back.status, back.location]).toEqual([302, `${SIGNED_OUT}?state=xyz`]);
    const nowhere = await stranger.get(logoutPath({ client_id: 'box-office' }));
    expect([nowhere.status, nowhere.location]).toEqual([302, '/oauth/account/signed-out']);
  });

  it('as a form from the application (which brings no session cookie: SameSite=Lax) is asked again as a GET, which brings it', async () => {
    const parameters = { client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT, state: 'via post' };
    const ann = await signedIn(ANN);
    const stranger = new FormClient(issuer.baseUrl);
    const answer = await stranger.post('/oauth/logout', { ...parameters, unrelated: 'dropped' });
    expect(answer.status).toBe(303);
    expect(answer.location).toBe(logoutPath(parameters));
    // The same request with the cookie (a same-site form, or the GET it is sent to): the confirmation.
    expect((await ann.post('/oauth/logout', parameters)).text).toContain('Sign out of Ticketing?');
    expect((await ann.get(answer.location!)).text).toContain('Sign out of Ticketing?');
  });
});

/** An ID token of this deployment as the issuer signs one; `exp` past, as an old one kept by the application. */
function idToken(claims: Record<string, unknown> = {}): Promise<string> {
  const openid = issuer.tokengate.context.openid!;
  const now = Math.floor(Date.now() / 1000);
  return openid.sign({ iss: openid.issuer, sub: ANN.id, aud: 'box-office', iat: now - 7200, exp: now - 3600, ...claims }, 'RS256', 'JWT');
}

describe('an id_token_hint', () => {
  it('of ours, expired, names the application: its registered page is accepted without client_id', async () => {
    const ann = await signedIn(ANN);
    const page = await ann.get(logoutPath({ id_token_hint: await idToken(), post_logout_redirect_uri: SIGNED_OUT, state: 'h1' }));
    expect(page.text).toContain('<strong>Box Office</strong> asks to sign you out.');
    const answer = await ann.post('/oauth/logout/confirm', { ...confirmationFields(page), decision: 'sign-out' });
    expect([answer.status, answer.location]).toEqual([303, `${SIGNED_OUT}?state=h1`]);
    expect(await isSignedIn(ann)).toBe(false);
  });

  it.each([
    [
      'forged (its claims changed after signing)',
      async () => {
        const [header, , signature] = (await idToken()).split('.');
        const claims = Buffer.from(JSON.stringify({ iss: issuer.tokengate.context.openid!.issuer, sub: BOB.id, aud: 'box-office' })).toString('base64url');
        return `${header}.${claims}.${signature}`;
      },
      'did not issue',
    ],
    [
      "foreign (another party's key, under our kid and iss)",
      async () => {
        const { privateKey } = await generateKeyPair('RS256');
        const kid = decodeProtectedHeader(await idToken()).kid!;
        return new SignJWT({ sub: ANN.id, aud: 'box-office' })
          .setProtectedHeader({ alg: 'RS256', kid, typ: 'JWT' })
          .setIssuer(issuer.tokengate.context.openid!.issuer)
          .setIssuedAt()
          .sign(privateKey);
      },
      'did not issue',
    ],
    [
      'a logout token of ours (not an ID token)',
      () => issuer.tokengate.context.openid!.sign({ iss: issuer.tokengate.context.openid!.issuer, sub: ANN.id, aud: 'box-office' }, 'RS256', 'logout+jwt'),
      'did not issue',
    ],
    ['of another application than client_id', () => idToken({ aud: 'scanner' }), 'issued to another application'],
  ])('%s is refused with a page: no redirect, nobody signed out', async (_case, hint, problem) => {
    const ann = await signedIn(ANN);
    const answer = await ann.get(logoutPath({ id_token_hint: await hint(), client_id: 'box-office', post_logout_redirect_uri: SIGNED_OUT }));
    expect([answer.status, answer.location]).toEqual([400, null]);
    expect(answer.text).toContain(problem);
    expect(await isSignedIn(ann)).toBe(true);
  });
});

/** A back-channel logout endpoint of an application: what it was sent, answered as `behaviour` says. */
interface Receiver {
  server: Server;
  uri: string;
  /** The logout tokens received, in order. */
  tokens: string[];
  /** Requests it holds without answering. */
  held: ServerResponse[];
  behaviour: 'answer' | 'fail-first' | 'hang';
}

async function startReceiver(behaviour: Receiver['behaviour']): Promise<Receiver> {
  const receiver: Receiver = { server: undefined as unknown as Server, uri: '', tokens: [], held: [], behaviour };
  receiver.server = createServer((request: IncomingMessage, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      expect(request.headers['content-type']).toBe('application/x-www-form-urlencoded');
      receiver.tokens.push(new URLSearchParams(body).get('logout_token')!);
      if (receiver.behaviour === 'hang') receiver.held.push(response);
      else if (receiver.behaviour === 'fail-first' && receiver.tokens.length === 1) response.writeHead(503).end();
      else response.writeHead(200, { 'cache-control': 'no-store' }).end();
    });
  });
  await new Promise<void>((resolve) => receiver.server.listen(0, '127.0.0.1', resolve));
  receiver.uri = `http://127.0.0.1:${(receiver.server.address() as AddressInfo).port}/backchannel-logout`;
  return receiver;
}

async function stopReceiver(receiver: Receiver): Promise<void> {
  receiver.server.closeAllConnections();
  await new Promise((resolve) => receiver.server.close(resolve));
}

describe('back-channel logout', () => {
  const receivers: Receiver[] = [];
  afterAll(async () => {
    await Promise.all(receivers.map(stopReceiver));
  });

  /** An application listening at a new receiver, that `user` has a grant with. */
  async function listeningApplication(clientId: string, behaviour: Receiver['behaviour'], userId: string, extra: Record<string, unknown> = {}) {
    const receiver = await startReceiver(behaviour);
    receivers.push(receiver);
    await issuer.store.applications.put(application({ clientId, name: clientId, backchannelLogoutUri: receiver.uri, ...extra }));
    await issuer.store.grants.approve(userId, clientId, { scopes: ['public'], resources: [] }, Date.now());
    return receiver;
  }

  const keySet = () => createRemoteJWKSet(new URL(`${issuer.baseUrl}/.well-known/jwks.json`));
  const metric = async (outcome: string) =>
    (await issuer.tokengate.context.metrics.backchannelLogouts.get()).values.find((value) => value.labels.outcome === outcome)?.value ?? 0;

  it("sends every connected application a logout token on sign-out, with sub and the session's sid, that verifies against the published keys", async () => {
    const user = { id: 'user-cy', email: 'cy@example.com', password: 'cy never leaves early' };
    await createUser(issuer.store, user.id, user.email, user.password);
    const [shop, bar] = [await listeningApplication('shop', 'answer', user.id), await listeningApplication('bar', 'answer', user.id)];
    const sent = await metric('sent');
    const cy = await signedIn(user);
    const answer = await cy.post('/oauth/account/sign-out', { csrf_token: hiddenField((await cy.get('/oauth/account')).text, 'csrf_token') });
    expect(answer.status).toBe(303);
    await eventually(() => shop.tokens.length === 1 && bar.tokens.length === 1);
    // Sign-out is not disconnecting: both grants stand.
    expect((await issuer.store.grants.list(user.id)).length).toBe(2);
    for (const [receiver, clientId] of [
      [shop, 'shop'],
      [bar, 'bar'],
    ] as const) {
      const { payload, protectedHeader } = await jwtVerify(receiver.tokens[0]!, keySet(), {
        issuer: issuer.tokengate.context.openid!.issuer,
        audience: clientId,
        typ: 'logout+jwt',
        algorithms: ['RS256'],
      });
      expect(protectedHeader.alg).toBe('RS256');
      expect(payload).toMatchObject({ sub: user.id, events: { [BACKCHANNEL_LOGOUT_EVENT]: {} }, jti: expect.any(String) as string });
      expect(payload.sid).toEqual(expect.any(String));
      expect(payload).not.toHaveProperty('nonce');
      expect(payload.exp! - payload.iat!).toBe(120);
    }
    // One session, one sid; each token its own jti.
    const [shopClaims, barClaims] = [shop, bar].map(
      (receiver) => JSON.parse(Buffer.from(receiver.tokens[0]!.split('.')[1]!, 'base64url').toString()) as Record<string, string>,
    );
    expect(shopClaims!.sid).toBe(barClaims!.sid);
    expect(shopClaims!.jti).not.toBe(barClaims!.jti);
    await eventually(async () => (await metric('sent')) === sent + 2);
  });

  it('tells the one application on a grant ended by the operator, with sub alone; one that requires sid is not sent a token it would refuse', async () => {
    const [kept, revoked, strict] = [
      await listeningApplication('kept', 'answer', ANN.id),
      await listeningApplication('revoked', 'answer', ANN.id),
      await listeningApplication('strict', 'answer', ANN.id, { backchannelLogoutSessionRequired: true }),
    ];
    for (const clientId of ['revoked', 'strict']) {
      const response = await adminFetch(issuer, `/users/${ANN.id}/grants/${clientId}`, { method: 'DELETE' });
      expect(response.status).toBe(200);
    }
    await eventually(() => revoked.tokens.length === 1);
    const { payload } = await jwtVerify(revoked.tokens[0]!, keySet(), { audience: 'revoked', typ: 'logout+jwt' });
    expect(payload.sub).toBe(ANN.id);
    expect(payload).not.toHaveProperty('sid');
    expect([kept.tokens.length, strict.tokens.length]).toEqual([0, 0]);
  });

  it('reaches an endpoint that failed first with a retry of the same token', async () => {
    const flaky = await listeningApplication('flaky', 'fail-first', ANN.id);
    const sent = await metric('sent');
    const response = await adminFetch(issuer, `/users/${ANN.id}/grants/flaky`, { method: 'DELETE' });
    expect(response.status).toBe(200);
    await eventually(() => flaky.tokens.length === 2, 10_000);
    expect(flaky.tokens[1]).toBe(flaky.tokens[0]);
    await eventually(async () => (await metric('sent')) === sent + 1);
  });

  it('keeps no page waiting on an endpoint that hangs: the sign-out answers while the endpoint still holds the request', async () => {
    const user = { id: 'user-dee', email: 'dee@example.com', password: 'dee waits for no one' };
    await createUser(issuer.store, user.id, user.email, user.password);
    const hanging = await listeningApplication('hanging', 'hang', user.id);
    const dee = await signedIn(user);
    const answer = await dee.post('/oauth/account/sign-out', { csrf_token: hiddenField((await dee.get('/oauth/account')).text, 'csrf_token') });
    expect([answer.status, answer.location]).toEqual([303, '/oauth/account/signed-out']);
    await eventually(() => hanging.held.length === 1);
    // While the endpoint holds that request, the next sign-in and sign-out are answered all the same.
    const again = await signedIn(user);
    const second = await again.post('/oauth/account/sign-out', { csrf_token: hiddenField((await again.get('/oauth/account')).text, 'csrf_token') });
    expect([second.status, second.location]).toEqual([303, '/oauth/account/signed-out']);
    expect(hanging.held[0]!.writableEnded).toBe(false);
    expect(await isSignedIn(dee)).toBe(false);
  });
});
