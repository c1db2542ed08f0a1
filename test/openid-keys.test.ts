import { createLocalJWKSet, createRemoteJWKSet, decodeProtectedHeader, exportJWK, generateKeyPair, jwtVerify, SignJWT, type JSONWebKeySet } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JWKS_PATH } from '../src/identity/jwks-endpoint.js';
import { redisKeySetStore } from '../src/identity/key-set-store.js';
import { ConfigError, parseConfig } from '../src/load-config.js';
import { configHash } from '../src/config/reload.js';
import { openIdKeySetName, type OpenIdConnect } from '../src/openid/index.js';
import { OPENID_JWKS_PATH } from '../src/openid/jwks-endpoint.js';
import type { RedisDoor } from '../src/store/backend.js';
import { APPLICATION_TOKEN } from './support/gateway.js';
import { adminFetch, startTokengate, type RunningTokengate } from './support/instance.js';

/**
 * OpenID Connect's keys: the ID token keys of each algorithm in the store under keys of their
 * own, published at /.well-known/jwks.json, signing what the issuer and the logout side give them,
 * and verifying id_token_hints; never the signed identity's keys, nor those theirs.
 */

const AUDIENCE = 'https://api.ticketing.example';
const openidConnect = { enabled: true, jwksMaxAgeSeconds: 55, keyRefreshSeconds: 1, rotationIntervalSeconds: 0 };

async function jwksOf(instance: RunningTokengate, path: string): Promise<{ response: Response; keys: JSONWebKeySet }> {
  const response = await fetch(`${instance.baseUrl}${path}`);
  return { response, keys: (await response.clone().json()) as JSONWebKeySet };
}

function openidOf(instance: RunningTokengate): OpenIdConnect {
  return instance.tokengate.context.openid!;
}

function idTokenClaims(instance: RunningTokengate, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const now = Math.floor(Date.now() / 1000);
  return {
    iss: openidOf(instance).issuer,
    sub: 'user-1',
    aud: 'client-1',
    iat: now,
    exp: now + 60,
    sid: openidOf(instance).sessionId('session:abc'),
    ...overrides,
  };
}

