import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { FormClient, application, authorizePath, createUser, formFields, hiddenField, type PageResponse } from './support/issuer.js';
import { rawRedis } from './support/redis.js';

/**
 * The account page over real HTTP: reached without a session it signs the user in and comes
 * back; it lists the user's connected applications (name, host, scopes in words, dates);
 * Disconnect ends one grant and its tokens; sign-out ends the session. Every forged form
 * (no CSRF token, a wrong one, another session's, a form without the session cookie) and a GET
 * change nothing. Two sign-ins for the file (each costs a second of scrypt). The same page in
 * Chromium, across sidecars and an ingress: test/account-browser.test.ts.
 */

const ANN = { id: 'user-ann', email: 'ann@example.com', password: 'ann likes the front row' };
const BOB = { id: 'user-bob', email: 'bob@example.com', password: 'bob sits in the back' };
const DOCUMENT_CLIENT = 'https://assistant.example:8443/client.json';

let issuer: RunningTokengate;
let ann: FormClient;
let bob: FormClient;
/** Ann's account page as she first saw it. */
let annPage: PageResponse;

beforeAll(async () => {
  issuer = await startTokengate('account-page', {
    config: {
      issuer: {
        scopes: ['public', 'organizer', 'beta'],
        scopeDescriptions: { public: 'See your profile and manage your tickets', organizer: 'Manage the events you organize' },
      },
    },
  });
  const store = issuer.store;
  await store.applications.put(
    application({ clientId: 'box-office', name: 'Box Office', redirectUris: ['https://box-office.example/cb', 'https://m.box-office.example/cb'] }),
  );
  await store.applications.put(application({ clientId: 'scanner', name: 'Door Scanner', redirectUris: ['com.example.scanner:/cb'] }));
  await store.applications.put(application({ clientId: 'gone', name: 'Deleted later' }));
  await createUser(store, ANN.id, ANN.email, ANN.password);
  await createUser(store, BOB.id, BOB.email, BOB.password);
  await store.grants.approve(ANN.id, 'box-office', { scopes: ['public', 'organizer', 'beta'], resources: [] }, Date.UTC(2026, 10, 3, 12));
  await store.grants.touch(ANN.id, 'box-office', (await store.grants.get(ANN.id, 'box-office'))!.id, Date.UTC(2026, 11, 24, 18));
  await store.grants.approve(ANN.id, 'scanner', { scopes: ['public'], resources: [] }, Date.UTC(2026, 9, 1));
  await store.grants.approve(ANN.id, DOCUMENT_CLIENT, { scopes: ['public'], resources: [] }, Date.UTC(2026, 9, 2));
  // An application deleted from the store behind its grant's back: not listed.
  await store.grants.approve(ANN.id, 'gone', { scopes: ['public'], resources: [] }, Date.UTC(2026, 9, 3));
  await store.applications.delete('gone');
  await store.grants.approve(BOB.id, 'box-office', { scopes: ['public'], resources: [] }, Date.UTC(2026, 9, 4));

  // Ann comes to the account page first: the sign-in page, which brings her back to it.
  ann = new FormClient(issuer.baseUrl);
  const signInPage = await ann.get('/oauth/account');
  expect(signInPage.status).toBe(200);
  expect(signInPage.text).toContain('to see the applications connected to your account');
  const signedIn = await ann.post('/oauth/authorize/login', { ...formFields(signInPage.text), email: ANN.email, password: ANN.password });
  expect([signedIn.status, signedIn.location]).toEqual([303, '/oauth/account']);
  annPage = await ann.follow(signedIn);
  bob = new FormClient(issuer.baseUrl);
  const bobLogin = await bob.get('/oauth/account');
  expect((await bob.post('/oauth/authorize/login', { ...formFields(bobLogin.text), email: BOB.email, password: BOB.password })).status).toBe(303);
});

afterAll(async () => {
  await issuer?.close();
});

/** A user token of `userId` at `clientId`, stored as the issuer stores one. */
function tokenOf(userId: string, clientId: string): Promise<string> {
  return issuer.issue({ userId, clientId, familyId: `family-${userId}-${clientId}-${Math.random()}` });
}

const live = async (token: string) => (await issuer.store.tokens.getAccessToken(tokenDigest(token))) !== null;

/** The account page's CSRF token (the session's). */
const csrfOf = (page: PageResponse) => hiddenField(page.text, 'csrf_token');

