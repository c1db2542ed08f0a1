import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { decodeJwt, decodeProtectedHeader, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdentityVerifier, createTicketingApi, SIGNED_IDENTITY_HEADER } from '../examples/ticketing-api/server.mjs';
import { type CachedTokens } from '../src/store/cached.js';
import { memoryKeySetStore, redisKeySetStore } from '../src/identity/key-set-store.js';
import { JWKS_PATH } from '../src/identity/jwks-endpoint.js';
import { tokenDigest } from '../src/token/token-value.js';
import { APPLICATION_TOKEN, closeServer } from './support/gateway.js';
import { adminFetch, startTokengate, TEST_ADMIN_TOKEN, type RunningTokengate } from './support/instance.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './support/redis.js';
import { runCli, tempConfigs } from './support/cli.js';
import { eventually } from './support/wait.js';

/**
 * The signed identity end to end: the example ticketing API trusts nothing but an assertion it
 * verifies with jose's createRemoteJWKSet against the JWKS of one of four sidecars sharing one
 * Redis, while requests go through all four and the keys rotate.
 */

const AUDIENCE = 'https://api.ticketing.example';
const ISSUER = 'http://127.0.0.1:8080';

interface ApiAnswer {
  user_id?: string;
  events?: unknown[];
  error?: string;
  received: { headers: Record<string, string> };
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function call(
  instance: RunningTokengate,
  path: string,
  token: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: ApiAnswer }> {
  const response = await fetch(`${instance.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}`, ...headers } });
  return { status: response.status, body: (await response.json()) as ApiAnswer };
}

const signedIdentity = {
  enabled: true,
  // A short timeline, so that two rotations fit in a test: published 1 + 1 + 5 s before signing.
  jwksMaxAgeSeconds: 1,
  keyRefreshSeconds: 1,
  lifetimeSeconds: 20,
  rotationIntervalSeconds: 0,
};

function routesTo(upstream: string) {
  return [
    { path: '/api/public/me', methods: ['GET'], token: 'user', scopes: ['public'], upstream, signedIdentity: 'instead', signedIdentityAudience: AUDIENCE },
    {
      path: '/api/public/events',
      methods: ['GET'],
      token: 'application',
      scopes: ['public'],
      upstream,
      signedIdentity: 'beside',
      signedIdentityAudience: AUDIENCE,
    },
  ];
}

const kidOf = (assertion: string) => decodeProtectedHeader(assertion).kid!;

