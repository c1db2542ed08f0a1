import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { exportJWK, SignJWT, type CryptoKey, type JWK } from 'jose';
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { proofMarksFor } from '../src/dpop/replay.js';
import { MemoryStore } from '../src/store/memory.js';
import { tokenDigest } from '../src/token/token-value.js';
import { caddyfile, nginxConf, nginxDecisionCacheConf } from '../examples/ingress/configs.mjs';
import { startUpstream, type Upstream } from './support/gateway.js';
import { caddyCommand, exchange, installed, nginxCommand, startIngress, startTicketingApi, type Ingress } from './support/ingress.js';
import { adminFetch, startTokengate, registerApplication, type RunningTokengate, type TestApplication } from './support/instance.js';
import { authorizePath, createUser, FormClient, formFields } from './support/issuer.js';
import { freePort } from './support/ports.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';

/**
 * DPoP (RFC 9449) end to end: oauth4webapi as the client, against two sidecars of one
 * deployment (one Redis prefix) with a real upstream behind them. Every attack is refused with
 * its error, and the upstream never sees the request.
 */
const insecure = { [oauth.allowInsecureRequests]: true } as const;
const EMAIL = 'dee@example.com';
const PASSWORD = 'dpop horse battery staple';
const REDIRECT_URI = 'http://127.0.0.1:9999/callback';
/** The public origin both sidecars serve behind a load balancer (server.trustProxy): a proof for it is valid on either. */
const PUBLIC = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'tickets.example' };
const PUBLIC_ORIGIN = 'https://tickets.example';
type KeyPair = Awaited<ReturnType<typeof oauth.generateKeyPair>>;
const ALGS = 'algs="ES256 EdDSA Ed25519 RS256 PS256"';

let upstream: Upstream;
let first: RunningTokengate;
let second: RunningTokengate;
let as: oauth.AuthorizationServer;
let confidential: TestApplication;
let fanApp: TestApplication;

function routes(upstreamUrl: string) {
  return [
    { path: '/api/bound', token: 'any', dpop: 'required', upstream: upstreamUrl },
    { path: '/api/either', token: 'any', upstream: upstreamUrl },
  ];
}

beforeAll(async () => {
  upstream = await startUpstream();
  const port = await freePort();
  const config = { server: { trustProxy: ['loopback'] }, issuer: { issuerUrl: `http://127.0.0.1:${port}` }, routes: routes(upstream.url) };
  first = await startTokengate('dpop', { port, config });
  second = await startTokengate('dpop-second', { sharing: first, config });
  const issuer = new URL(first.baseUrl);
  as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
  confidential = await registerApplication(first.store);
  fanApp = await registerApplication(first.store, { confidential: false, redirectUri: REDIRECT_URI });
  await createUser(first.store, randomUUID(), EMAIL, PASSWORD);
});

afterAll(async () => {
  await second?.close();
  await first?.close();
  await upstream?.close();
});

/** A token endpoint call through oauth4webapi, retried once with the server nonce it is told to use (RFC 9449 section 8). */
async function withNonce<T>(call: () => Promise<T>): Promise<{ result: T; neededNonce: boolean }> {
  try {
    return { result: await call(), neededNonce: false };
  } catch (error) {
    if (!oauth.isDPoPNonceError(error)) throw error;
    return { result: await call(), neededNonce: true };
  }
}

async function keyPair(alg = 'ES256'): Promise<KeyPair> {
  return oauth.generateKeyPair(alg, { extractable: true });
}

async function clientCredentialsToken(keys: KeyPair): Promise<string> {
  const client: oauth.Client = { client_id: confidential.clientId };
  const dpop = oauth.DPoP(client, keys);
  const { result } = await withNonce(async () =>
    oauth.processClientCredentialsResponse(
      as,
      client,
      await oauth.clientCredentialsGrantRequest(as, client, oauth.ClientSecretBasic(confidential.clientSecret!), new URLSearchParams(), {
        DPoP: dpop,
        ...insecure,
      }),
    ),
  );
  return result.access_token;
}

