import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { FormClient, application, authorizePath, createUser, formFields, hiddenField, type PageResponse } from './support/issuer.js';

/**
 * RP-Initiated Logout over real HTTP (a browser stand-in that keeps cookies): what a request may
 * name and what is refused (an unregistered post_logout_redirect_uri, one of another
 * application, a repeated parameter), the confirmation page that stands between any link and
 * the sign-out, and every way of answering it without the session's CSRF token, which signs no
 * one out. ID token hints and logout tokens: test/logout-browser.test.ts.
 */

const ANN = { id: 'user-ann', email: 'ann@example.com', password: 'ann likes the front row' };
const BOB = { id: 'user-bob', email: 'bob@example.com', password: 'bob sits in the back' };
const SIGNED_OUT = 'https://box-office.example/signed-out';

let issuer: RunningTokengate;

beforeAll(async () => {
  issuer = await startTokengate('logout');
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
  return Object.fromEntries([...form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((match) => [match[1]!, match[2]!]));
}

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
