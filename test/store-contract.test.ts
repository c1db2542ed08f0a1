import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../src/observability/metrics.js';
import { cached } from '../src/store/cached.js';
import { MemoryStore } from '../src/store/memory.js';
import type { AccessTokenRecord, RefreshTokenRecord, RevocationEvent, Store } from '../src/store/store.js';
import { createTokenMinter, generateTagKey, decodeTagKey, tokenDigest } from '../src/token/token-value.js';
import { createTestRedisStore, deletePrefix, rawRedis, uniquePrefix } from './support/redis.js';
import { deleteTopologyPrefix, openTopologyStore, startClusterTopology, startSentinelTopology, type TestTopology } from './support/topologies.js';
import { eventually } from './support/wait.js';

const minter = createTokenMinter(decodeTagKey(generateTagKey()));
const newDigest = () => tokenDigest(minter.mint());
const inOneHour = () => Date.now() + 3_600_000;

function accessToken(overrides: Partial<AccessTokenRecord> = {}): AccessTokenRecord {
  return {
    kind: 'user',
    clientId: 'client-a',
    userId: 'user-1',
    scopes: ['public'],
    familyId: 'family-1',
    issuedAt: Date.now(),
    expiresAt: inOneHour(),
    ...overrides,
  };
}

function refreshToken(overrides: Partial<RefreshTokenRecord> = {}): RefreshTokenRecord {
  return { clientId: 'client-a', userId: 'user-1', scopes: ['public'], familyId: 'family-1', issuedAt: Date.now(), expiresAt: inOneHour(), ...overrides };
}

async function sleepUntil(time: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, time - Date.now())));
}

interface StoreUnderTest {
  store: Store;
  /** A second handle on the same data (another sidecar), or the same store where there is none. */
  peer: Store;
  cleanup(): Promise<void>;
}

const openMemory = async (): Promise<StoreUnderTest> => {
  const store = new MemoryStore();
  return { store, peer: store, cleanup: () => store.close() };
};

const openRedis = async (): Promise<StoreUnderTest> => {
  const prefix = uniquePrefix('contract');
  const store = createTestRedisStore(prefix);
  const peer = createTestRedisStore(prefix);
  return {
    store,
    peer,
    async cleanup() {
      await Promise.all([store.close(), peer.close()]);
      await deletePrefix(prefix);
    },
  };
};

// A real Redis Cluster (three masters, one replica each) and a Sentinel set-up (one master, one
// replica, three sentinels) of this file's own, each write confirmed by a replica as in production.
let cluster: TestTopology;
let sentinel: TestTopology;
beforeAll(async () => {
  [cluster, sentinel] = await Promise.all([startClusterTopology(), startSentinelTopology()]);
}, 60_000);
afterAll(async () => {
  await Promise.all([cluster?.stop(), sentinel?.stop()]);
});

const openTopology = (topology: () => TestTopology) => async (): Promise<StoreUnderTest> => {
  const prefix = uniquePrefix('contract');
  const [store, peer] = await Promise.all([openTopologyStore(topology(), prefix), openTopologyStore(topology(), prefix)]);
  return {
    store,
    peer,
    async cleanup() {
      await Promise.all([store.close(), peer.close()]);
      await deleteTopologyPrefix(topology(), prefix);
    },
  };
};

/** The token cache is a store too, and must keep every promise of the store it wraps. */
const withCache = (open: () => Promise<StoreUnderTest>) => async (): Promise<StoreUnderTest> => {
  const inner = await open();
  const store = cached(inner.store, cacheConfig, createMetrics());
  const peer = inner.peer === inner.store ? store : cached(inner.peer, cacheConfig, createMetrics());
  await Promise.all([store.subscribed, peer.subscribed]);
  return {
    store,
    peer,
    async cleanup() {
      await Promise.all([store.stop(), peer.stop()]);
      await inner.cleanup();
    },
  };
};
const cacheConfig = { enabled: true, maxEntries: 1000, ttlSeconds: 60, negativeTtlSeconds: 5, negativeMaxEntries: 100, staleIfErrorSeconds: 0 };