interface ProofOptions {
  htm?: string;
  htu?: string;
  token?: string;
  iat?: number;
  alg?: 'ES256' | 'EdDSA' | 'RS256' | 'PS256';
  jti?: string;
}

/** A proof made by hand with jose (the attacks need proofs no client library would make). */
async function proof(keys: KeyPair, options: ProofOptions): Promise<string> {
  const jwk = await exportJWK(keys.publicKey as CryptoKey);
  return new SignJWT({
    htm: options.htm ?? 'GET',
    htu: options.htu ?? `${PUBLIC_ORIGIN}/api/bound/tickets`,
    jti: options.jti ?? randomUUID(),
    ...(options.token === undefined ? {} : { ath: tokenDigest(options.token) }),
  })
    .setProtectedHeader({ alg: options.alg ?? 'ES256', typ: 'dpop+jwt', jwk })
    .setIssuedAt(options.iat ?? Math.floor(Date.now() / 1000))
    .sign(keys.privateKey as CryptoKey);
}

/** A request to a sidecar as the load balancer forwards it for https://tickets.example. */
function call(sidecar: RunningTokengate, path: string, headers: Record<string, string>, method = 'GET'): Promise<Response> {
  return fetch(`${sidecar.baseUrl}${path}`, { method, headers: { ...PUBLIC, ...headers } });
}

/** Runs `attack`, and checks that it was refused with `status` and `error` and that nothing reached the upstream. */
async function refused(attack: () => Promise<Response>, status: number, error: string): Promise<Response> {
  const before = upstream.received.length;
  const response = await attack();
  const body = (await response.json()) as { error: string };
  expect({ status: response.status, error: body.error }).toEqual({ status, error });
  expect(upstream.received.length).toBe(before);
  return response;
}

