import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { deleteApplicationAndTokens } from '../src/store/deletions.js';
import { tokenDigest } from '../src/token/token-value.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { rawRedis } from './support/redis.js';
import { FormClient, application, authorizePath, createUser, formFields, type PageResponse } from './support/issuer.js';

/**
 * GET /oauth/authorize and its forms over real HTTP, against a real Redis: every refusal, the
 * sign-in and consent pages, sessions, CSRF, and the code the flow ends with.
 */

const REDIRECT_URI = 'https://app.example/cb';
const REDIRECT_WITH_QUERY = 'https://app.example/cb?tenant=a%20b&x=1';
/** A registered query that ends in "?": what is added must still start a pair of its own. */
const REDIRECT_QUERY_ENDING_IN_QUESTION_MARK = 'https://app.example/cb?return=/seats?';
const MOBILE_REDIRECT_URI = 'com.example.tickets:/oauth/cb';
const EMAIL = 'ann@example.com';
const PASSWORD = 'correct horse battery';

let issuer: RunningTokengate;

beforeAll(async () => {
  issuer = await startTokengate('authorize', {
    config: {
      server: { trustProxy: ['loopback'] },
      issuer: {
        scopes: ['public', 'organizer'],
        scopeDescriptions: { public: 'See your profile and manage your tickets' },
        loginThrottle: { maxAttemptsPerAccount: 50, maxAttemptsPerAddress: 50, windowSeconds: 60 },
      },
    },
  });
  await issuer.store.applications.put(application({ redirectUris: [REDIRECT_URI, REDIRECT_WITH_QUERY, REDIRECT_QUERY_ENDING_IN_QUESTION_MARK] }));
  await issuer.store.applications.put(
    application({ clientId: 'mobile', name: 'Tickets for iOS', secretDigest: null, confidential: false, redirectUris: [MOBILE_REDIRECT_URI] }),
  );
  await issuer.store.applications.put(
    application({ clientId: 'hostile', name: `<script>alert("x")</script> & 'Co'`, redirectUris: ['https://hostile.example/cb'] }),
  );
  await createUser(issuer.store, 'user-ann', EMAIL, PASSWORD);
});

afterAll(async () => {
  await issuer?.close();
});

// Each test meets the consent page as a first request would: an approval of an earlier test
// is remembered (test/consent-remembered.test.ts is about that).
beforeEach(async () => {
  await issuer.store.grants.deleteUser('user-ann');
});

/** Each test signs in from its own client address, so the login throttle of one never touches another. */
function browser(): FormClient {
  return new FormClient(issuer.baseUrl, { 'x-forwarded-for': `10.${randomBytes(3).join('.')}` });
}

function request(overrides: Record<string, string | string[] | undefined> = {}): Record<string, string | string[]> {
  const parameters: Record<string, string | string[] | undefined> = {
    client_id: 'box-office',
    redirect_uri: REDIRECT_URI,
    response_type: 'code',
    state: 'state-123',
    ...overrides,
  };
  return Object.fromEntries(Object.entries(parameters).filter((entry): entry is [string, string | string[]] => entry[1] !== undefined));
}

