import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { endGrant } from '../src/store/deletions.js';
import { tokenDigest } from '../src/token/token-value.js';
import { postForm, startTokengate, type RunningTokengate } from './support/instance.js';
import { FormClient, application, authorizePath, createUser, formFields, type PageResponse } from './support/issuer.js';
import { eventually } from './support/wait.js';

/**
 * Remembered consent over real HTTP with one signed-in browser (cookies kept, redirects read):
 * a second authorization a grant covers comes straight back with a code, more scopes show the
 * consent page for the difference, prompt=consent shows it, a client whose identity cannot be
 * assured is shown it every time; and the grant bounds the token endpoint: a code or refresh
 * token issued under a grant that ended issues nothing.
 */

const EMAIL = 'remembered@example.com';
const PASSWORD = 'a remembered password';
const SECRET = 'box-office-secret';
const WEB = 'https://box-office.example/cb';
const LOOPBACK = 'http://127.0.0.1:53682/callback';
const CUSTOM_SCHEME = 'com.example.tickets:/oauth/cb';
const PUBLIC_WEB = 'https://spa.example/cb';
const USER_ID = 'user-remembered';

let issuer: RunningTokengate;
/** The one signed-in browser of this file (a sign-in costs a second of scrypt). */
let browser: FormClient;

beforeAll(async () => {
  issuer = await startTokengate('consent-remembered', {
    config: {
      issuer: {
        scopes: ['public', 'organizer'],
        scopeDescriptions: { public: 'See your profile and manage your tickets', organizer: 'Manage the events you organize' },
      },
    },
  });
  const secretDigest = clientSecretDigest(SECRET);
  const scopes = ['public', 'organizer'];
  await issuer.store.applications.put(application({ clientId: 'box-office', name: 'Box Office', secretDigest, redirectUris: [WEB], scopes }));
  await issuer.store.applications.put(
    application({ clientId: 'desktop', name: 'Desktop Tickets', secretDigest, redirectUris: [LOOPBACK, CUSTOM_SCHEME], scopes }),
  );
  await issuer.store.applications.put(
    application({ clientId: 'spa', name: 'Seat Picker', secretDigest: null, confidential: false, redirectUris: [PUBLIC_WEB], scopes }),
  );
  await createUser(issuer.store, USER_ID, EMAIL, PASSWORD);

  browser = new FormClient(issuer.baseUrl);
  const login = await browser.get(authorizePath(request('box-office', WEB)));
  const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: PASSWORD });
  expect(signedIn.status).toBe(303);
});

afterAll(async () => {
  await issuer?.close();
});

interface Pkce {
  verifier: string;
  challenge: string;
}