describe('the issuer', () => {
  it('advertises the proof algorithms in its metadata', () => {
    expect(as.dpop_signing_alg_values_supported).toEqual(['ES256', 'EdDSA', 'Ed25519', 'RS256', 'PS256']);
  });

  it('binds client_credentials tokens to the proof key after a server nonce, and introspection shows cnf.jkt', async () => {
    const client: oauth.Client = { client_id: confidential.clientId };
    const auth = oauth.ClientSecretBasic(confidential.clientSecret!);
    const keys = await keyPair();
    const dpop = oauth.DPoP(client, keys);
    const { result, neededNonce } = await withNonce(async () =>
      oauth.processClientCredentialsResponse(
        as,
        client,
        await oauth.clientCredentialsGrantRequest(as, client, auth, new URLSearchParams(), { DPoP: dpop, ...insecure }),
      ),
    );
    expect(neededNonce).toBe(true);
    expect(result.token_type).toBe('dpop');
    const introspected = await oauth.processIntrospectionResponse(
      as,
      client,
      await oauth.introspectionRequest(as, client, auth, result.access_token, insecure),
    );
    expect(introspected).toMatchObject({ active: true, token_type: 'DPoP', cnf: { jkt: await dpop.calculateThumbprint() } });

    // A resource call as the library makes it: straight to the sidecar, its own URL in htu.
    const before = upstream.received.length;
    const response = await oauth.protectedResourceRequest(
      result.access_token,
      'GET',
      new URL(`${first.baseUrl}/api/bound/tickets?page=2`),
      undefined,
      undefined,
      {
        DPoP: dpop,
        ...insecure,
      },
    );
    expect(response.status).toBe(200);
    const received = upstream.received.slice(before);
    expect(received).toHaveLength(1);
    expect(received[0]!.url).toBe('/api/bound/tickets?page=2');
    expect(received[0]!.headers['x-auth-client-id']).toBe(confidential.clientId);
    // The proof and the credential go no further than the check.
    expect(received[0]!.headers.dpop).toBeUndefined();
    expect(received[0]!.headers.authorization).toBeUndefined();
  });

  it('refuses a token request whose proof lacks the nonce with use_dpop_nonce and a DPoP-Nonce to retry with', async () => {
    const response = await fetch(as.token_endpoint!, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${confidential.clientId}:${confidential.clientSecret}`).toString('base64')}`,
        dpop: await proof(await keyPair(), { htm: 'POST', htu: as.token_endpoint! }),
      },
      body: 'grant_type=client_credentials',
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: 'use_dpop_nonce' });
    expect(response.headers.get('dpop-nonce')).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  it('authorization code with PKCE and dpop_jkt, then refresh: every token bound to the key; refreshing needs a proof by it', async () => {
    const client: oauth.Client = { client_id: fanApp.clientId };
    const keys = await keyPair('EdDSA');
    const dpop = oauth.DPoP(client, keys);
    const verifier = oauth.generateRandomCodeVerifier();
    const callback = oauth.validateAuthResponse(as, client, await authorizeWithDpopJkt(verifier, await dpop.calculateThumbprint()), oauth.expectNoState);
    const { result: exchanged } = await withNonce(async () =>
      oauth.processAuthorizationCodeResponse(
        as,
        client,
        await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, REDIRECT_URI, verifier, { DPoP: dpop, ...insecure }),
      ),
    );
    expect(exchanged.token_type).toBe('dpop');
    const call = (token: string) =>
      oauth.protectedResourceRequest(token, 'GET', new URL(`${first.baseUrl}/api/bound/me`), undefined, undefined, { DPoP: dpop, ...insecure });
    expect((await call(exchanged.access_token)).status).toBe(200);

    // The refresh token of a public client is bound too: without a proof, or with another key's, it is refused and not spent.
    const refreshForm = { grant_type: 'refresh_token', refresh_token: exchanged.refresh_token!, client_id: fanApp.clientId };
    const withoutProof = await fetch(as.token_endpoint!, { method: 'POST', body: new URLSearchParams(refreshForm) });
    expect(withoutProof.status).toBe(400);
    expect(await withoutProof.json()).toMatchObject({ error: 'invalid_dpop_proof' });
    const thief = oauth.DPoP(client, await keyPair());
    const { result: stolen } = await withNonce(async () => {
      const response = await oauth.refreshTokenGrantRequest(as, client, oauth.None(), exchanged.refresh_token!, { DPoP: thief, ...insecure });
      if (response.status === 400) {
        const body = (await response.clone().json()) as { error: string };
        if (body.error === 'invalid_dpop_proof') return body;
      }
      return oauth.processRefreshTokenResponse(as, client, response);
    });
    expect(stolen).toMatchObject({ error: 'invalid_dpop_proof' });

    const { result: refreshed } = await withNonce(async () =>
      oauth.processRefreshTokenResponse(
        as,
        client,
        await oauth.refreshTokenGrantRequest(as, client, oauth.None(), exchanged.refresh_token!, { DPoP: dpop, ...insecure }),
      ),
    );
    expect(refreshed.token_type).toBe('dpop');
    expect((await call(refreshed.access_token)).status).toBe(200);
  });

  it('refuses token requests whose proof is for another URL, replayed, or signed with HMAC', async () => {
    const keys = await keyPair();
    // A nonce from a first request, as a client learns it.
    const nonce = (await tokenRequest(await proof(keys, { htm: 'POST', htu: as.token_endpoint! }))).headers.get('dpop-nonce')!;
    const signed = async (options: ProofOptions) => {
      const jwk = await exportJWK(keys.publicKey as CryptoKey);
      return new SignJWT({ htm: 'POST', htu: as.token_endpoint!, jti: randomUUID(), nonce, ...options })
        .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk })
        .setIssuedAt()
        .sign(keys.privateKey as CryptoKey);
    };
    const expectRefused = async (response: Response) => {
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ error: 'invalid_dpop_proof' });
    };
    await expectRefused(await tokenRequest(await signed({ htu: `${first.baseUrl}/oauth/revoke` })));
    await expectRefused(await tokenRequest(await signed({ htm: 'GET' })));
    const once = await signed({});
    const accepted = await tokenRequest(once);
    expect(accepted.status).toBe(200);
    expect(await accepted.json()).toMatchObject({ token_type: 'DPoP' });
    await expectRefused(await tokenRequest(once));
    const secret = randomBytes(32);
    const octJwk: JWK = { kty: 'oct', k: secret.toString('base64url') };
    const hmac = await new SignJWT({ htm: 'POST', htu: as.token_endpoint!, jti: randomUUID(), nonce })
      .setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt', jwk: octJwk })
      .setIssuedAt()
      .sign(secret);
    await expectRefused(await tokenRequest(hmac));
  });

  it('refuses a DPoP-bound token sent as Bearer to /oauth/token/info', async () => {
    const token = await clientCredentialsToken(await keyPair());
    const response = await fetch(`${first.baseUrl}/oauth/token/info`, { headers: { authorization: `Bearer ${token}` } });
    expect(response.status).toBe(401);
    expect(await response.json()).toMatchObject({ error: 'invalid_token' });
  });

  it('refuses to redeem a code asked for with dpop_jkt with a proof by another key', async () => {
    const client: oauth.Client = { client_id: fanApp.clientId };
    const verifier = oauth.generateRandomCodeVerifier();
    const callback = oauth.validateAuthResponse(
      as,
      client,
      await authorizeWithDpopJkt(verifier, await oauth.DPoP(client, await keyPair()).calculateThumbprint()),
      oauth.expectNoState,
    );
    const other = oauth.DPoP(client, await keyPair());
    const error = await withNonce(async () =>
      oauth.processAuthorizationCodeResponse(
        as,
        client,
        await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), callback, REDIRECT_URI, verifier, { DPoP: other, ...insecure }),
      ),
    ).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(oauth.ResponseBodyError);
    expect((error as oauth.ResponseBodyError).error).toBe('invalid_grant');
  });

  it('issues only DPoP-bound tokens to an application set to dpop: required (admin API)', async () => {
    const application = await registerApplication(first.store);
    const patched = await adminFetch(first, `/applications/${application.clientId}`, {
      method: 'PATCH',
      body: JSON.stringify({ dpop: 'required' }),
    });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({ client_id: application.clientId, dpop: 'required' });
    const bearer = await fetch(as.token_endpoint!, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`${application.clientId}:${application.clientSecret}`).toString('base64')}` },
      body: new URLSearchParams({ grant_type: 'client_credentials' }),
    });
    expect(bearer.status).toBe(400);
    expect(await bearer.json()).toMatchObject({ error: 'invalid_dpop_proof' });
    const invalid = await adminFetch(first, `/applications/${application.clientId}`, {
      method: 'PATCH',
      body: JSON.stringify({ dpop: 'sometimes' }),
    });
    expect(invalid.status).toBe(400);
  });
});

/** A client_credentials request of the confidential application with `dpop` as its proof. */
function tokenRequest(dpop: string): Promise<Response> {
  return fetch(as.token_endpoint!, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      authorization: `Basic ${Buffer.from(`${confidential.clientId}:${confidential.clientSecret}`).toString('base64')}`,
      dpop,
    },
    body: 'grant_type=client_credentials',
  });
}

/**
 * The authorization endpoint with PKCE and dpop_jkt, signed in and approved as a user would; the
 * callback it redirects to, as the page wrote it (the code, and the issuer's RFC 9207 iss).
 */
async function authorizeWithDpopJkt(verifier: string, jkt: string): Promise<URL> {
  const browser = new FormClient(first.baseUrl, { 'x-forwarded-for': `10.${randomBytes(3).join('.')}` });
  const parameters = {
    client_id: fanApp.clientId,
    redirect_uri: REDIRECT_URI,
    response_type: 'code',
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
    dpop_jkt: jkt,
  };
  const login = await browser.get(authorizePath(parameters));
  const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: PASSWORD });
  const consent = await browser.follow(signedIn);
  const approved = await browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
  return new URL(approved.location!);
}

describe('the gateway refuses, and forwards nothing', () => {
  let keys: KeyPair;
  let token: string;
  let unbound: string;

  beforeAll(async () => {
    keys = await keyPair();
    token = await clientCredentialsToken(keys);
    unbound = await first.issue();
  });

  const dpopHeaders = async (options: ProofOptions = {}, signer?: KeyPair) => ({
    authorization: `DPoP ${token}`,
    dpop: await proof(signer ?? keys, { token, ...options }),
  });

  it('accepts the token with its proof on either sidecar, through trusted forwarding headers', async () => {
    for (const sidecar of [first, second]) {
      const response = await call(sidecar, '/api/bound/tickets', await dpopHeaders());
      expect(response.status).toBe(200);
    }
  });

  it('the token without its proof', async () => {
    const response = await refused(() => call(first, '/api/bound/tickets', { authorization: `DPoP ${token}` }), 401, 'invalid_dpop_proof');
    expect(response.headers.get('www-authenticate')).toMatch(
      /^DPoP realm="tokengate", error="invalid_dpop_proof", error_description="[^"]+", algs="ES256 EdDSA Ed25519 RS256 PS256"$/,
    );
  });

  it('the token as Bearer, where Bearer tokens are accepted: invalid_token, both challenges', async () => {
    const response = await refused(() => call(first, '/api/either/tickets', { authorization: `Bearer ${token}` }), 401, 'invalid_token');
    const challenge = response.headers.get('www-authenticate')!;
    expect(challenge).toContain('DPoP realm="tokengate", error="invalid_token"');
    expect(challenge).toContain(ALGS);
    expect(challenge).toMatch(/, Bearer realm="tokengate"$/);
  });

  it('a Bearer token on a route that requires DPoP', async () => {
    const response = await refused(() => call(first, '/api/bound/tickets', { authorization: `Bearer ${unbound}` }), 401, 'invalid_token');
    expect(response.headers.get('www-authenticate')).toContain(ALGS);
    // The same token where Bearer is accepted passes: the route decides.
    expect((await call(first, '/api/either/tickets', { authorization: `Bearer ${unbound}` })).status).toBe(200);
  });

  it('no token at all on a route that accepts both: the Bearer challenge, and the DPoP one beside it (RFC 9449 section 7.1)', async () => {
    const response = await refused(() => call(first, '/api/either/tickets', {}), 401, 'invalid_token');
    // Bearer first, as before: a client that reads the first challenge sees what it always saw.
    expect(response.headers.get('www-authenticate')).toBe(`Bearer realm="tokengate", DPoP realm="tokengate", ${ALGS}`);
  });

  it('no token at all on a route that requires DPoP: the DPoP challenge alone', async () => {
    const response = await refused(() => call(first, '/api/bound/tickets', {}), 401, 'invalid_token');
    expect(response.headers.get('www-authenticate')).toBe(`DPoP realm="tokengate", ${ALGS}`);
  });

  it('an unbound token sent as DPoP', async () => {
    await refused(
      async () =>
        call(first, '/api/either/tickets', {
          authorization: `DPoP ${unbound}`,
          dpop: await proof(keys, { token: unbound, htu: `${PUBLIC_ORIGIN}/api/either/tickets` }),
        }),
      401,
      'invalid_token',
    );
  });

  it('the proof of another key', async () => {
    await refused(async () => call(first, '/api/bound/tickets', await dpopHeaders({}, await keyPair())), 401, 'invalid_dpop_proof');
  });

  it('a proof replayed on another sidecar, and on the same one', async () => {
    const headers = await dpopHeaders();
    expect((await call(first, '/api/bound/tickets', headers)).status).toBe(200);
    await refused(() => call(second, '/api/bound/tickets', headers), 401, 'invalid_dpop_proof');
    await refused(() => call(first, '/api/bound/tickets', headers), 401, 'invalid_dpop_proof');
  });

  it('a proof for another method or another URL', async () => {
    await refused(async () => call(first, '/api/bound/tickets', await dpopHeaders({ htm: 'GET' }), 'DELETE'), 401, 'invalid_dpop_proof');
    await refused(async () => call(first, '/api/bound/tickets', await dpopHeaders({ htu: `${PUBLIC_ORIGIN}/api/bound/other` })), 401, 'invalid_dpop_proof');
    await refused(
      async () => call(first, '/api/bound/tickets', await dpopHeaders({ htu: `https://elsewhere.example/api/bound/tickets` })),
      401,
      'invalid_dpop_proof',
    );
    // The same URL spelt differently (RFC 3986 normalization), with a query that htu leaves out, is the same URL.
    const spelt = await dpopHeaders({ htu: 'HTTPS://Tickets.Example:443/api/./bound/%74ickets' });
    expect((await call(first, '/api/bound/tickets?page=3', spelt)).status).toBe(200);
  });

  it('a proof made too long ago, or in the future', async () => {
    const now = Math.floor(Date.now() / 1000);
    await refused(async () => call(first, '/api/bound/tickets', await dpopHeaders({ iat: now - 600 })), 401, 'invalid_dpop_proof');
    await refused(async () => call(first, '/api/bound/tickets', await dpopHeaders({ iat: now + 600 })), 401, 'invalid_dpop_proof');
  });

  it('a proof whose iat is not a number is invalid, not stale (found by the proof property)', async () => {
    const jwk = await exportJWK(keys.publicKey as CryptoKey);
    const claims = { htm: 'GET', htu: `${PUBLIC_ORIGIN}/api/bound/tickets`, jti: randomUUID(), ath: tokenDigest(token) };
    for (const iat of [String(Math.floor(Date.now() / 1000)), null]) {
      const signed = await new SignJWT({ ...claims, jti: randomUUID(), iat } as Record<string, unknown>)
        .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk })
        .sign(keys.privateKey as CryptoKey);
      const response = await refused(() => call(first, '/api/bound/tickets', { authorization: `DPoP ${token}`, dpop: signed }), 401, 'invalid_dpop_proof');
      expect(response.headers.get('www-authenticate')).toContain('error_description="The DPoP proof is not a dpop+jwt with jti, htm and htu');
    }
  });

  it('alg none, and HMAC algorithms', async () => {
    const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const claims = { htm: 'GET', htu: `${PUBLIC_ORIGIN}/api/bound/tickets`, jti: randomUUID(), iat: Math.floor(Date.now() / 1000), ath: tokenDigest(token) };
    const jwk = await exportJWK(keys.publicKey as CryptoKey);
    const none = `${encode({ alg: 'none', typ: 'dpop+jwt', jwk })}.${encode(claims)}.`;
    await refused(() => call(first, '/api/bound/tickets', { authorization: `DPoP ${token}`, dpop: none }), 401, 'invalid_dpop_proof');
    const secret = randomBytes(32);
    const octJwk: JWK = { kty: 'oct', k: secret.toString('base64url') };
    const hmac = await new SignJWT({ ...claims, jti: randomUUID() }).setProtectedHeader({ alg: 'HS256', typ: 'dpop+jwt', jwk: octJwk }).sign(secret);
    await refused(() => call(first, '/api/bound/tickets', { authorization: `DPoP ${token}`, dpop: hmac }), 401, 'invalid_dpop_proof');
  });

  it("a proof whose ath is another token's", async () => {
    const other = await clientCredentialsToken(keys);
    await refused(
      async () => call(first, '/api/bound/tickets', { authorization: `DPoP ${token}`, dpop: await proof(keys, { token: other }) }),
      401,
      'invalid_dpop_proof',
    );
  });

  it('two DPoP headers', async () => {
    const one = await proof(keys, { token });
    const two = await proof(keys, { token });
    const before = upstream.received.length;
    const response = await fetch(`${first.baseUrl}/api/bound/tickets`, {
      headers: [...Object.entries(PUBLIC), ['authorization', `DPoP ${token}`], ['dpop', one], ['dpop', two]],
    });
    expect(response.status).toBe(401);
    expect(((await response.json()) as { error: string }).error).toBe('invalid_dpop_proof');
    expect(upstream.received.length).toBe(before);
  });
});