function pkcePair(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

function expectErrorPage(response: PageResponse, status: number, text: string): void {
  expect(response.status).toBe(status);
  expect(response.location).toBeNull();
  expect(response.headers.get('content-type')).toBe('text/html; charset=utf-8');
  expect(response.text).toContain(text);
}

/** The parameters of a redirect to `redirectUri`; fails unless the Location starts with exactly that URI. */
function redirectedTo(response: PageResponse, redirectUri: string): URLSearchParams {
  expect([302, 303]).toContain(response.status);
  expect(response.location).not.toBeNull();
  const location = response.location!;
  expect(location.startsWith(redirectUri)).toBe(true);
  return new URLSearchParams(location.slice(location.indexOf('?') + 1));
}

async function signIn(client: FormClient, parameters = request(), email = EMAIL, password = PASSWORD): Promise<PageResponse> {
  const login = await client.get(authorizePath(parameters));
  expect(login.text).toContain('Sign in');
  const signedIn = await client.post('/oauth/authorize/login', { ...formFields(login.text), email, password });
  expect(signedIn.status).toBe(303);
  const consent = await client.follow(signedIn);
  expect(consent.status).toBe(200);
  expect(consent.text).toContain('wants to access your');
  return consent;
}

describe('a request whose client or redirect_uri cannot be trusted gets a page, never a redirect', () => {
  it.each([
    ['an unknown client_id', request({ client_id: 'nobody' }), 'Unknown application'],
    ['no client_id', request({ client_id: undefined }), 'Unknown application'],
    ['an empty client_id', request({ client_id: '' }), 'Unknown application'],
    ['a repeated client_id', request({ client_id: ['box-office', 'box-office'] }), 'Unknown application'],
    ['no redirect_uri', request({ redirect_uri: undefined }), 'not valid'],
    ['a repeated redirect_uri', request({ redirect_uri: [REDIRECT_URI, REDIRECT_URI] }), 'not valid'],
    ['a repeated state', request({ state: ['a', 'b'] }), 'repeats the parameter state'],
    ['a repeated response_type', request({ response_type: ['code', 'code'] }), 'repeats the parameter response_type'],
    ['a repeated scope', request({ scope: ['public', 'public'] }), 'repeats the parameter scope'],
  ])('%s', async (_case, parameters, text) => {
    const response = await browser().get(authorizePath(parameters));
    expectErrorPage(response, 400, text);
    expect(response.headers.get('set-cookie')).toBeNull();
  });

  it.each([
    ['one character more', `${REDIRECT_URI}/`],
    ['one character less', REDIRECT_URI.slice(0, -1)],
    ['one character changed', 'https://app.example/cc'],
    ['another case', 'https://app.example/CB'],
    ['an upper-case scheme', 'HTTPS://app.example/cb'],
    ['a host extended past the path', 'https://app.example/cb.evil.com'],
    ['a scheme-relative URL', '//evil.com'],
    ['another host', 'https://evil.com/cb'],
    ['a registered host as a subdomain', 'https://app.example.evil.com/cb'],
    ['user info before the host', 'https://app.example@evil.com/cb'],
    ['an extra path segment', 'https://app.example/cb/extra'],
    ['a dot segment', 'https://app.example/cb/../evil'],
    ['an encoded slash', 'https://app.example/cb%2F..%2Fevil'],
    ['an added query', 'https://app.example/cb?next=https://evil.com'],
    ['an added fragment', 'https://app.example/cb#evil'],
    ['a trailing space', `${REDIRECT_URI} `],
    ['plain http', 'http://app.example/cb'],
    ['a port', 'https://app.example:443/cb'],
    ['a javascript: URI', 'javascript:alert(1)'],
    ['a registered URI of another application', 'https://hostile.example/cb'],
  ])('a redirect_uri with %s', async (_case, redirectUri) => {
    const response = await browser().get(authorizePath(request({ redirect_uri: redirectUri })));
    expectErrorPage(response, 400, 'This sign-in link is not valid');
    expect(response.text).not.toContain('evil');
  });

  it('a registered redirect_uri with a query matches only as registered, character for character', async () => {
    const exact = await browser().get(authorizePath(request({ redirect_uri: REDIRECT_WITH_QUERY })));
    expect(exact.status).toBe(200);
    const reordered = await browser().get(authorizePath(request({ redirect_uri: 'https://app.example/cb?x=1&tenant=a%20b' })));
    expectErrorPage(reordered, 400, 'not valid');
    const reencoded = await browser().get(authorizePath(request({ redirect_uri: 'https://app.example/cb?tenant=a+b&x=1' })));
    expectErrorPage(reencoded, 400, 'not valid');
  });
});

describe('once the redirect_uri is trusted, errors go back to the application', () => {
  it.each([
    ['no response_type', request({ response_type: undefined }), 'invalid_request', 'response_type'],
    ['response_type=token', request({ response_type: 'token' }), 'unsupported_response_type', 'code'],
    ['a combined response_type', request({ response_type: 'code id_token' }), 'unsupported_response_type', 'code'],
    ['an unknown scope', request({ scope: 'public tickets:admin' }), 'invalid_scope', 'Unknown scope'],
    ['a scope the application may not have', request({ scope: 'organizer' }), 'invalid_scope', 'may not request'],
    ['a malformed scope', request({ scope: 'pub"lic' }), 'invalid_scope', 'malformed'],
    ['PKCE with the plain method', request({ code_challenge: pkcePair().verifier, code_challenge_method: 'plain' }), 'invalid_request', 'S256'],
    ['a challenge without a method (plain by default)', request({ code_challenge: pkcePair().challenge }), 'invalid_request', 'S256'],
    ['a method without a challenge', request({ code_challenge_method: 'S256' }), 'invalid_request', 'code_challenge'],
    ['a challenge too short', request({ code_challenge: 'a'.repeat(42), code_challenge_method: 'S256' }), 'invalid_request', '43 to 128'],
    ['a challenge too long', request({ code_challenge: 'a'.repeat(129), code_challenge_method: 'S256' }), 'invalid_request', '43 to 128'],
    ['a challenge outside base64url', request({ code_challenge: `${'a'.repeat(42)}+`, code_challenge_method: 'S256' }), 'invalid_request', '43 to 128'],
  ])('%s', async (_case, parameters, error, description) => {
    const response = await browser().get(authorizePath(parameters));
    expect(response.status).toBe(302);
    const answer = redirectedTo(response, `${REDIRECT_URI}?`);
    expect(answer.get('error')).toBe(error);
    expect(answer.get('error_description')).toContain(description);
    expect(answer.get('state')).toBe('state-123');
    expect(answer.get('code')).toBeNull();
  });

  it('a public client without a PKCE challenge', async () => {
    const response = await browser().get(authorizePath(request({ client_id: 'mobile', redirect_uri: MOBILE_REDIRECT_URI })));
    const answer = redirectedTo(response, `${MOBILE_REDIRECT_URI}?`);
    expect(answer.get('error')).toBe('invalid_request');
    expect(answer.get('error_description')).toContain('PKCE');
  });

  it('keeps the registered query of the redirect_uri as it is, and omits state when none was given', async () => {
    const response = await browser().get(authorizePath(request({ redirect_uri: REDIRECT_WITH_QUERY, response_type: 'token', state: undefined })));
    expect(response.location!.startsWith(`${REDIRECT_WITH_QUERY}&error=unsupported_response_type&`)).toBe(true);
    expect(redirectedTo(response, REDIRECT_WITH_QUERY).has('state')).toBe(false);
  });

  it('keeps a registered query ending in "?" and adds its parameters as pairs of their own (found by the redirect property)', async () => {
    const response = await browser().get(authorizePath(request({ redirect_uri: REDIRECT_QUERY_ENDING_IN_QUESTION_MARK, response_type: 'token' })));
    expect(response.location!.startsWith(`${REDIRECT_QUERY_ENDING_IN_QUESTION_MARK}&error=unsupported_response_type&`)).toBe(true);
    const answer = new URL(response.location!).searchParams;
    expect({ return: answer.get('return'), error: answer.get('error'), state: answer.get('state') }).toEqual({
      return: '/seats?',
      error: 'unsupported_response_type',
      state: 'state-123',
    });
  });

  it('ignores unknown parameters, even repeated ones', async () => {
    const response = await browser().get(authorizePath(request({ x_vendor_extension: ['a', 'b'], ui_locales: 'en' })));
    expect(response.status).toBe(200);
    expect(response.text).toContain('Sign in');
  });
});

describe('the sign-in page', () => {
  it('is an accessible form with a CSRF token, served with the protective headers and cookie', async () => {
    const response = await browser().get(authorizePath(request()));
    expect(response.status).toBe(200);
    const page = response.text;
    expect(page).toMatch(/^<!doctype html>\n<html lang="en">/);
    expect(page).toContain('to continue to <strong>Box Office</strong>');
    expect(page).toContain('<label for="email">');
    expect(page).toContain('<label for="password">');
    expect(page).toMatch(/<input id="email" name="email" type="email" autocomplete="username" required value="" autofocus>/);
    expect(page).not.toContain('<script');
    expect(formFields(page).csrf_token).toMatch(/^[A-Za-z0-9_-]{43}$/);

    expect(response.headers.get('x-frame-options')).toBe('DENY');
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.headers.get('referrer-policy')).toBe('no-referrer');
    const csp = response.headers.get('content-security-policy')!;
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toMatch(/script-src|unsafe-inline/);
    // A remembered approval sends the code from the sign-in's redirect: form-action lets it reach the application.
    expect(csp).toContain("form-action 'self' https://app.example;");
    // The one inline stylesheet is allowed by its hash, and nothing else is.
    const style = /<style>([\s\S]*?)<\/style>/.exec(page)![1]!;
    expect(csp).toContain(`style-src 'sha256-${createHash('sha256').update(style).digest('base64')}'`);

    const cookie = response.headers.getSetCookie();
    expect(cookie).toHaveLength(1);
    expect(cookie[0]).toMatch(/^tokengate_session=[A-Za-z0-9_-]{43}; Max-Age=3600; Path=\/oauth; HttpOnly; SameSite=Lax$/);
  });

  it('marks the session cookie Secure, and calls the sign-in secure, only when the issuer is reached over https', async () => {
    const plain = await new FormClient(issuer.baseUrl).get(authorizePath(request()));
    expect(plain.text).toContain('<footer class="foot">Sign-in · 127.0.0.1:8080</footer>');
    expect(plain.text).not.toContain('Secure');
    expect(plain.headers.getSetCookie()[0]).not.toMatch(/; Secure(;|$)/);

    const secure = await startTokengate('authorize-https', { sharing: issuer, config: { issuer: { issuerUrl: 'https://auth.example' } } });
    try {
      const client = new FormClient(secure.baseUrl);
      const response = await client.get(authorizePath(request()));
      // Over https: __Host- (only this host may set it, not a sibling subdomain), so Path=/ and Secure.
      expect(response.headers.getSetCookie()[0]).toMatch(/^__Host-tokengate_session=[A-Za-z0-9_-]{43}; Max-Age=3600; Path=\/; HttpOnly; Secure; SameSite=Lax$/);
      expect(response.text).toContain('<footer class="foot">Secure sign-in · auth.example</footer>');
      // Every step reads and sets that cookie: sign in, consent, switch account (which clears it with the same attributes).
      const signedIn = await client.post('/oauth/authorize/login', { ...formFields(response.text), email: EMAIL, password: PASSWORD });
      expect(signedIn.status).toBe(303);
      expect(signedIn.headers.getSetCookie()[0]).toMatch(/^__Host-tokengate_session=[A-Za-z0-9_-]{43}; Max-Age=3600; Path=\/; HttpOnly; Secure; SameSite=Lax$/);
      const consent = await client.follow(signedIn);
      expect(consent.text).toContain('wants to access your');
      const switched = await client.post('/oauth/authorize/switch-account', formFields(consent.text));
      expect(switched.headers.getSetCookie()[0]).toMatch(
        /^__Host-tokengate_session=; Max-Age=0; Path=\/; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; Secure; SameSite=Lax$/,
      );
      // The plain name is not read over https: a cookie a sibling could plant counts for nothing.
      const planted = new FormClient(secure.baseUrl);
      planted.cookies.set('tokengate_session', client.cookies.get('__Host-tokengate_session') ?? 'x');
      expect((await planted.get(authorizePath(request()))).headers.getSetCookie()[0]).toMatch(/^__Host-tokengate_session=/);
    } finally {
      await secure.close();
    }
  });

  it('after a wrong password shows the form again: generic message, e-mail kept, password empty', async () => {
    const client = browser();
    const login = await client.get(authorizePath(request()));
    const failed = await client.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: 'wrong password' });
    expect(failed.status).toBe(200);
    expect(failed.text).toContain('<p class="alert" id="login-error" role="alert">The e-mail or password is incorrect.</p>');
    expect(failed.text).toContain(`value="${EMAIL}" aria-invalid="true" aria-describedby="login-error"`);
    expect(failed.text).toMatch(
      /<input id="password" name="password" type="password" autocomplete="current-password" required autofocus aria-invalid="true" aria-describedby="login-error">/,
    );
    expect(failed.text).not.toContain('wrong password');
    expect(failed.headers.get('set-cookie')).toBeNull();

    // An unknown e-mail gets exactly the same answer: nothing tells which accounts exist.
    const unknown = await client.post('/oauth/authorize/login', { ...formFields(login.text), email: 'nobody@example.com', password: 'wrong password' });
    expect(unknown.status).toBe(200);
    expect(unknown.text.replace('nobody@example.com', EMAIL)).toBe(failed.text);
  });

  it('says which field is missing, next to that field', async () => {
    const client = browser();
    const login = await client.get(authorizePath(request()));
    const response = await client.post('/oauth/authorize/login', { ...formFields(login.text), email: ' ', password: '' });
    expect(response.status).toBe(200);
    expect(response.text).toContain(
      'aria-invalid="true" aria-describedby="email-error">\n<p class="field-error" id="email-error">Enter your e-mail address.</p>',
    );
    expect(response.text).toContain(
      'aria-invalid="true" aria-describedby="password-error">\n<p class="field-error" id="password-error">Enter your password.</p>',
    );
  });

  it('accepts the e-mail in any case and with surrounding spaces', async () => {
    await signIn(browser(), request(), `  ${EMAIL.toUpperCase()} `);
  });
});