function pkce(): Pkce {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

function request(clientId: string, redirectUri: string, extra: Record<string, string> = {}, proof: Pkce | null = null): Record<string, string> {
  return {
    client_id: clientId,
    redirect_uri: redirectUri,
    response_type: 'code',
    state: randomBytes(6).toString('hex'),
    ...(proof === null ? {} : { code_challenge: proof.challenge, code_challenge_method: 'S256' }),
    ...extra,
  };
}

/** The code and state a redirect to `redirectUri` carries. */
function codeFrom(response: PageResponse, redirectUri: string): { code: string; state: string | null } {
  expect([302, 303], response.text.slice(0, 300)).toContain(response.status);
  expect(response.location!.startsWith(`${redirectUri}?`)).toBe(true);
  const query = new URL(response.location!.replace(/^[a-z.]+:\//, 'x://')).searchParams;
  expect(query.get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
  return { code: query.get('code')!, state: query.get('state') };
}

/** Opens an authorization request: the consent page (200), or the redirect a remembered grant sends at once. */
function authorize(parameters: Record<string, string>): Promise<PageResponse> {
  return browser.get(authorizePath(parameters));
}

async function approve(consent: PageResponse): Promise<PageResponse> {
  expect(consent.status, consent.text.slice(0, 300)).toBe(200);
  return browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
}

function exchange(code: string, clientId: string, redirectUri: string, proof: Pkce | null = null): Promise<Response> {
  return postForm(`${issuer.baseUrl}/oauth/token`, {
    grant_type: 'authorization_code',
    code,
    redirect_uri: redirectUri,
    client_id: clientId,
    ...(proof === null ? { client_secret: SECRET } : { code_verifier: proof.verifier }),
  });
}

async function tokensOf(response: Response): Promise<{ access_token: string; refresh_token: string; scope: string }> {
  const body = (await response.json()) as { access_token: string; refresh_token: string; scope: string };
  expect(response.status, JSON.stringify(body)).toBe(200);
  return body;
}

async function refused(response: Response): Promise<string> {
  const body = (await response.json()) as { error: string; error_description: string };
  expect({ status: response.status, error: body.error }).toEqual({ status: 400, error: 'invalid_grant' });
  return body.error_description;
}

/** The first list of scopes on a consent page: what the approval would add. */
function listedScopes(page: string): string[] {
  const list = /<ul class="scopes">\n([\s\S]*?)<\/ul>/.exec(page)![1]!;
  return [...list.matchAll(/<li>([^<]*)<\/li>/g)].map((match) => match[1]!);
}

describe('remembered consent', () => {
  it('asks once; a second authorization of a confidential web application with those scopes comes straight back with a code, and uses the grant', async () => {
    const first = request('box-office', WEB);
    const consent = await authorize(first);
    expect(consent.text).toContain('wants to access your');
    expect(listedScopes(consent.text)).toEqual(['See your profile and manage your tickets']);
    const { code } = codeFrom(await approve(consent), WEB);
    await tokensOf(await exchange(code, 'box-office', WEB));
    const grant = await issuer.store.grants.get(USER_ID, 'box-office');
    expect(grant).toMatchObject({ scopes: ['public'], resources: [] });

    await eventually(() => Date.now() > grant!.lastUsedAt);
    const second = request('box-office', WEB);
    const remembered = await authorize(second);
    // No page at all: the code goes back to the application, with the state it sent.
    expect(remembered.status).toBe(302);
    const answer = codeFrom(remembered, WEB);
    expect(answer.state).toBe(second.state);
    const tokens = await tokensOf(await exchange(answer.code, 'box-office', WEB));
    expect(tokens.scope).toBe('public');
    const used = await issuer.store.grants.get(USER_ID, 'box-office');
    expect(used).toMatchObject({ id: grant!.id, approvedAt: grant!.approvedAt });
    expect(used!.lastUsedAt).toBeGreaterThan(grant!.lastUsedAt);
  });

  it('shows the consent page for the difference only when more scopes are asked for, and grows the grant on approval', async () => {
    const consent = await authorize(request('box-office', WEB, { scope: 'public organizer' }));
    expect(consent.status).toBe(200);
    expect(consent.text).toContain('wants more access to your');
    expect(consent.text).toContain('New: this will also allow');
    expect(listedScopes(consent.text)).toEqual(['Manage the events you organize']);
    expect(consent.text).toMatch(/can already:<\/h2>\n<ul class="scopes granted">\n<li>See your profile and manage your tickets<\/li>/);
    const { code } = codeFrom(await approve(consent), WEB);
    expect((await tokensOf(await exchange(code, 'box-office', WEB))).scope).toBe('public organizer');
    expect((await issuer.store.grants.get(USER_ID, 'box-office'))!.scopes).toEqual(['public', 'organizer']);

    // Both are remembered now, alone or together.
    for (const scope of ['public organizer', 'organizer']) codeFrom(await authorize(request('box-office', WEB, { scope })), WEB);
  });

  it('shows the consent page for prompt=consent, covered or not, saying the application asked', async () => {
    const consent = await authorize(request('box-office', WEB, { prompt: 'consent' }));
    expect(consent.status).toBe(200);
    expect(consent.text).toContain('wants to access your');
    expect(consent.text).toContain('Box Office asked to have you confirm it.');
    codeFrom(await approve(consent), WEB);
  });

  it.each([
    ['a public client', 'spa', PUBLIC_WEB, true],
    ['a confidential application sending the user to a loopback address', 'desktop', LOOPBACK, false],
    ['a confidential application sending the user to a custom scheme', 'desktop', CUSTOM_SCHEME, false],
  ])('never lets %s through silently: the page every time, saying it was approved before', async (_case, clientId, redirectUri, isPublic) => {
    for (let round = 0; round < 2; round++) {
      const proof = isPublic ? pkce() : null;
      const consent = await authorize(request(clientId, redirectUri, {}, proof));
      expect(consent.status).toBe(200);
      if (round === 1) expect(consent.text).toContain('You are asked each time');
      const { code } = codeFrom(await approve(consent), redirectUri);
      await tokensOf(await exchange(code, clientId, redirectUri, proof));
    }
  });
});

describe('the grant bounds the token endpoint', () => {
  it('refuses a code issued under a grant that ended before it was exchanged, and revokes what it had saved', async () => {
    const { code } = codeFrom(await authorize(request('box-office', WEB)), WEB);
    // The grant goes, its tokens untouched: only the grant's own check stands between the code and tokens.
    expect(await issuer.store.grants.delete(USER_ID, 'box-office', Date.now())).toBe(true);
    expect(await refused(await exchange(code, 'box-office', WEB))).toContain('disconnected');
    // The tokens it saved before it found the grant gone were revoked: nothing of the user is left at the application.
    await endGrant(issuer.store, USER_ID, 'box-office');
    expect(await issuer.store.tokens.revokeUserClientTokens(USER_ID, 'box-office')).toBe(0);
  });

  it('refuses a code of an earlier grant after the user connected the application again', async () => {
    const { code: early } = codeFrom(await approve(await authorize(request('box-office', WEB))), WEB);
    await endGrant(issuer.store, USER_ID, 'box-office');
    const { code: fresh } = codeFrom(await approve(await authorize(request('box-office', WEB))), WEB);
    await refused(await exchange(early, 'box-office', WEB));
    await tokensOf(await exchange(fresh, 'box-office', WEB));
  });

  it('refuses the refresh token of a disconnected application, and refreshes while connected (the grant marked used)', async () => {
    const { code } = codeFrom(await authorize(request('box-office', WEB)), WEB);
    const tokens = await tokensOf(await exchange(code, 'box-office', WEB));
    const before = (await issuer.store.grants.get(USER_ID, 'box-office'))!.lastUsedAt;
    await eventually(() => Date.now() > before);
    const refresh = (refreshToken: string) =>
      postForm(`${issuer.baseUrl}/oauth/token`, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: 'box-office', client_secret: SECRET });
    const renewed = await tokensOf(await refresh(tokens.refresh_token));
    expect((await issuer.store.grants.get(USER_ID, 'box-office'))!.lastUsedAt).toBeGreaterThan(before);

    expect((await endGrant(issuer.store, USER_ID, 'box-office')).revoked).toBeGreaterThanOrEqual(2);
    expect(await issuer.store.tokens.getAccessToken(tokenDigest(renewed.access_token))).toBeNull();
    await refused(await refresh(renewed.refresh_token));
  });

  it('turns a code from before grants were kept into the grant the user consented to', async () => {
    await endGrant(issuer.store, USER_ID, 'box-office');
    // Issued after that disconnection (it made no grant of it).
    const ended = (await issuer.store.grants.endedAt(USER_ID, 'box-office'))!;
    await eventually(() => Date.now() > ended);
    const code = issuer.tokengate.context.minter.mint();
    const now = Date.now();
    await issuer.store.codes.save(tokenDigest(code), {
      clientId: 'box-office',
      userId: USER_ID,
      redirectUri: WEB,
      scopes: ['public', 'organizer'],
      codeChallenge: null,
      codeChallengeMethod: null,
      familyId: `legacy-${now}`,
      issuedAt: now,
      expiresAt: now + 60_000,
    });
    await tokensOf(await exchange(code, 'box-office', WEB));
    expect(await issuer.store.grants.get(USER_ID, 'box-office')).toMatchObject({ scopes: ['public', 'organizer'] });
    codeFrom(await authorize(request('box-office', WEB, { scope: 'organizer' })), WEB);
  });

  it('refuses a refresh token from before grants were kept once the user disconnected the application after it was issued', async () => {
    const refreshToken = issuer.tokengate.context.minter.mint();
    const now = Date.now();
    const familyId = `legacy-refresh-${now}`;
    const legacy = { clientId: 'box-office', userId: USER_ID, scopes: ['public'], familyId, issuedAt: now - 60_000, expiresAt: now + 60_000 };
    await issuer.store.tokens.saveRefreshToken(tokenDigest(refreshToken), legacy);
    const accessToken = await issuer.issue({ userId: USER_ID, clientId: 'box-office', familyId });
    // The grant ends, as on a version whose disconnection did not reach tokens saved before it kept grants.
    await issuer.store.grants.delete(USER_ID, 'box-office', Date.now());
    const refresh = await postForm(`${issuer.baseUrl}/oauth/token`, {
      grant_type: 'refresh_token',
      refresh_token: refreshToken,
      client_id: 'box-office',
      client_secret: SECRET,
    });
    expect(await refused(refresh)).toContain('disconnected');
    expect(await issuer.store.grants.get(USER_ID, 'box-office')).toBeNull();
    expect(await issuer.store.tokens.getAccessToken(tokenDigest(accessToken))).toBeNull();
  });
});