const INGRESSES = [
  { name: 'nginx', example: 'nginx.conf', version: ['nginx', '-v'], config: nginxConf, command: nginxCommand },
  {
    name: 'nginx with the decision cache',
    example: 'nginx-decision-cache.conf',
    version: ['nginx', '-v'],
    config: nginxDecisionCacheConf,
    command: nginxCommand,
  },
  { name: 'Caddy', example: 'Caddyfile', version: ['caddy', 'version'], config: caddyfile, command: caddyCommand },
] as const;

describe.each(INGRESSES)('the decision listener behind $name (examples/ingress/$example)', (kind) => {
  let decider: RunningTokengate;
  let ingress: Ingress;
  let userApi: Awaited<ReturnType<typeof startTicketingApi>>;
  let organizerApi: Awaited<ReturnType<typeof startTicketingApi>>;

  beforeAll(async () => {
    if (!installed(kind.version[0], kind.version[1]))
      throw new Error(`${kind.version[0]} is not installed: apt-get install -y ${kind.version[0]} (.ci/run installs it)`);
    [userApi, organizerApi] = await Promise.all([startTicketingApi('user'), startTicketingApi('organizer')]);
    decider = await startTokengate('dpop-decisions', {
      sharing: first,
      config: {
        // /api/public/me's Bearer decisions may be cached; its DPoP requests must be checked each time.
        decisions: { enabled: true, cacheSeconds: 60 },
        routes: [
          { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', scopes: ['public'] },
          { path: '/api/public/events', token: 'application', scopes: ['public'], dpop: 'required' },
        ],
      },
    });
    const decisions = new URL(decider.decisionsUrl!).host;
    ingress = await startIngress(
      kind.version[0],
      (address) => kind.config({ ingress: address, decisions, userApi: userApi.address, organizerApi: organizerApi.address }),
      kind.command,
    );
  });

  afterAll(async () => {
    await ingress?.close();
    await decider?.close();
    await Promise.all([userApi?.close(), organizerApi?.close()]);
  });

  it('lets a DPoP request through as oauth4webapi makes it, without its proof or credential, and refuses its replay', async () => {
    const keys = await keyPair();
    const token = await clientCredentialsToken(keys);
    const client: oauth.Client = { client_id: confidential.clientId };
    const dpop = oauth.DPoP(client, keys);
    const url = new URL(`http://127.0.0.1:${ingress.port}/api/public/events`);
    const response = await oauth.protectedResourceRequest(token, 'GET', url, undefined, undefined, { DPoP: dpop, ...insecure });
    expect(response.status).toBe(200);
    const reached = organizerApi.received.at(-1)!;
    expect(reached.headers['x-auth-client-id']).toBe(confidential.clientId);
    expect(reached.headers.dpop).toBeUndefined();
    expect(reached.headers.authorization).toBeUndefined();

    // A proof made for the URL as the ingress's client names it (exchange sends Host: ingress.test), then the same one again.
    const headers: Array<[string, string]> = [
      ['Authorization', `DPoP ${token}`],
      ['DPoP', await proof(keys, { token, htu: 'http://ingress.test/api/public/events' })],
    ];
    const before = organizerApi.received.length;
    expect((await exchange(ingress.port, 'GET', '/api/public/events', headers)).status).toBe(200);
    const replayed = await exchange(ingress.port, 'GET', '/api/public/events', headers);
    expect(replayed.status).toBe(401);
    expect(replayed.json()).toMatchObject({ error: 'invalid_dpop_proof' });
    expect(replayed.header('www-authenticate')).toContain('DPoP realm="tokengate", error="invalid_dpop_proof"');
    expect(organizerApi.received.length).toBe(before + 1);
  });

  it('checks every DPoP request of a route whose Bearer decisions an ingress may cache: a replayed proof is refused', async () => {
    const keys = await keyPair();
    const client: oauth.Client = { client_id: 'cached-route' };
    const token = await first.issue({ jkt: await oauth.DPoP(client, keys).calculateThumbprint() });
    const asked = () => decider.tokengate.context.metrics.decisions.get().then((metric) => metric.values.reduce((sum, value) => sum + value.value, 0));
    const before = await asked();
    const headers: Array<[string, string]> = [
      ['Authorization', `DPoP ${token}`],
      ['DPoP', await proof(keys, { token, htu: 'http://ingress.test/api/public/me' })],
    ];
    const fresh = await exchange(ingress.port, 'GET', '/api/public/me', [
      ['Authorization', `DPoP ${token}`],
      ['DPoP', await proof(keys, { token, htu: 'http://ingress.test/api/public/me' })],
    ]);
    expect([fresh.status, (await exchange(ingress.port, 'GET', '/api/public/me', headers)).status]).toEqual([200, 200]);
    const replayed = await exchange(ingress.port, 'GET', '/api/public/me', headers);
    expect([replayed.status, replayed.json()]).toMatchObject([401, { error: 'invalid_dpop_proof' }]);
    expect((await asked()) - before).toBe(3);
  });

  it('refuses a proof for another URL, a Bearer token on a DPoP route and a bound token as Bearer, none reaching an API', async () => {
    const keys = await keyPair();
    const token = await clientCredentialsToken(keys);
    const unbound = await first.issue({ kind: 'application', userId: null, familyId: null, clientId: confidential.clientId });
    const before = organizerApi.received.length + userApi.received.length;
    const otherUrl = await exchange(ingress.port, 'GET', '/api/public/events', [
      ['Authorization', `DPoP ${token}`],
      ['DPoP', await proof(keys, { token, htu: 'http://ingress.test/api/public/me' })],
    ]);
    expect([otherUrl.status, otherUrl.json()]).toMatchObject([401, { error: 'invalid_dpop_proof' }]);
    const bearerOnDpopRoute = await exchange(ingress.port, 'GET', '/api/public/events', [['Authorization', `Bearer ${unbound}`]]);
    expect([bearerOnDpopRoute.status, bearerOnDpopRoute.json()]).toMatchObject([401, { error: 'invalid_token' }]);
    expect(bearerOnDpopRoute.header('www-authenticate')).toContain(ALGS);
    const boundAsBearer = await exchange(ingress.port, 'GET', '/api/public/events', [['Authorization', `Bearer ${token}`]]);
    expect([boundAsBearer.status, boundAsBearer.json()]).toMatchObject([401, { error: 'invalid_token' }]);
    expect(organizerApi.received.length + userApi.received.length).toBe(before);
  });
});

describe('a single instance on the memory store', () => {
  it('refuses a replayed proof from the store itself (no process memory of proofs in front)', async () => {
    const alone = await startTokengate('dpop-memory', { store: new MemoryStore(), config: { dpop: { replayCacheEntries: 0 }, routes: routes(upstream.url) } });
    try {
      const keys = await keyPair();
      const client: oauth.Client = { client_id: 'memory' };
      const jkt = await oauth.DPoP(client, keys).calculateThumbprint();
      const token = await alone.issue({ jkt });
      const htu = `${alone.baseUrl}/api/bound/tickets`;
      const headers = { authorization: `DPoP ${token}`, dpop: await proof(keys, { token, htu }) };
      expect((await fetch(htu, { headers })).status).toBe(200);
      const before = upstream.received.length;
      const replayed = await fetch(htu, { headers });
      expect([replayed.status, ((await replayed.json()) as { error: string }).error]).toEqual([401, 'invalid_dpop_proof']);
      expect(upstream.received.length).toBe(before);
    } finally {
      await alone.close();
    }
  });
});

describe.each([
  { backend: 'memory', open: () => new MemoryStore() },
  { backend: 'redis', open: () => createTestRedisStore(uniquePrefix('dpop-marks')) },
])('replay marks on the $backend backend', ({ open }) => {
  it('a proof is new once, a replay within its window is refused, and the mark ends with the window', async () => {
    const store = open();
    try {
      const marks = proofMarksFor(store.backend);
      const jti = randomUUID();
      expect(await marks.markFirstUse(jti, 300)).toBe(true);
      expect(await marks.markFirstUse(jti, 300)).toBe(false);
      expect(await marks.markFirstUse(randomUUID(), 300)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(await marks.markFirstUse(jti, 300)).toBe(true);
    } finally {
      await store.close();
    }
  });
});