describe('the account page', () => {
  it('lists the connected applications: name, hosts, scopes in words (unknown ones as themselves), approved and last used', async () => {
    expect(annPage.status).toBe(200);
    expect(annPage.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(annPage.headers.get('cache-control')).toBe('no-store');
    expect(annPage.headers.get('x-frame-options')).toBe('DENY');
    const page = annPage.text;
    expect(page).toContain('<h1 id="title">Connected applications</h1>');
    expect(page).toContain('Signed in as <strong>ann@example.com</strong>');
    const headings = [...page.matchAll(/<h2 id="[^"]+">([^<]+)<\/h2>/g)].map((match) => match[1]);
    // The most recently approved first; the deleted application not at all.
    expect(headings).toEqual(['Box Office', 'assistant.example:8443', 'Door Scanner']);
    const boxOffice = page.split('<li class="connection"').find((item) => item.includes('>Box Office</h2>'))!;
    expect(boxOffice).toContain('box-office.example, m.box-office.example');
    expect([...boxOffice.matchAll(/<li>([^<]+)<\/li>/g)].map((match) => match[1])).toEqual([
      'See your profile and manage your tickets',
      'Manage the events you organize',
      'beta',
    ]);
    expect(boxOffice).toContain('<dt>Approved</dt><dd><time datetime="2026-11-03T12:00:00.000Z">3 November 2026</time></dd>');
    expect(boxOffice).toContain('<dt>Last used</dt><dd><time datetime="2026-12-24T18:00:00.000Z">24 December 2026</time></dd>');
    expect(boxOffice).toContain(
      '<input type="hidden" name="client_id" value="box-office"><button class="button secondary" type="submit">Disconnect<span class="visually-hidden"> Box Office</span></button>',
    );
    expect(page).toContain(`Not registered with this service: identified by its address ${DOCUMENT_CLIENT}`);
    expect(page).toMatch(/>Door Scanner<\/h2>\n<p class="muted">com\.example\.scanner<\/p>/);
    expect(page).not.toContain('Deleted later');
  });

  it("says so when nothing is connected, and lists no one else's applications", async () => {
    const page = await bob.get('/oauth/account');
    expect([...page.text.matchAll(/<h2 id="[^"]+">([^<]+)<\/h2>/g)].map((match) => match[1])).toEqual(['Box Office']);
  });
});

describe('Disconnect', () => {
  const disconnect = (client: FormClient, form: Record<string, string>) => client.post('/oauth/account/disconnect', form);

  it.each([
    ['without a CSRF token', () => ({ client_id: 'box-office' })],
    ['with a wrong CSRF token', () => ({ client_id: 'box-office', csrf_token: 'A'.repeat(43) })],
    ["with another session's CSRF token", async () => ({ client_id: 'box-office', csrf_token: csrfOf(await bob.get('/oauth/account')) })],
    ['with an empty CSRF token', () => ({ client_id: 'box-office', csrf_token: '' })],
    ['with the CSRF token twice', () => ({ client_id: 'box-office', csrf_token: [csrfOf(annPage), csrfOf(annPage)] as unknown as string })],
  ])('%s changes nothing', async (_case, form) => {
    const token = await tokenOf(ANN.id, 'box-office');
    const answer = await disconnect(ann, await form());
    expect(answer.status).toBe(403);
    expect(answer.text).toContain('This page has expired');
    expect(await issuer.store.grants.get(ANN.id, 'box-office')).not.toBeNull();
    expect(await live(token)).toBe(true);
  });

  it('changes nothing from a browser without the session cookie, even with the right CSRF token', async () => {
    const token = await tokenOf(ANN.id, 'box-office');
    const stranger = new FormClient(issuer.baseUrl);
    const answer = await disconnect(stranger, { client_id: 'box-office', csrf_token: csrfOf(annPage) });
    expect(answer.status).toBe(403);
    expect(await issuer.store.grants.get(ANN.id, 'box-office')).not.toBeNull();
    expect(await live(token)).toBe(true);
  });

  it('refuses a form that is not urlencoded (JSON, text/plain: what a cross-site page could send without a form)', async () => {
    for (const type of ['application/json', 'text/plain']) {
      const response = await fetch(`${issuer.baseUrl}/oauth/account/disconnect`, {
        method: 'POST',
        headers: { 'content-type': type, cookie: ann.cookieHeader() },
        body:
          type === 'application/json'
            ? JSON.stringify({ client_id: 'box-office', csrf_token: csrfOf(annPage) })
            : `client_id=box-office&csrf_token=${csrfOf(annPage)}`,
        redirect: 'manual',
      });
      expect(response.status).toBe(415);
    }
    expect(await issuer.store.grants.get(ANN.id, 'box-office')).not.toBeNull();
  });

  it("ends the grant and every token of that user at that application, and nothing of anyone else's", async () => {
    const mine = [await tokenOf(ANN.id, 'box-office'), await tokenOf(ANN.id, 'box-office')];
    const myOther = await tokenOf(ANN.id, 'scanner');
    const bobs = await tokenOf(BOB.id, 'box-office');
    const answer = await disconnect(ann, { client_id: 'box-office', csrf_token: csrfOf(annPage) });
    expect([answer.status, answer.location]).toEqual([303, '/oauth/account']);
    for (const token of mine) expect(await live(token)).toBe(false);
    expect(await issuer.store.grants.get(ANN.id, 'box-office')).toBeNull();
    expect([await live(myOther), await live(bobs)]).toEqual([true, true]);
    expect(await issuer.store.grants.get(ANN.id, 'scanner')).not.toBeNull();
    expect(await issuer.store.grants.get(BOB.id, 'box-office')).not.toBeNull();

    // The page says it once, as a status message, and no longer lists it.
    const after = await ann.follow(answer);
    expect(after.text).toContain('<p class="notice" role="status">Box Office is disconnected: its access has ended.</p>');
    expect(after.text).not.toContain('>Box Office</h2>');
    expect((await ann.get('/oauth/account')).text).not.toContain('role="status"');
  });

  it('answers a form naming no application with a page, and one naming an application not connected with a notice', async () => {
    expect((await disconnect(ann, { csrf_token: csrfOf(annPage) })).status).toBe(400);
    const answer = await disconnect(ann, { client_id: 'never-connected', csrf_token: csrfOf(annPage) });
    expect(answer.status).toBe(303);
    expect((await ann.follow(answer)).text).toContain('That application was not connected to your account.');
  });
});

describe('sign-out', () => {
  const redis = rawRedis();
  afterAll(() => redis.disconnect());
  const sessionKeys = () => redis.keys(`${issuer.prefix}session:*`);

  it.each([
    ['a GET (a link or an image on another site)', () => bob.get('/oauth/account/sign-out')],
    ['a POST without a CSRF token', () => bob.post('/oauth/account/sign-out', {})],
    ['a POST with a wrong CSRF token', () => bob.post('/oauth/account/sign-out', { csrf_token: 'A'.repeat(43) })],
    ["a POST with another session's CSRF token", () => bob.post('/oauth/account/sign-out', { csrf_token: csrfOf(annPage) })],
  ])('%s signs no one out', async (_case, attempt) => {
    const answer = await attempt();
    expect(answer.status).not.toBe(303);
    expect(answer.headers.getSetCookie()).toEqual([]);
    const page = await bob.get('/oauth/account');
    expect(page.text).toContain('Signed in as <strong>bob@example.com</strong>');
  });

  it('ends the session everywhere: the store forgets it, the cookie is dropped, and the next authorization asks to sign in', async () => {
    const before = await sessionKeys();
    const bobCookie = bob.cookieHeader();
    const answer = await bob.post('/oauth/account/sign-out', { csrf_token: csrfOf(await bob.get('/oauth/account')) });
    expect([answer.status, answer.location]).toEqual([303, '/oauth/account/signed-out']);
    expect(answer.headers.getSetCookie().join('\n')).toMatch(/tokengate_session=;.*Expires=Thu, 01 Jan 1970/);
    const after = await sessionKeys();
    expect(after.length).toBe(before.length - 1);
    const signedOut = await bob.follow(answer);
    expect(signedOut.text).toContain('You are signed out');

    // The old cookie, kept by someone, opens nothing any more.
    const replayed = await fetch(`${issuer.baseUrl}/oauth/account`, { headers: { cookie: bobCookie } });
    expect(await replayed.text()).toContain('to see the applications connected to your account');
    const authorize = await fetch(
      `${issuer.baseUrl}${authorizePath({ client_id: 'box-office', redirect_uri: 'https://box-office.example/cb', response_type: 'code' })}`,
      { headers: { cookie: bobCookie }, redirect: 'manual' },
    );
    expect([authorize.status, (await authorize.text()).includes('to continue to <strong>Box Office</strong>')]).toEqual([200, true]);
  });
});