describe('OpenID Connect keys', () => {
  let instance: RunningTokengate;
  let second: RunningTokengate;

  beforeAll(async () => {
    instance = await startTokengate('openid-keys', {
      config: {
        openidConnect,
        signedIdentity: { enabled: true, jwksMaxAgeSeconds: 1, keyRefreshSeconds: 1, rotationIntervalSeconds: 0 },
        routes: [
          { path: '/api', token: 'user', scopes: ['public'], upstream: 'http://127.0.0.1:9', signedIdentity: 'instead', signedIdentityAudience: AUDIENCE },
        ],
      },
    });
    second = await startTokengate('openid-keys-2', { sharing: instance, config: { openidConnect } });
  });

  afterAll(async () => {
    await second?.close();
    await instance?.close();
  });

  it('publishes one key of each algorithm at /.well-known/jwks.json, public halves only, cacheable for jwksMaxAgeSeconds', async () => {
    const { response, keys } = await jwksOf(instance, OPENID_JWKS_PATH);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^application\/jwk-set\+json\b/);
    expect(response.headers.get('cache-control')).toBe('public, max-age=55');
    expect(keys.keys.map((key) => key.alg).sort()).toEqual(['ES256', 'RS256']);
    for (const key of keys.keys) {
      expect(key).toMatchObject({ use: 'sig', kid: expect.any(String) as string });
      expect(key).not.toHaveProperty('d');
      expect(key).not.toHaveProperty('p');
    }
    // RS256 keys of 2048 bits: a 256-byte modulus.
    expect(Buffer.from(keys.keys.find((key) => key.alg === 'RS256')!.n!, 'base64url')).toHaveLength(256);
    // A second sidecar of the deployment publishes the same keys (the first made them; it read them).
    expect((await jwksOf(second, OPENID_JWKS_PATH)).keys).toEqual(keys);
  });

  it('signs with the current key of the algorithm asked for, with the typ given, verifiable with the published keys', async () => {
    const { keys } = await jwksOf(instance, OPENID_JWKS_PATH);
    const published = createLocalJWKSet(keys);
    for (const alg of ['RS256', 'ES256'] as const) {
      const idToken = await openidOf(instance).sign(idTokenClaims(instance), alg, 'JWT');
      const { payload, protectedHeader } = await jwtVerify(idToken, published, { issuer: openidOf(instance).issuer, audience: 'client-1', typ: 'JWT' });
      expect(protectedHeader.alg).toBe(alg);
      expect(payload.sub).toBe('user-1');
      const logoutToken = await openidOf(second).sign({ ...idTokenClaims(instance), events: {} }, alg, 'logout+jwt');
      expect(decodeProtectedHeader(logoutToken)).toMatchObject({ alg, typ: 'logout+jwt' });
      await jwtVerify(logoutToken, published, { typ: 'logout+jwt' });
    }
  });

  it('keeps the ID token keys and the signed identity keys apart: neither verifier accepts the other', async () => {
    const openidKeys = (await jwksOf(instance, OPENID_JWKS_PATH)).keys;
    const identityKeys = (await jwksOf(instance, JWKS_PATH)).keys;
    const openidKids = openidKeys.keys.map((key) => key.kid);
    expect(identityKeys.keys.length).toBeGreaterThan(0);
    for (const key of identityKeys.keys) expect(openidKids).not.toContain(key.kid);

    // An identity assertion as the gateway signs it, then offered as an id_token_hint.
    const identity = instance.tokengate.context.identity!;
    const assertionKey = identity.ring.signingKey(Date.now());
    const assertion = await new SignJWT(idTokenClaims(instance))
      .setProtectedHeader({ alg: assertionKey.alg, kid: assertionKey.kid, typ: 'JWT' })
      .sign(assertionKey.privateKey);
    expect(await openidOf(instance).verifyIdTokenHint(assertion)).toBeNull();

    // An ID token offered to a resource service that trusts the identity JWKS.
    const idToken = await openidOf(instance).sign(idTokenClaims(instance), 'ES256', 'JWT');
    await expect(jwtVerify(idToken, createLocalJWKSet(identityKeys))).rejects.toThrow();

    // In the store, under keys of their own.
    const door = instance.store.backend as RedisDoor;
    const stored = await redisKeySetStore(door, openIdKeySetName('RS256')).read();
    expect(JSON.parse(stored!)).toMatchObject({ keys: [expect.objectContaining({ alg: 'RS256' })] });
    expect(stored).not.toContain('"d":');
    expect(await redisKeySetStore(door).read()).not.toContain(openidKids[0]);
  });

  it('verifies an id_token_hint it issued, expired or not, and nothing else', async () => {
    const openid = openidOf(instance);
    const expired = await openid.sign(idTokenClaims(instance, { exp: Math.floor(Date.now() / 1000) - 3600 }), 'RS256', 'JWT');
    expect(await openid.verifyIdTokenHint(expired)).toEqual({ sub: 'user-1', aud: ['client-1'], sid: openid.sessionId('session:abc') });
    // Verified by another sidecar of the deployment.
    expect(await openidOf(second).verifyIdTokenHint(await openid.sign(idTokenClaims(instance, { aud: ['a', 'b'], sid: undefined }), 'ES256', 'JWT'))).toEqual({
      sub: 'user-1',
      aud: ['a', 'b'],
    });

    // Another issuer's name, a logout token, a changed payload, no subject, no audience.
    expect(await openid.verifyIdTokenHint(await openid.sign(idTokenClaims(instance, { iss: 'https://elsewhere.example' }), 'RS256', 'JWT'))).toBeNull();
    expect(await openid.verifyIdTokenHint(await openid.sign(idTokenClaims(instance), 'RS256', 'logout+jwt'))).toBeNull();
    expect(await openid.verifyIdTokenHint(await openid.sign(idTokenClaims(instance, { sub: 42 }), 'RS256', 'JWT'))).toBeNull();
    expect(await openid.verifyIdTokenHint(await openid.sign(idTokenClaims(instance, { aud: [] }), 'RS256', 'JWT'))).toBeNull();
    const [header, , signature] = (await openid.sign(idTokenClaims(instance), 'RS256', 'JWT')).split('.');
    const otherUser = Buffer.from(JSON.stringify(idTokenClaims(instance, { sub: 'user-2' }))).toString('base64url');
    expect(await openid.verifyIdTokenHint(`${header}.${otherUser}.${signature}`)).toBeNull();

    // A forgery: a key of the attacker's own, under a published key id, and alg none.
    const { privateKey, publicKey } = await generateKeyPair('RS256');
    const publishedKid = (await jwksOf(instance, OPENID_JWKS_PATH)).keys.keys.find((key) => key.alg === 'RS256')!.kid!;
    const forged = await new SignJWT(idTokenClaims(instance)).setProtectedHeader({ alg: 'RS256', kid: publishedKid, typ: 'JWT' }).sign(privateKey);
    expect(await openid.verifyIdTokenHint(forged)).toBeNull();
    const embedded = await new SignJWT(idTokenClaims(instance))
      .setProtectedHeader({ alg: 'RS256', jwk: await exportJWK(publicKey), typ: 'JWT' })
      .sign(privateKey);
    expect(await openid.verifyIdTokenHint(embedded)).toBeNull();
    const unsigned = `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${Buffer.from(JSON.stringify(idTokenClaims(instance))).toString('base64url')}.`;
    expect(await openid.verifyIdTokenHint(unsigned)).toBeNull();
    expect(await openid.verifyIdTokenHint('not a token')).toBeNull();
  });

  it('gives each session a stable sid that does not reveal its store key', () => {
    const openid = openidOf(instance);
    const sid = openid.sessionId('tokengate:session:abc');
    expect(sid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(openidOf(second).sessionId('tokengate:session:abc')).toBe(sid);
    expect(openid.sessionId('tokengate:session:abd')).not.toBe(sid);
    expect(sid).not.toContain('abc');
  });

  it('rotates by hand: a new key of each algorithm is published at once and signs only after jwksMaxAgeSeconds + keyRefreshSeconds + 5 s', async () => {
    const before = (await jwksOf(instance, OPENID_JWKS_PATH)).keys.keys.map((key) => key.kid);
    const rotated = await adminFetch(instance, '/openid-keys/rotate', { method: 'POST' });
    expect(rotated.status).toBe(200);
    const answer = (await rotated.json()) as { created: Array<{ kid: string; alg: string; created_at: string; activates_at: string }> };
    expect(answer.created.map((key) => key.alg).sort()).toEqual(['ES256', 'RS256']);
    for (const key of answer.created) expect(Date.parse(key.activates_at) - Date.parse(key.created_at)).toBeGreaterThanOrEqual((55 + 1 + 5) * 1000);
    const after = (await jwksOf(instance, OPENID_JWKS_PATH)).keys.keys.map((key) => key.kid);
    expect(after).toEqual(expect.arrayContaining([...before, ...answer.created.map((key) => key.kid)]));
    // Still signed by the old keys: no client has had the new ones for long enough.
    for (const alg of ['RS256', 'ES256'] as const) {
      const kid = decodeProtectedHeader(await openidOf(instance).sign(idTokenClaims(instance), alg, 'JWT')).kid;
      expect(before).toContain(kid);
    }
    // A client with the JWKS cached from before the rotation still verifies what is signed now.
    const cachedBefore = createRemoteJWKSet(new URL(`${instance.baseUrl}${OPENID_JWKS_PATH}`));
    await jwtVerify(await openidOf(instance).sign(idTokenClaims(instance), 'RS256', 'JWT'), cachedBefore);
    const listed = (await (await adminFetch(instance, '/openid-keys')).json()) as { keys: Array<{ kid: string }> };
    expect(listed.keys.map((key) => key.kid).sort()).toEqual([...after].sort());
    // The signed identity's keys are not touched.
    expect(((await (await adminFetch(instance, '/keys')).json()) as { keys: unknown[] }).keys).toHaveLength(1);
  });

  it('answers the admin key routes 404 while it is off', async () => {
    const off = await startTokengate('openid-keys-off');
    try {
      expect((await adminFetch(off, '/openid-keys')).status).toBe(404);
      expect((await fetch(`${off.baseUrl}${OPENID_JWKS_PATH}`, { headers: { authorization: `Bearer ${APPLICATION_TOKEN}` } })).status).toBe(404);
      expect(off.tokengate.context.openid).toBeNull();
    } finally {
      await off.close();
    }
  });
});

