import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import { createUser, FormClient, signInAndAuthorize } from './support/issuer.js';
import { registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { freePort } from './support/ports.js';

/**
 * A real OAuth client library against a running tokengate, discovering it from its metadata.
 * oauth4webapi refuses plain http unless told otherwise; the test instance is on the loopback.
 */
const insecure = { [oauth.allowInsecureRequests]: true } as const;

let running: RunningTokengate;
let as: oauth.AuthorizationServer;
let confidential: TestApplication;
let publicApp: TestApplication;
const userId = 'user-oauth4webapi';
const EMAIL = 'oauth4webapi@example.com';
const PASSWORD = 'correct horse battery';

beforeAll(async () => {
  const port = await freePort();
  running = await startTokengate('issuer-oauth-client', { port, config: { issuer: { issuerUrl: `http://127.0.0.1:${port}` } } });
  const issuer = new URL(running.baseUrl);
  as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
  confidential = await registerApplication(running.store);
  publicApp = await registerApplication(running.store, { confidential: false, redirectUri: 'http://127.0.0.1:9999/callback' });
  await createUser(running.store, userId, EMAIL, PASSWORD);
});
afterAll(async () => {
  await running.close();
});

/** The URL of the authorization request the library's client sends the user to. */
async function authorizationUrl(application: TestApplication, codeVerifier: string): Promise<URL> {
  const url = new URL(as.authorization_endpoint!);
  url.search = new URLSearchParams({
    client_id: application.clientId,
    redirect_uri: application.redirectUri,
    response_type: 'code',
    code_challenge: await oauth.calculatePKCECodeChallenge(codeVerifier),
    code_challenge_method: 'S256',
  }).toString();
  return url;
}

/**
 * The authorization step through the real pages (sign in, approve the first time: the user's
 * grant is remembered after), and the callback checked by
 * the library, which holds tokengate to its metadata: with `authorization_response_iss_parameter_supported`
 * it refuses a response without `iss`, or with another issuer's (RFC 9207).
 */
async function authorize(application: TestApplication, codeVerifier: string): Promise<URLSearchParams> {
  const url = await authorizationUrl(application, codeVerifier);
  const { location } = await signInAndAuthorize(new FormClient(running.baseUrl), url.pathname + url.search, EMAIL, PASSWORD);
  const client: oauth.Client = { client_id: application.clientId };
  return oauth.validateAuthResponse(as, client, location, oauth.expectNoState);
}

describe('oauth4webapi against tokengate', () => {
  it('discovers the endpoints', () => {
    expect(as.token_endpoint).toBe(`${running.baseUrl}/oauth/token`);
    expect(as.code_challenge_methods_supported).toEqual(['S256']);
    expect(as.authorization_response_iss_parameter_supported).toBe(true);
  });

  it('names the issuer in every authorization response (RFC 9207), and the library holds it to that', async () => {
    const client: oauth.Client = { client_id: confidential.clientId };
    const callback = await authorize(confidential, oauth.generateRandomCodeVerifier());
    expect(callback.get('iss')).toBe(running.baseUrl);

    // An error redirect names it too: the library gets past its issuer check to the error itself.
    const url = await authorizationUrl(confidential, oauth.generateRandomCodeVerifier());
    url.searchParams.set('scope', 'not-a-scope');
    const refused = await fetch(url, { redirect: 'manual' });
    const location = new URL(refused.headers.get('location')!);
    expect(location.searchParams.get('iss')).toBe(running.baseUrl);
    const error = await Promise.resolve()
      .then(() => oauth.validateAuthResponse(as, client, location, oauth.expectNoState))
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(oauth.AuthorizationResponseError);
    expect(error).toMatchObject({ error: 'invalid_scope' });

    // A response another authorization server sent (a mix-up) is refused by its iss.
    const mixedUp = new URL(location);
    mixedUp.search = new URLSearchParams({ code: 'x', iss: 'https://attacker.example' }).toString();
    expect(() => oauth.validateAuthResponse(as, client, mixedUp, oauth.expectNoState)).toThrow(/iss/);
  });

  it('completes client_credentials with client_secret_basic and client_secret_post', async () => {
    const client: oauth.Client = { client_id: confidential.clientId };
    for (const auth of [oauth.ClientSecretBasic(confidential.clientSecret!), oauth.ClientSecretPost(confidential.clientSecret!)]) {
      const response = await oauth.clientCredentialsGrantRequest(as, client, auth, new URLSearchParams({ scope: 'public' }), insecure);
      const result = await oauth.processClientCredentialsResponse(as, client, response);
      expect(result).toMatchObject({ token_type: 'bearer', expires_in: 7200, scope: 'public' });
      expect(result.refresh_token).toBeUndefined();
    }
  });

  it('completes authorization_code with PKCE, refresh and revocation for a confidential client', async () => {
    const client: oauth.Client = { client_id: confidential.clientId };
    const auth = oauth.ClientSecretBasic(confidential.clientSecret!);
    const codeVerifier = oauth.generateRandomCodeVerifier();
    const callback = await authorize(confidential, codeVerifier);
    const exchanged = await oauth.processAuthorizationCodeResponse(
      as,
      client,
      await oauth.authorizationCodeGrantRequest(as, client, auth, callback, confidential.redirectUri, codeVerifier, insecure),
    );
    expect(exchanged.refresh_token).toBeDefined();

    const refreshed = await oauth.processRefreshTokenResponse(
      as,
      client,
      await oauth.refreshTokenGrantRequest(as, client, auth, exchanged.refresh_token!, insecure),
    );
    expect(refreshed.refresh_token).not.toBe(exchanged.refresh_token);

    const introspected = await oauth.processIntrospectionResponse(
      as,
      client,
      await oauth.introspectionRequest(as, client, auth, refreshed.access_token, insecure),
    );
    expect(introspected).toMatchObject({ active: true, client_id: confidential.clientId, sub: userId });

    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, auth, refreshed.refresh_token!, insecure));
    expect(await running.store.tokens.getAccessToken(tokenDigest(refreshed.access_token))).toBeNull();
    const after = await oauth.processIntrospectionResponse(as, client, await oauth.introspectionRequest(as, client, auth, refreshed.access_token, insecure));
    expect(after.active).toBe(false);
  });

  it('completes authorization_code with PKCE, refresh and revocation for a public client', async () => {
    const client: oauth.Client = { client_id: publicApp.clientId };
    const auth = oauth.None();
    const codeVerifier = oauth.generateRandomCodeVerifier();
    const callback = await authorize(publicApp, codeVerifier);
    const exchanged = await oauth.processAuthorizationCodeResponse(
      as,
      client,
      await oauth.authorizationCodeGrantRequest(as, client, auth, callback, publicApp.redirectUri, codeVerifier, insecure),
    );
    const refreshed = await oauth.processRefreshTokenResponse(
      as,
      client,
      await oauth.refreshTokenGrantRequest(as, client, auth, exchanged.refresh_token!, insecure),
    );
    await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, auth, refreshed.access_token, insecure));
    expect(await running.store.tokens.getAccessToken(tokenDigest(refreshed.access_token))).toBeNull();
  });

  it("surfaces tokengate's RFC errors through the library", async () => {
    const client: oauth.Client = { client_id: confidential.clientId };
    const codeVerifier = oauth.generateRandomCodeVerifier();
    const callback = await authorize(confidential, codeVerifier);
    const response = await oauth.authorizationCodeGrantRequest(
      as,
      client,
      oauth.ClientSecretPost(confidential.clientSecret!),
      callback,
      confidential.redirectUri,
      oauth.generateRandomCodeVerifier(),
      insecure,
    );
    await expect(oauth.processAuthorizationCodeResponse(as, client, response)).rejects.toMatchObject({ error: 'invalid_grant', status: 400 });
    const wrongSecret = await oauth.clientCredentialsGrantRequest(as, client, oauth.ClientSecretBasic('wrong'), new URLSearchParams(), insecure);
    // A 401 carries the Basic challenge, which the library reports as such.
    const refusal = await oauth.processClientCredentialsResponse(as, client, wrongSecret).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(oauth.WWWAuthenticateChallengeError);
    expect(refusal).toMatchObject({ status: 401, cause: [{ scheme: 'basic', parameters: { realm: 'tokengate' } }] });
    expect(await (refusal as oauth.WWWAuthenticateChallengeError).response.json()).toMatchObject({ error: 'invalid_client' });
  });
});