describe("CSRF: every form needs the session's own token", () => {
  async function loginForm(): Promise<{ client: FormClient; fields: { csrf_token: string; request_id: string } }> {
    const client = browser();
    const login = await client.get(authorizePath(request()));
    return { client, fields: formFields(login.text) };
  }

  it("a login without a token, with a wrong one, or with another session's is refused with 403 and signs nobody in", async () => {
    const { client, fields } = await loginForm();
    const other = await loginForm();
    const last = fields.csrf_token.at(-1);
    const attempts: Array<Record<string, string | string[]>> = [
      { request_id: fields.request_id },
      { request_id: fields.request_id, csrf_token: '' },
      { request_id: fields.request_id, csrf_token: `${fields.csrf_token.slice(0, -1)}${last === 'A' ? 'B' : 'A'}` },
      { request_id: fields.request_id, csrf_token: other.fields.csrf_token },
      { request_id: fields.request_id, csrf_token: [fields.csrf_token, fields.csrf_token] },
    ];
    for (const attempt of attempts) {
      const response = await client.post('/oauth/authorize/login', { ...attempt, email: EMAIL, password: PASSWORD });
      expectErrorPage(response, 403, 'This page has expired');
      expect(response.headers.get('set-cookie')).toBeNull();
    }
    // Still anonymous: the same cookie gets the sign-in page, not the consent page.
    const again = await client.get(authorizePath(request()));
    expect(again.text).toContain('Sign in');
  });

  it('a post without any session (a cross-site form has no cookie under SameSite=Lax) is refused with 403', async () => {
    const { fields } = await loginForm();
    const response = await browser().post('/oauth/authorize/login', { ...fields, email: EMAIL, password: PASSWORD });
    expectErrorPage(response, 403, 'This page has expired');
  });

  it('a decision without the right token is refused and issues no code', async () => {
    const client = browser();
    const consent = await signIn(client);
    const { request_id } = formFields(consent.text);
    for (const csrf of [undefined, 'x'.repeat(43)]) {
      const response = await client.post('/oauth/authorize/decision', { request_id, decision: 'approve', ...(csrf === undefined ? {} : { csrf_token: csrf }) });
      expectErrorPage(response, 403, 'This page has expired');
    }
    // The real form still works afterwards: the refused posts consumed nothing.
    const approved = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    expect(redirectedTo(approved, `${REDIRECT_URI}?`).get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  it('answers a form for a request this session never showed with an expired-request page', async () => {
    const { client, fields } = await loginForm();
    const response = await client.post('/oauth/authorize/login', { ...fields, request_id: 'made-up', email: EMAIL, password: PASSWORD });
    expectErrorPage(response, 400, 'This sign-in request has expired');
  });

  it('refuses a form post that is not a form with an HTML page', async () => {
    const client = browser();
    await client.get(authorizePath(request()));
    const post = (contentType: string, body: string) =>
      fetch(new URL('/oauth/authorize/login', issuer.baseUrl), {
        method: 'POST',
        headers: { cookie: client.cookieHeader(), 'content-type': contentType },
        body,
      });
    const xml = await post('application/xml', '<login/>');
    expect(xml.status).toBe(415);
    expect(xml.headers.get('content-type')).toBe('text/html; charset=utf-8');
    // Only a form is read: JSON and text/plain (what a cross-site page can send without a
    // preflight) are 415 even when they carry the form's fields.
    const fields = formFields((await client.get(authorizePath(request()))).text);
    const json = await post('application/json', JSON.stringify({ ...fields, email: EMAIL, password: PASSWORD }));
    expect(json.status).toBe(415);
    expect(await json.text()).toContain('application/x-www-form-urlencoded');
    const text = await post('text/plain', new URLSearchParams({ ...fields, email: EMAIL, password: PASSWORD }).toString());
    expect(text.status).toBe(415);
    const huge = await post('application/x-www-form-urlencoded', `email=${'a'.repeat(20_000)}`);
    expect(huge.status).toBe(413);
    expect(await huge.text()).toContain('too large');
  });
});

describe('sessions', () => {
  it('get a new id at login: a cookie known before login (planted by an attacker) never becomes signed in', async () => {
    const client = browser();
    const login = await client.get(authorizePath(request()));
    const planted = client.cookies.get('tokengate_session')!;
    const signedIn = await client.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: PASSWORD });
    expect(signedIn.status).toBe(303);
    const fresh = client.cookies.get('tokengate_session')!;
    expect(fresh).not.toBe(planted);
    expect(await issuer.store.sessions.get(tokenDigest(planted))).toBeNull();
    expect((await issuer.store.sessions.get(tokenDigest(fresh)))?.userId).toBe('user-ann');

    const attacker = new FormClient(issuer.baseUrl);
    attacker.cookies.set('tokengate_session', planted);
    const attackerView = await attacker.get(authorizePath(request()));
    expect(attackerView.text).toContain('Sign in');
    expect(attackerView.text).not.toContain('wants to access');
  });

  it('are kept in the store under a digest of the cookie, never the cookie value, and only once signed in', async () => {
    const client = browser();
    await client.get(authorizePath(request()));
    const anonymous = client.cookies.get('tokengate_session')!;
    const raw = rawRedis();
    try {
      // The sign-in page stores nothing: its form carries the request.
      expect(await raw.keys(`${issuer.prefix}session:${tokenDigest(anonymous)}`)).toEqual([]);
      await signIn(client);
      const value = client.cookies.get('tokengate_session')!;
      const keys = await raw.keys(`${issuer.prefix}session:*`);
      expect(keys).toContain(`${issuer.prefix}session:${tokenDigest(value)}`);
      expect(keys.some((key) => key.includes(value))).toBe(false);
    } finally {
      raw.disconnect();
    }
  });

  it('a cookie value this deployment never minted is ignored', async () => {
    const client = browser();
    client.cookies.set('tokengate_session', 'forged-value');
    const response = await client.get(authorizePath(request()));
    expect(response.text).toContain('Sign in');
    expect(client.cookies.get('tokengate_session')).not.toBe('forged-value');
  });

  it('"Use another account" ends the session and shows the sign-in page again', async () => {
    const client = browser();
    const consent = await signIn(client);
    const signedInCookie = client.cookies.get('tokengate_session')!;
    const switched = await client.post('/oauth/authorize/switch-account', formFields(consent.text));
    expect(switched.status).toBe(303);
    expect(switched.headers.getSetCookie()[0]).toMatch(/^tokengate_session=; Max-Age=0; Path=\/oauth; Expires=Thu, 01 Jan 1970/);
    expect(await issuer.store.sessions.get(tokenDigest(signedInCookie))).toBeNull();
    const login = await client.follow(switched);
    expect(login.text).toContain('Sign in');
    expect(login.text).toContain('Box Office');
  });
});

describe('consent', () => {
  it('names the application and the scopes in words, and approval redirects with a code whose record is right', async () => {
    const client = browser();
    const pkce = pkcePair();
    const consent = await signIn(client, request({ scope: 'public', code_challenge: pkce.challenge, code_challenge_method: 'S256' }));
    expect(consent.text).toContain('<strong>Box Office</strong> wants to access your Ticketing account');
    expect(consent.text).toContain('<li>See your profile and manage your tickets</li>');
    expect(consent.text).toContain(`Signed in as <strong>${EMAIL}</strong>`);
    // The form may lead on to the application's redirect_uri (CSP form-action also governs the redirect).
    expect(consent.headers.get('content-security-policy')).toContain("form-action 'self' https://app.example;");

    const before = Date.now();
    const approved = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    expect(approved.status).toBe(303);
    expect(approved.headers.get('referrer-policy')).toBe('no-referrer');
    expect(approved.headers.get('cache-control')).toBe('no-store');
    const answer = redirectedTo(approved, `${REDIRECT_URI}?code=`);
    expect([...answer.keys()]).toEqual(['code', 'state', 'iss']);
    expect(answer.get('state')).toBe('state-123');
    // RFC 9207: the issuer identifier, as the metadata's `issuer` says it.
    expect(answer.get('iss')).toBe(issuer.tokengate.context.config.issuer.issuerUrl);
    const code = answer.get('code')!;
    expect(issuer.tokengate.context.minter.hasValidTag(code)).toBe(true);

    const stored = await issuer.store.codes.consume(tokenDigest(code));
    expect(stored?.firstUse).toBe(true);
    const record = stored!.record;
    expect(record).toMatchObject({
      clientId: 'box-office',
      userId: 'user-ann',
      redirectUri: REDIRECT_URI,
      scopes: ['public'],
      codeChallenge: pkce.challenge,
      codeChallengeMethod: 'S256',
    });
    expect(record.familyId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(record.issuedAt).toBeGreaterThanOrEqual(before);
    expect(record.expiresAt - record.issuedAt).toBe(600_000);
  });

  it('gives a confidential client without PKCE the default scopes and a code without challenge', async () => {
    const client = browser();
    const consent = await signIn(client, request({ state: undefined }));
    const approved = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    const answer = redirectedTo(approved, `${REDIRECT_URI}?code=`);
    expect(answer.has('state')).toBe(false);
    const record = (await issuer.store.codes.consume(tokenDigest(answer.get('code')!)))!.record;
    expect(record).toMatchObject({ scopes: ['public'], codeChallenge: null, codeChallengeMethod: null });
  });

  it('appends the code to a redirect_uri that has a query, keeping that query as registered', async () => {
    const client = browser();
    const consent = await signIn(client, request({ redirect_uri: REDIRECT_WITH_QUERY, state: 'a b&c=d' }));
    const approved = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    expect(approved.location!).toMatch(/^https:\/\/app\.example\/cb\?tenant=a%20b&x=1&code=[A-Za-z0-9_-]{43}&state=a\+b%26c%3Dd&iss=[^&]+$/);
    expect(redirectedTo(approved, REDIRECT_WITH_QUERY).get('state')).toBe('a b&c=d');
  });

  it('works for a public client with PKCE and a custom-scheme redirect_uri', async () => {
    const client = browser();
    const pkce = pkcePair();
    const consent = await signIn(
      client,
      request({ client_id: 'mobile', redirect_uri: MOBILE_REDIRECT_URI, code_challenge: pkce.challenge, code_challenge_method: 'S256' }),
    );
    expect(consent.headers.get('content-security-policy')).toContain("form-action 'self' com.example.tickets:;");
    const approved = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    const code = redirectedTo(approved, `${MOBILE_REDIRECT_URI}?code=`).get('code')!;
    expect((await issuer.store.codes.consume(tokenDigest(code)))!.record).toMatchObject({ clientId: 'mobile', codeChallenge: pkce.challenge });
  });

  it('deny sends access_denied and the state back, and no code', async () => {
    const client = browser();
    const consent = await signIn(client);
    const denied = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'deny' });
    expect(denied.status).toBe(303);
    const answer = redirectedTo(denied, `${REDIRECT_URI}?error=access_denied`);
    expect(answer.get('state')).toBe('state-123');
    expect(answer.get('error_description')).toBe('The user denied the request.');
    expect(answer.get('iss')).toBe(issuer.tokengate.context.config.issuer.issuerUrl);
    expect(answer.has('code')).toBe(false);
  });

  it('answers each request once: the same form posted again mints nothing', async () => {
    const client = browser();
    const consent = await signIn(client);
    const first = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    expect(first.status).toBe(303);
    const second = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    expectErrorPage(second, 400, 'This sign-in request has expired');
  });

  it('checks the request again on approval: an application deleted meanwhile gets no code and no redirect', async () => {
    await issuer.store.applications.put(application({ clientId: 'short-lived', name: 'Short Lived' }));
    const client = browser();
    const consent = await signIn(client, request({ client_id: 'short-lived' }));
    await deleteApplicationAndTokens(issuer.store, 'short-lived');
    const response = await client.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    expectErrorPage(response, 400, 'Unknown application');
  });

  it('escapes every value it shows: an application named <script> is text', async () => {
    const client = browser();
    const consent = await signIn(client, request({ client_id: 'hostile', redirect_uri: 'https://hostile.example/cb' }));
    expect(consent.text).not.toContain('<script');
    expect(consent.text).toContain('<strong>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;Co&#39;</strong> wants to access');
    expect(consent.text).toContain('<div class="app-badge" aria-hidden="true">&lt;</div>');

    const login = await browser().get(authorizePath(request({ client_id: 'hostile', redirect_uri: 'https://hostile.example/cb' })));
    expect(login.text).not.toContain('<script');
    const typed = `"><script>alert(1)</script>`;
    const failed = await browser().post('/oauth/authorize/login', { ...formFields(login.text), email: typed, password: 'x' });
    expect(failed.text).not.toContain('<script');
  });

  it('escapes the e-mail kept in the form after a failed login', async () => {
    const client = browser();
    const login = await client.get(authorizePath(request()));
    const typed = `"><script>alert(1)</script>@example.com`;
    const failed = await client.post('/oauth/authorize/login', { ...formFields(login.text), email: typed, password: 'x' });
    expect(failed.status).toBe(200);
    expect(failed.text).not.toContain('<script');
    expect(failed.text).toContain('value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;@example.com"');
  });

  it('a decision from a session that never signed in is refused', async () => {
    const client = browser();
    const login = await client.get(authorizePath(request()));
    const response = await client.post('/oauth/authorize/decision', { ...formFields(login.text), decision: 'approve' });
    expectErrorPage(response, 403, 'This page has expired');
  });
});