const implementations: Array<[string, 'memory' | 'redis', () => Promise<StoreUnderTest>]> = [
  ['memory', 'memory', openMemory],
  ['redis', 'redis', openRedis],
  ['cached memory', 'memory', withCache(openMemory)],
  ['cached redis', 'redis', withCache(openRedis)],
  ['redis cluster', 'redis', openTopology(() => cluster)],
  ['cached redis cluster', 'redis', withCache(openTopology(() => cluster))],
  ['redis sentinel', 'redis', openTopology(() => sentinel)],
  ['cached redis sentinel', 'redis', withCache(openTopology(() => sentinel))],
];

describe.each(implementations)('token store contract: %s', (_name, driver, open) => {
  let subject: StoreUnderTest;
  let store: Store;

  beforeEach(async () => {
    subject = await open();
    store = subject.store;
  });
  afterEach(async () => {
    await subject.cleanup();
  });

  it('answers ping', async () => {
    await expect(store.ping()).resolves.toBeUndefined();
    expect(store.backend.driver).toBe(driver);
  });

  it('keeps applications, lists them and deletes them', async () => {
    const app = {
      clientId: 'client-a',
      name: 'Box office',
      secretDigest: 'abc',
      redirectUris: ['https://app.example/cb'],
      scopes: ['public'],
      confidential: true,
      createdAt: 1,
    };
    await store.putApplication(app);
    await store.putApplication({ ...app, clientId: 'client-b', name: 'Scanner', secretDigest: null, confidential: false });
    expect(await store.getApplication('client-a')).toEqual(app);
    expect((await store.listApplications()).map((each) => each.clientId).sort()).toEqual(['client-a', 'client-b']);
    expect(await store.deleteApplication('client-a')).toBe(true);
    expect(await store.deleteApplication('client-a')).toBe(false);
    expect(await store.getApplication('client-a')).toBeNull();
  });

  it('returns copies: mutating a returned record changes nothing stored', async () => {
    await store.putApplication({
      clientId: 'c',
      name: 'n',
      secretDigest: null,
      redirectUris: ['https://a/cb'],
      scopes: ['public'],
      confidential: false,
      createdAt: 1,
    });
    const first = await store.getApplication('c');
    first!.redirectUris.push('https://evil/cb');
    expect((await store.getApplication('c'))!.redirectUris).toEqual(['https://a/cb']);
  });

  it('keeps users unique by e-mail', async () => {
    const user = { id: randomUUID(), email: 'ana@example.com', passwordHash: 'scrypt$x', createdAt: 1 };
    expect(await store.createUser(user)).toBe(true);
    expect(await store.createUser({ ...user, id: randomUUID() })).toBe(false);
    expect(await store.findUserByEmail('ana@example.com')).toEqual(user);
    expect(await store.getUser(user.id)).toEqual(user);
    expect((await store.listUsers()).map((each) => each.id)).toEqual([user.id]);
    expect(await store.deleteUser(user.id)).toBe(true);
    expect(await store.findUserByEmail('ana@example.com')).toBeNull();
    expect(await store.createUser({ ...user, id: randomUUID() })).toBe(true);
  });

  it('lets an authorization code be consumed once and shows every replay', async () => {
    const digest = newDigest();
    const record = {
      clientId: 'client-a',
      userId: 'user-1',
      redirectUri: 'https://app.example/cb',
      scopes: ['public'],
      codeChallenge: null,
      codeChallengeMethod: null,
      familyId: 'f',
      issuedAt: Date.now(),
      expiresAt: Date.now() + 600_000,
    };
    await store.saveAuthorizationCode(digest, record);
    const results = await Promise.all([
      subject.store.consumeAuthorizationCode(digest),
      subject.peer.consumeAuthorizationCode(digest),
      store.consumeAuthorizationCode(digest),
    ]);
    expect(results.filter((result) => result?.firstUse === true)).toHaveLength(1);
    expect(results.filter((result) => result?.firstUse === false)).toHaveLength(2);
    expect(results[0]!.record).toEqual(record);
    expect(await store.consumeAuthorizationCode(newDigest())).toBeNull();
  });

  it('keeps the DPoP binding of access and refresh tokens and codes (jkt), cached or not', async () => {
    const jkt = 'x'.repeat(43);
    const access = newDigest();
    await store.saveAccessToken(access, accessToken({ jkt }));
    expect((await store.getAccessToken(access))?.jkt).toBe(jkt);
    // Read a second time: a cache answers from its own entry now.
    expect((await subject.peer.getAccessToken(access))?.jkt).toBe(jkt);
    expect((await store.getAccessToken(access))?.jkt).toBe(jkt);
    const unbound = newDigest();
    await store.saveAccessToken(unbound, accessToken());
    expect((await store.getAccessToken(unbound))?.jkt).toBeUndefined();
    const now = Date.now();
    const refresh = newDigest();
    await store.saveRefreshToken(refresh, {
      clientId: 'c',
      userId: 'u',
      scopes: ['public'],
      familyId: `f-${refresh}`,
      issuedAt: now,
      expiresAt: now + 60_000,
      jkt,
    });
    expect((await store.getRefreshToken(refresh))?.jkt).toBe(jkt);
    const code = newDigest();
    await store.saveAuthorizationCode(code, {
      clientId: 'c',
      userId: 'u',
      redirectUri: 'https://app.example/cb',
      scopes: ['public'],
      codeChallenge: null,
      codeChallengeMethod: null,
      familyId: `f-${code}`,
      issuedAt: now,
      expiresAt: now + 60_000,
      jkt,
    });
    expect((await store.consumeAuthorizationCode(code))?.record.jkt).toBe(jkt);
  });

  it('saves, reads and revokes access tokens, publishing the revocation to every subscriber', async () => {
    const events: RevocationEvent[] = [];
    const unsubscribe = await subject.peer.subscribeRevocations({ onRevoked: (event) => events.push(event), onInterrupted: () => {}, onReset: () => {} });
    const digest = newDigest();
    await store.saveAccessToken(digest, accessToken());
    // A cache answers with its own frozen object, the record and what it keeps beside it.
    expect(await subject.peer.getAccessToken(digest)).toMatchObject(accessToken({ issuedAt: expect.any(Number), expiresAt: expect.any(Number) }));
    expect(await store.revokeAccessToken(digest)).toBe(1);
    expect(await store.getAccessToken(digest)).toBeNull();
    await eventually(() => events.length === 1, 2_000);
    expect(events[0]!.accessTokens).toEqual([digest]);
    expect(events[0]!.publishedAt).toBeLessThanOrEqual(Date.now());
    await unsubscribe();
  });

  it('keeps the audience (the resources a grant is for) of codes, access and refresh tokens, as every sidecar reads them', async () => {
    const audience = ['https://api.ticketing.example/api/public', 'https://api.ticketing.example/organizer'];
    const access = newDigest();
    await store.saveAccessToken(access, accessToken({ audience }));
    expect((await subject.peer.getAccessToken(access))!.audience).toEqual(audience);
    const refresh = newDigest();
    await store.saveRefreshToken(refresh, refreshToken({ audience }));
    expect((await subject.peer.getRefreshToken(refresh))!.audience).toEqual(audience);
    expect((await subject.peer.consumeRefreshToken(refresh))!.record.audience).toEqual(audience);
    const code = newDigest();
    const now = Date.now();
    const codeRecord = {
      clientId: 'client-a',
      userId: 'user-1',
      redirectUri: 'https://app.example/cb',
      scopes: ['public'],
      codeChallenge: null,
      codeChallengeMethod: null,
    };
    await store.saveAuthorizationCode(code, { ...codeRecord, familyId: 'f', audience, issuedAt: now, expiresAt: now + 600_000 });
    expect((await subject.peer.consumeAuthorizationCode(code))!.record.audience).toEqual(audience);
  });

  it('expires tokens by itself, not only on read', async () => {
    const digest = newDigest();
    await store.saveAccessToken(digest, accessToken({ expiresAt: Date.now() + 150 }));
    expect(await store.getAccessToken(digest)).not.toBeNull();
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(await store.getAccessToken(digest)).toBeNull();
    // An already expired record is never stored.
    const stale = newDigest();
    await store.saveAccessToken(stale, accessToken({ expiresAt: Date.now() - 1 }));
    expect(await store.getAccessToken(stale)).toBeNull();
  });

  it('rotates refresh tokens once and reports reuse', async () => {
    const digest = newDigest();
    await store.saveRefreshToken(digest, refreshToken());
    expect(await store.getRefreshToken(digest)).toEqual(refreshToken({ issuedAt: expect.any(Number), expiresAt: expect.any(Number) }));
    expect((await store.consumeRefreshToken(digest))!.firstUse).toBe(true);
    expect(await store.getRefreshToken(digest)).toBeNull();
    expect((await store.consumeRefreshToken(digest))!.firstUse).toBe(false);
  });

  it("revokes a whole token family, a user's tokens and an application's tokens", async () => {
    const familyAccess = newDigest();
    const familyRefresh = newDigest();
    const otherFamily = newDigest();
    const appToken = newDigest();
    await store.saveAccessToken(familyAccess, accessToken({ familyId: 'fam-x', userId: 'user-x' }));
    await store.saveRefreshToken(familyRefresh, refreshToken({ familyId: 'fam-x', userId: 'user-x' }));
    await store.saveAccessToken(otherFamily, accessToken({ familyId: 'fam-y', userId: 'user-x' }));
    await store.saveAccessToken(appToken, accessToken({ kind: 'application', userId: null, familyId: null, clientId: 'client-z' }));

    expect(await store.revokeFamily('fam-x')).toBe(2);
    expect(await store.getAccessToken(familyAccess)).toBeNull();
    expect(await store.getRefreshToken(familyRefresh)).toBeNull();
    expect(await store.getAccessToken(otherFamily)).not.toBeNull();

    expect(await store.revokeUserTokens('user-x')).toBe(1);
    expect(await store.getAccessToken(otherFamily)).toBeNull();
    expect(await store.getAccessToken(appToken)).not.toBeNull();

    expect(await store.revokeClientTokens('client-z')).toBe(1);
    expect(await store.getAccessToken(appToken)).toBeNull();
    expect(await store.revokeClientTokens('client-z')).toBe(0);
  });

  it('revokes every token of a deleted application or user', async () => {
    const digest = newDigest();
    await store.putApplication({
      clientId: 'client-del',
      name: 'n',
      secretDigest: null,
      redirectUris: [],
      scopes: ['public'],
      confidential: false,
      createdAt: 1,
    });
    await store.saveAccessToken(digest, accessToken({ clientId: 'client-del' }));
    await store.deleteApplication('client-del');
    expect(await store.getAccessToken(digest)).toBeNull();

    const user = { id: 'user-del', email: 'del@example.com', passwordHash: 'x', createdAt: 1 };
    await store.createUser(user);
    const userToken = newDigest();
    await store.saveAccessToken(userToken, accessToken({ userId: 'user-del' }));
    await store.deleteUser('user-del');
    expect(await store.getAccessToken(userToken)).toBeNull();
  });

  it('refuses for good a token of a revoked family, or of a deleted user or application, saved afterwards (a grant in flight)', async () => {
    await store.saveAccessToken(newDigest(), accessToken({ familyId: 'fam-gone' }));
    await store.revokeFamily('fam-gone');
    const late = { access: newDigest(), refresh: newDigest() };
    await subject.peer.saveAccessToken(late.access, accessToken({ familyId: 'fam-gone' }));
    await subject.peer.saveRefreshToken(late.refresh, refreshToken({ familyId: 'fam-gone' }));
    expect(await store.getAccessToken(late.access)).toBeNull();
    expect(await store.getRefreshToken(late.refresh)).toBeNull();

    await store.createUser({ id: 'user-gone', email: 'gone@example.com', passwordHash: 'x', createdAt: 1 });
    await store.deleteUser('user-gone');
    const forDeletedUser = newDigest();
    await subject.peer.saveAccessToken(forDeletedUser, accessToken({ userId: 'user-gone', familyId: 'fam-other' }));
    expect(await store.getAccessToken(forDeletedUser)).toBeNull();

    await store.deleteApplication('client-gone');
    const forDeletedApplication = newDigest();
    await subject.peer.saveAccessToken(forDeletedApplication, accessToken({ kind: 'application', clientId: 'client-gone', userId: null, familyId: null }));
    expect(await store.getAccessToken(forDeletedApplication)).toBeNull();
  });

  it("keeps tokens saved after a user's or an application's tokens were revoked (neither is gone for good)", async () => {
    await store.revokeUserTokens('user-back');
    await store.revokeClientTokens('client-back');
    const digest = newDigest();
    await subject.peer.saveAccessToken(digest, accessToken({ userId: 'user-back', clientId: 'client-back' }));
    expect(await store.getAccessToken(digest)).not.toBeNull();
  });

  it('lets no token escape its indexes when saves race a revocation: a later revocation finds every one left', async () => {
    const saved = Array.from({ length: 60 }, newDigest);
    const revoked = newDigest();
    await store.saveAccessToken(revoked, accessToken({ userId: 'user-race', familyId: 'fam-race-0' }));
    // Saves through one handle, the revocation through another, all in flight together.
    const [, removed] = await Promise.all([
      Promise.all(saved.map((digest, index) => store.saveAccessToken(digest, accessToken({ userId: 'user-race', familyId: `fam-race-${index % 7}` })))),
      subject.peer.revokeUserTokens('user-race'),
    ]);
    expect(removed).toBeGreaterThanOrEqual(1);
    expect(await store.getAccessToken(revoked)).toBeNull();
    // Whatever survived the first revocation (saved after it read the index) is still indexed.
    await subject.peer.revokeUserTokens('user-race');
    for (const digest of saved) expect(await store.getAccessToken(digest)).toBeNull();
  });

  it('counts within a window that its own increments do not extend', async () => {
    // Times are measured from the first increment, with wide margins, so a loaded machine
    // cannot push a step across the window's end.
    const windowMs = 1_000;
    const started = Date.now();
    expect(await store.incrementCounter('login:a', windowMs)).toBe(1);
    expect(await subject.peer.incrementCounter('login:a', windowMs)).toBe(2);
    await sleepUntil(started + 400);
    expect(await store.incrementCounter('login:a', windowMs)).toBe(3);
    // Had that increment extended the window, the counter would live until ~1,400 ms.
    await sleepUntil(started + windowMs + 150);
    expect(await store.incrementCounter('login:a', windowMs)).toBe(1);
    await store.resetCounter('login:a');
    expect(await store.incrementCounter('login:a', windowMs)).toBe(1);
  });

  it('takes back an increment of a live counter, and leaves a gone counter gone', async () => {
    await store.incrementCounter('login:b', 600);
    await store.incrementCounter('login:b', 600);
    await subject.peer.decrementCounter('login:b');
    expect(await store.incrementCounter('login:b', 600)).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 700));
    await store.decrementCounter('login:b');
    await store.decrementCounter('login:never');
    expect(await store.incrementCounter('login:b', 600)).toBe(1);
    expect(await store.incrementCounter('login:never', 600)).toBe(1);
    // the window still ends: a decrement did not leave a counter without expiry
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(await store.incrementCounter('login:b', 600)).toBe(1);
  });

  it('creates a shared secret once, whoever asks first', async () => {
    const [first, second] = await Promise.all([store.getOrCreateSecret('k', 'one'), subject.peer.getOrCreateSecret('k', 'two')]);
    expect(first).toBe(second);
    expect(await store.getOrCreateSecret('k', 'three')).toBe(first);
  });

  it('keeps sessions until their time is up or they are deleted', async () => {
    await store.saveSession('s1', { userId: 'u', createdAt: 1, csrf: 'x' }, 150);
    expect(await subject.peer.getSession('s1')).toEqual({ userId: 'u', createdAt: 1, csrf: 'x' });
    await store.deleteSession('s1');
    expect(await store.getSession('s1')).toBeNull();
    await store.saveSession('s2', { userId: null, createdAt: 1 }, 100);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await store.getSession('s2')).toBeNull();
  });
});

describe('redis store: what Redis holds', () => {
  const prefix = uniquePrefix('layout');
  const store = createTestRedisStore(prefix);
  const redis = rawRedis();
  afterAll(async () => {
    await store.close();
    redis.disconnect();
    await deletePrefix(prefix);
  });

  it('keys token records by digest, never by the token value, with a TTL', async () => {
    const token = minter.mint();
    await store.saveAccessToken(tokenDigest(token), accessToken());
    const keys = await redis.keys(`${prefix}*`);
    expect(keys.some((key) => key.includes(token))).toBe(false);
    for (const key of keys) expect(await redis.get(key).catch(() => '')).not.toContain(token);
    const ttl = await redis.pttl(`${prefix}at:${tokenDigest(token)}`);
    expect(ttl).toBeGreaterThan(3_000_000);
    expect(ttl).toBeLessThanOrEqual(3_600_000);
  });
});