function problemsOf(config: Record<string, unknown>): Array<{ path: string; message: string }> {
  try {
    parseConfig(JSON.stringify(config), 'openid.yaml', {});
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toContain('openid.yaml');
    return (error as ConfigError).problems.map(({ path, message }) => ({ path, message }));
  }
  return [];
}

describe('openidConnect in the config', () => {
  const base = { issuer: { issuerUrl: 'https://auth.ticketing.example' } };

  it('is off by default, and on with its defaults', () => {
    expect(parseConfig(JSON.stringify(base), 'openid.yaml', {}).openidConnect.enabled).toBe(false);
    expect(parseConfig(JSON.stringify({ ...base, openidConnect: { enabled: true } }), 'openid.yaml', {}).openidConnect).toMatchObject({
      algorithms: ['RS256', 'ES256'],
      idTokenLifetimeSeconds: 3600,
      jwksMaxAgeSeconds: 300,
      keyRefreshSeconds: 10,
      rotationIntervalSeconds: 2_592_000,
    });
  });

  it('refuses each bad setting, naming its key', () => {
    expect(problemsOf({ ...base, openidConnect: { enabled: true, algorithms: ['ES256'] } })).toEqual([
      { path: 'openidConnect.algorithms', message: expect.stringContaining('must include RS256') as string },
    ]);
    expect(problemsOf({ ...base, openidConnect: { enabled: true, algorithms: ['RS256', 'HS256'] } })).toContainEqual(
      expect.objectContaining({ path: 'openidConnect.algorithms[1]' }),
    );
    expect(problemsOf({ ...base, openidConnect: { enabled: true, keyEncryptionKey: 'c2hvcnQ' } })).toEqual([
      { path: 'openidConnect.keyEncryptionKey', message: 'expected 32 bytes, got 5' },
    ]);
    expect(problemsOf({ ...base, openidConnect: { enabled: true, jwksMaxAgeSeconds: 30, keyRefreshSeconds: 10 } })).toEqual([
      { path: 'openidConnect.jwksMaxAgeSeconds', message: expect.stringContaining('(45 s) before it signs, which must be at least 60 s') as string },
    ]);
    expect(problemsOf({ ...base, openidConnect: { enabled: true, rotationIntervalSeconds: 600 } })).toEqual([
      { path: 'openidConnect.rotationIntervalSeconds', message: expect.stringMatching(/^must be 0 or at least 3930 s/) as string },
    ]);
    expect(problemsOf({ ...base, issuer: { ...base.issuer, enabled: false }, openidConnect: { enabled: true } })).toContainEqual({
      path: 'openidConnect.enabled',
      message: 'needs issuer.enabled: true (ID tokens are issued by the issuer)',
    });
    // Off, nothing of it is checked.
    expect(problemsOf({ ...base, openidConnect: { algorithms: ['ES256'] } })).toEqual([]);
  });

  it('keeps the key encryption key out of the published config hash', () => {
    const withKey = (key: string) =>
      configHash(parseConfig(JSON.stringify({ ...base, openidConnect: { enabled: true, keyEncryptionKey: key } }), 'openid.yaml', {}));
    expect(withKey(Buffer.alloc(32, 1).toString('base64url'))).toBe(withKey(Buffer.alloc(32, 2).toString('base64url')));
  });
});