describe('when the store is unreachable', () => {
  it('shows a temporarily-unavailable page (503), never a redirect or a 500', async () => {
    const { createTestRedisStore, uniquePrefix } = await import('./support/redis.js');
    const { buildTokengate } = await import('../src/app.js');
    const { parseConfig } = await import('../src/load-config.js');
    const store = createTestRedisStore(uniquePrefix('authorize-down'), { url: 'redis://127.0.0.1:1', commandTimeoutMs: 200 });
    const config = parseConfig('issuer:\n  tokenTagKey: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nlogging:\n  level: silent\n', 'down');
    const tokengate = await buildTokengate(config, { store });
    try {
      const response = await tokengate.app.inject({ method: 'GET', url: authorizePath(request()) });
      expect(response.statusCode).toBe(503);
      expect(response.headers.location).toBeUndefined();
      expect(response.body).toContain('Sign-in is temporarily unavailable');
    } finally {
      await tokengate.close();
      await store.close();
    }
  });
});

describe('configuration of the pages', () => {
  it('refuses a scope description for a scope the issuer does not know', async () => {
    const { parseConfig } = await import('../src/load-config.js');
    expect(() => parseConfig('issuer:\n  scopes: [public]\n  scopeDescriptions:\n    admin: Do anything\n', 'pages.yaml')).toThrow(
      /issuer\.scopeDescriptions\.admin \(line 4\): "admin" is not in issuer\.scopes/,
    );
    expect(parseConfig('issuer:\n  serviceName: Box Office Live\n', 'pages.yaml').issuer).toMatchObject({
      serviceName: 'Box Office Live',
      scopeDescriptions: { public: 'See your profile and manage your tickets' },
    });
  });
});