describe('a resource service verifying the signed identity behind four sidecars on one Redis', () => {
  let api: Server;
  let sidecars: RunningTokengate[];
  let verify: Awaited<ReturnType<typeof createIdentityVerifier>>;

  beforeAll(async () => {
    // The service starts first (its sidecars' JWKS URL is known once the first listens), then verifies against sidecar 0's JWKS.
    let verifier: typeof verify | null = null;
    api = createTicketingApi({ api: 'all', verifyIdentity: (headers) => verifier!(headers) });
    const apiUrl = await listen(api);
    const config = { routes: routesTo(apiUrl), signedIdentity, decisions: { enabled: true } };
    const first = await startTokengate('signed-identity', { config });
    sidecars = [first];
    for (let index = 1; index < 4; index += 1) sidecars.push(await startTokengate(`signed-identity-${index}`, { config, sharing: first }));
    await Promise.all(sidecars.map((sidecar) => (sidecar.tokengate.context.store.tokens as CachedTokens).subscribed));
    verify = await createIdentityVerifier({ jwksUrl: `${first.baseUrl}${JWKS_PATH}`, issuer: ISSUER, audience: AUDIENCE, cacheSeconds: 1 });
    verifier = verify;
  });
  afterAll(async () => {
    for (const sidecar of (sidecars ?? []).slice(1).reverse()) await sidecar.close();
    await sidecars?.[0]?.close();
    if (api) await closeServer(api);
  });

  it('every sidecar publishes the same keys, with caching headers no longer than the rotation allows', async () => {
    const answers = await Promise.all(sidecars.map((sidecar) => fetch(`${sidecar.baseUrl}${JWKS_PATH}`)));
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.headers.get('cache-control')).toBe('public, max-age=1');
      expect(answer.headers.get('content-type')).toMatch(/^application\/jwk-set\+json\b/);
    }
    const bodies = (await Promise.all(answers.map((answer) => answer.json()))) as Array<{ keys: Array<Record<string, string>> }>;
    expect(new Set(bodies.map((body) => JSON.stringify(body))).size).toBe(1);
    const [key] = bodies[0]!.keys;
    expect(key).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
    // The public half only.
    expect(key).not.toHaveProperty('d');
  });

  it('passes the verified identity, with every claim, and the same assertion to repeated requests of one token (signed once)', async () => {
    const token = await sidecars[0]!.issue({ userId: 'user-ana' });
    const first = await call(sidecars[1]!, '/api/public/me', token);
    expect(first.status).toBe(200);
    expect(first.body.user_id).toBe('user-ana');
    const assertion = first.body.received.headers[SIGNED_IDENTITY_HEADER]!;
    // `instead`: no identity headers beside it.
    expect(first.body.received.headers['x-auth-user-id']).toBeUndefined();
    expect(decodeJwt(assertion)).toMatchObject({ iss: ISSUER, aud: AUDIENCE, sub: 'user-ana', client_id: 'client-web', token_kind: 'user', scope: 'public' });
    expect(decodeProtectedHeader(assertion)).toMatchObject({ alg: 'ES256', typ: 'tokengate-identity+jwt' });
    const claims = decodeJwt(assertion);
    expect(claims.exp! - claims.iat!).toBe(20);
    const again = await call(sidecars[1]!, '/api/public/me', token);
    expect(again.body.received.headers[SIGNED_IDENTITY_HEADER]).toBe(assertion);

    // The decision listener's answer carries it too.
    const decided = await fetch(`${sidecars[0]!.decisionsUrl}/auth-request`, {
      headers: { authorization: `Bearer ${await sidecars[0]!.issue(APPLICATION_TOKEN)}`, 'x-original-method': 'GET', 'x-original-uri': '/api/public/events' },
    });
    expect(decided.status).toBe(200);
    const decidedAssertion = decided.headers.get(SIGNED_IDENTITY_HEADER)!;
    expect(decodeJwt(decidedAssertion)).toMatchObject({ sub: 'client-organizer', client_id: 'client-organizer', token_kind: 'application', aud: AUDIENCE });
    // `beside`: the identity headers too.
    expect(decided.headers.get('x-auth-client-id')).toBe('client-organizer');
    expect(await verify({ [SIGNED_IDENTITY_HEADER]: decidedAssertion })).toMatchObject({ clientId: 'client-organizer', tokenKind: 'application' });
  });

  it('holds an assertion with the cached entry of its token, whatever object a hit hands out, and lets it go with the entry', async () => {
    const { context } = sidecars[3]!.tokengate;
    const token = await sidecars[3]!.issue({ userId: 'user-held' });
    const first = await call(sidecars[3]!, '/api/public/me', token);
    const assertion = first.body.received.headers[SIGNED_IDENTITY_HEADER]!;
    // Another object with the same fields, as the compact cache builds for a token it keeps no object of.
    const cached = context.cache!.peek(tokenDigest(token))!;
    expect(await context.identity!.signer.assertion(context.cache, tokenDigest(token), { ...cached }, AUDIENCE)).toBe(assertion);
    // Dropped from the cache (saved again through it, which voids what it held, as a revocation
    // or an eviction does): the next request reads the store and its assertion is signed anew.
    const record = (await sidecars[3]!.store.tokens.getAccessToken(tokenDigest(token)))!;
    await context.store.tokens.saveAccessToken(tokenDigest(token), record);
    expect(context.cache!.peek(tokenDigest(token))).toBeUndefined();
    const again = (await call(sidecars[3]!, '/api/public/me', token)).body.received.headers[SIGNED_IDENTITY_HEADER]!;
    expect(again).not.toBe(assertion);
  });

  it('carries cnf.jkt for a DPoP-bound token', async () => {
    const identity = sidecars[0]!.tokengate.context.identity!;
    const jkt = 'NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs';
    const assertion = await identity.signer.assertion(
      null,
      'not-cached',
      { ...APPLICATION_TOKEN, scopes: ['public'], scope: 'public', audience: [], issuedAt: Date.now(), expiresAt: Date.now() + 60_000, jkt },
      AUDIENCE,
    );
    expect(decodeJwt(assertion as string).cnf).toEqual({ jkt });
  });

  it('refuses, at the resource service, an assertion replayed to another audience, signed by another key, with alg none, or with a changed claim', async () => {
    const token = await sidecars[0]!.issue({ userId: 'user-bo' });
    const genuine = (await call(sidecars[2]!, '/api/public/me', token)).body.received.headers[SIGNED_IDENTITY_HEADER]!;
    expect(await verify({ [SIGNED_IDENTITY_HEADER]: genuine })).toMatchObject({ userId: 'user-bo' });

    const otherAudience = await createIdentityVerifier({
      jwksUrl: `${sidecars[0]!.baseUrl}${JWKS_PATH}`,
      issuer: ISSUER,
      audience: 'https://billing.ticketing.example',
      cacheSeconds: 1,
    });
    expect(await otherAudience({ [SIGNED_IDENTITY_HEADER]: genuine })).toBeNull();

    const header = decodeProtectedHeader(genuine);
    const claims = decodeJwt(genuine);
    const { privateKey } = await generateKeyPair('ES256');
    const otherKey = await new SignJWT({ ...claims, sub: 'user-mallory' })
      .setProtectedHeader({ alg: 'ES256', kid: header.kid, typ: header.typ })
      .sign(privateKey);
    const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const algNone = `${encode({ alg: 'none', kid: header.kid, typ: header.typ })}.${encode({ ...claims, sub: 'user-mallory' })}.`;
    const [head, , signature] = genuine.split('.');
    const changed = `${head}.${encode({ ...claims, sub: 'user-mallory' })}.${signature}`;
    const scopeRaised = `${head}.${encode({ ...claims, scope: 'public admin' })}.${signature}`;
    for (const forged of [otherKey, algNone, changed, scopeRaised]) expect(await verify({ [SIGNED_IDENTITY_HEADER]: forged })).toBeNull();

    // Through the gateway a client's own assertion never reaches the service: tokengate's replaces it.
    const through = await call(sidecars[3]!, '/api/public/me', token, { [SIGNED_IDENTITY_HEADER]: otherKey, x_tokengate_identity: otherKey });
    expect(through.body.user_id).toBe('user-bo');
    expect(through.body.received.headers[SIGNED_IDENTITY_HEADER]).not.toBe(otherKey);
    expect(through.body.received.headers).not.toHaveProperty('x_tokengate_identity');
  });

  it("never hands out a revoked token's assertion again: its next request is a 401 at tokengate, and the service sees nothing", async () => {
    const token = await sidecars[0]!.issue({ userId: 'user-cy' });
    const before = await call(sidecars[1]!, '/api/public/me', token);
    expect(before.status).toBe(200);
    expect(before.body.received.headers[SIGNED_IDENTITY_HEADER]).toBeTruthy();
    // Revoked through another sidecar: sidecar 1 hears of it on the revocation feed.
    await sidecars[2]!.tokengate.context.store.tokens.revokeAccessToken(tokenDigest(token));
    await eventually(async () => (await fetch(`${sidecars[1]!.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } })).status === 401);
    const after = await fetch(`${sidecars[1]!.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(after.status).toBe(401);
    expect(after.headers.get(SIGNED_IDENTITY_HEADER)).toBeNull();
    expect(JSON.stringify(await after.json())).not.toContain('eyJ');
  });

  it('under load through all four sidecars while the keys rotate twice: no verification fails, no request is refused, and new assertions carry the new key', async () => {
    const users = await Promise.all(Array.from({ length: 24 }, (_unused, index) => sidecars[0]!.issue({ userId: `user-${index}` })));
    const applications = await Promise.all(Array.from({ length: 8 }, () => sidecars[0]!.issue(APPLICATION_TOKEN)));
    const outcomes = new Map<number, number>();
    const kids: string[] = [];
    let sent = 0;
    let running = true;
    const worker = async (lane: number) => {
      while (running) {
        sent += 1;
        const useApplication = sent % 4 === 0;
        const token = useApplication ? applications[sent % applications.length]! : users[sent % users.length]!;
        const answer = await call(sidecars[(sent + lane) % 4]!, useApplication ? '/api/public/events' : '/api/public/me', token);
        outcomes.set(answer.status, (outcomes.get(answer.status) ?? 0) + 1);
        const assertion = answer.body.received?.headers[SIGNED_IDENTITY_HEADER];
        if (assertion !== undefined && kids.at(-1) !== kidOf(assertion)) kids.push(kidOf(assertion));
      }
    };
    // A few hundred requests in flight at most: 32 lanes, each one request at a time.
    const lanes = Array.from({ length: 32 }, (_unused, lane) => worker(lane));
    const firstKid = kids[0] ?? kidOf((await call(sidecars[0]!, '/api/public/me', users[0]!)).body.received.headers[SIGNED_IDENTITY_HEADER]!);

    const rotations: string[] = [];
    for (const by of [sidecars[1]!, sidecars[2]!]) {
      const rotated = await adminFetch(by, '/keys/rotate', { method: 'POST' });
      expect(rotated.status).toBe(200);
      const { kid, activates_at: activatesAt } = (await rotated.json()) as { kid: string; activates_at: string };
      rotations.push(kid);
      // Published at once on every sidecar, before any signs with it.
      await eventually(async () => {
        const published = await Promise.all(
          sidecars.map(async (sidecar) => ((await (await fetch(`${sidecar.baseUrl}${JWKS_PATH}`)).json()) as { keys: Array<{ kid: string }> }).keys),
        );
        return published.every((keys) => keys.some((key) => key.kid === kid));
      }, 5_000);
      expect(kids).not.toContain(kid);
      expect(Date.parse(activatesAt)).toBeGreaterThan(Date.now());
      // Then, once it signs, new assertions carry it (the held ones were signed under the old key id).
      await eventually(() => kids.includes(kid), 15_000);
    }
    running = false;
    await Promise.all(lanes);

    expect(sent).toBeGreaterThan(300);
    expect(Object.fromEntries(outcomes)).toEqual({ 200: expect.any(Number) as number });
    expect(new Set(kids)).toEqual(new Set([firstKid, ...rotations]));
    // Once the last key signs, every sidecar's assertions carry it, a token's held one included.
    for (const sidecar of sidecars) {
      const answer = await call(sidecar, '/api/public/me', users[0]!);
      expect(kidOf(answer.body.received.headers[SIGNED_IDENTITY_HEADER]!)).toBe(rotations[1]);
    }
  }, 60_000);
});

describe('the tokengate command', () => {
  const configs = tempConfigs();
  afterAll(() => configs.remove());

  it('keys rotate and keys list call the admin API of the running instance; check refuses a bad algorithm by its key', async () => {
    const instance = await startTokengate('identity-cli', { config: { signedIdentity: { enabled: true } } });
    try {
      const file = configs.write(`admin:\n  host: 127.0.0.1\n  port: ${new URL(instance.opsUrl).port}\n  token: ${TEST_ADMIN_TOKEN}\n`);
      const before = instance.tokengate.context.identity!.ring.describe();
      const rotated = await runCli(['keys', 'rotate', '--config', file]);
      expect(rotated.code).toBe(0);
      expect(rotated.stdout).toMatch(/^Created signing key [A-Za-z0-9_-]{43}: published now, signing from \d{4}-/);
      const listed = await runCli(['keys', 'list', '--json', '--config', file]);
      const { keys } = JSON.parse(listed.stdout) as { keys: Array<{ kid: string }> };
      expect(keys.map((key) => key.kid)).toEqual([before[0]!.kid, /key ([A-Za-z0-9_-]{43})/.exec(rotated.stdout)![1]]);
      expect(listed.stdout).not.toMatch(/privateJwe|"d"/);
    } finally {
      await instance.close();
    }
    const refused = await runCli(['check', '--config', configs.write('signedIdentity:\n  enabled: true\n  algorithm: HS256\n')]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('signedIdentity.algorithm');
  }, 30_000);
});

describe('a second rotation while the first new key still waits to sign', () => {
  it('makes a key that signs M + R + 5 s after its own creation, after the waiting one', async () => {
    const instance = await startTokengate('identity-second-rotation', { config: { signedIdentity: { enabled: true } } });
    try {
      const { ring } = instance.tokengate.context.identity!;
      const delayMs = (300 + 10 + 5) * 1000; // jwksMaxAgeSeconds + keyRefreshSeconds + 5, the defaults
      const first = await ring.rotate();
      const second = await ring.rotate();
      expect(first.activatesAt - first.createdAt).toBe(delayMs);
      // Not from the first one's activation (which made it wait twice as long).
      expect(second.activatesAt - second.createdAt).toBe(delayMs);
      expect(second.activatesAt).toBeGreaterThanOrEqual(first.activatesAt);
    } finally {
      await instance.close();
    }
  });
});

describe('the key set in the store', () => {
  it('is replaced only by a compare-and-set, in memory and in Redis alike', async () => {
    const prefix = uniquePrefix('identity-keys');
    const store = createTestRedisStore(prefix);
    try {
      const backend = store.backend;
      if (backend.driver !== 'redis') throw new Error('expected the Redis door');
      for (const keys of [memoryKeySetStore(), redisKeySetStore(backend)]) {
        expect(await keys.read()).toBeNull();
        expect(await keys.replace(null, 'one')).toBe(true);
        expect(await keys.replace(null, 'two')).toBe(false);
        expect(await keys.replace('stale', 'two')).toBe(false);
        expect(await keys.replace('one', 'two')).toBe(true);
        expect(await keys.read()).toBe('two');
      }
    } finally {
      await store.close();
      await deletePrefix(prefix);
    }
  });

  it('signs with Ed25519 keys when signedIdentity.algorithm is EdDSA, which the example service verifies', async () => {
    let verifier: Awaited<ReturnType<typeof createIdentityVerifier>> | null = null;
    const service = createTicketingApi({ api: 'all', verifyIdentity: (headers) => verifier!(headers) });
    const serviceUrl = await listen(service);
    const instance = await startTokengate('identity-eddsa', {
      config: { routes: routesTo(serviceUrl), signedIdentity: { enabled: true, algorithm: 'EdDSA' } },
    });
    try {
      verifier = await createIdentityVerifier({ jwksUrl: `${instance.baseUrl}${JWKS_PATH}`, issuer: ISSUER, audience: AUDIENCE });
      const answer = await call(instance, '/api/public/me', await instance.issue({ userId: 'user-ed' }));
      expect(answer.status).toBe(200);
      expect(answer.body.user_id).toBe('user-ed');
      expect(decodeProtectedHeader(answer.body.received.headers[SIGNED_IDENTITY_HEADER]!).alg).toBe('EdDSA');
    } finally {
      await instance.close();
      await closeServer(service);
    }
  });

  it('never holds a private key in the clear', async () => {
    const instance = await startTokengate('identity-at-rest', { config: { signedIdentity: { enabled: true } } });
    try {
      const stored = (await redisKeySetStore(instance.store.backend as Parameters<typeof redisKeySetStore>[0]).read())!;
      const { keys } = JSON.parse(stored) as { keys: Array<{ publicJwk: Record<string, string>; privateJwe: string }> };
      expect(keys).toHaveLength(1);
      expect(keys[0]!.publicJwk).not.toHaveProperty('d');
      expect(keys[0]!.privateJwe.split('.')).toHaveLength(5);
      expect(stored).not.toMatch(/"d":/);
    } finally {
      await instance.close();
    }
  });
});

describe('a decision an ingress may keep, beside its signed identity', () => {
  let instance: RunningTokengate;
  beforeAll(async () => {
    const route = (path: string, decisionCacheSeconds: number) => ({
      path,
      methods: ['GET'],
      token: 'application',
      scopes: ['public'],
      upstream: 'http://127.0.0.1:1',
      signedIdentity: 'beside',
      signedIdentityAudience: AUDIENCE,
      decisionCacheSeconds,
    });
    instance = await startTokengate('identity-kept-decisions', {
      config: {
        routes: [route('/api/public/events', 300), route('/api/public/venues', 13)],
        signedIdentity: { ...signedIdentity, lifetimeSeconds: 10 },
        decisions: { enabled: true },
      },
    });
  });
  afterAll(async () => {
    await instance?.close();
  });

  it('is kept no longer than the assertion it carries lives, with a second to spare for the hop to the service', async () => {
    const token = await instance.issue(APPLICATION_TOKEN);
    for (const path of ['/api/public/events', '/api/public/venues']) {
      const received = Date.now();
      const decided = await fetch(`${instance.decisionsUrl}/auth-request`, {
        headers: { authorization: `Bearer ${token}`, 'x-original-method': 'GET', 'x-original-uri': path },
      });
      expect(decided.status, path).toBe(200);
      const { exp } = decodeJwt(decided.headers.get(SIGNED_IDENTITY_HEADER)!);
      const keptSeconds = Number(decided.headers.get('x-tokengate-cache-seconds'));
      // Today's assertion lives 10 s: an ingress keeping the decision 300 (or 13) s would send it expired.
      expect(keptSeconds, path).toBeGreaterThan(0);
      expect(received + keptSeconds * 1000, path).toBeLessThanOrEqual(exp! * 1000 - 1000);
    }
  });
});
