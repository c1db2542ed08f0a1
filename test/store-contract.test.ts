import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { redisKeySetStore } from '../src/identity/key-set-store.js';
import { createMetrics } from '../src/observability/metrics.js';
import type { RedisDoor } from '../src/store/backend.js';
import { cached } from '../src/store/cached.js';
import { MemoryStore } from '../src/store/memory.js';
import { deleteApplicationAndTokens, deleteUserAndTokens, endGrant } from '../src/store/deletions.js';
import { withTokens, type AccessTokenRecord, type RefreshTokenRecord, type RevocationEvent, type Store } from '../src/store/store.js';
import { createTokenMinter, generateTagKey, decodeTagKey, tokenDigest } from '../src/token/token-value.js';
import { signalsStoreFor, type SignalsStore } from '../src/shared-signals/signals-store.js';
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

/** The token cache is the token port too, and must keep every promise of the port it wraps. */
const withCache = (open: () => Promise<StoreUnderTest>) => async (): Promise<StoreUnderTest> => {
  const inner = await open();
  const cache = cached(inner.store.tokens, cacheConfig, createMetrics());
  const peerCache = inner.peer === inner.store ? cache : cached(inner.peer.tokens, cacheConfig, createMetrics());
  await Promise.all([cache.subscribed, peerCache.subscribed]);
  const store = withTokens(inner.store, cache);
  return {
    store,
    peer: inner.peer === inner.store ? store : withTokens(inner.peer, peerCache),
    async cleanup() {
      await Promise.all([cache.stop(), peerCache.stop()]);
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
/** Every port but the token port: the cache is in front of that one alone. */
const stores = implementations.filter(([name]) => !name.startsWith('cached'));

/** Opens a fresh store before each test of the enclosing describe, and cleans it up after. */
function eachTest(open: () => Promise<StoreUnderTest>): StoreUnderTest {
  const subject = {} as StoreUnderTest;
  beforeEach(async () => {
    Object.assign(subject, await open());
  });
  afterEach(async () => {
    await subject.cleanup();
  });
  return subject;
}

describe.each(stores)('store lifecycle: %s', (_name, driver, open) => {
  const subject = eachTest(open);

  it('answers ping', async () => {
    await expect(subject.store.ping()).resolves.toBeUndefined();
    expect(subject.store.backend.driver).toBe(driver);
  });
});

describe.each(stores)('applications port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

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
    await subject.store.applications.put(app);
    await subject.store.applications.put({ ...app, clientId: 'client-b', name: 'Scanner', secretDigest: null, confidential: false });
    expect(await subject.store.applications.get('client-a')).toEqual(app);
    expect((await subject.store.applications.list()).map((each) => each.clientId).sort()).toEqual(['client-a', 'client-b']);
    expect(await subject.store.applications.delete('client-a')).toBe(true);
    expect(await subject.store.applications.delete('client-a')).toBe(false);
    expect(await subject.store.applications.get('client-a')).toBeNull();
  });

  it('returns copies: mutating a returned record changes nothing stored', async () => {
    await subject.store.applications.put({
      clientId: 'c',
      name: 'n',
      secretDigest: null,
      redirectUris: ['https://a/cb'],
      scopes: ['public'],
      confidential: false,
      createdAt: 1,
    });
    const first = await subject.store.applications.get('c');
    first!.redirectUris.push('https://evil/cb');
    expect((await subject.store.applications.get('c'))!.redirectUris).toEqual(['https://a/cb']);
  });
});

describe.each(stores)('users port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

  it('keeps users unique by e-mail', async () => {
    const user = { id: randomUUID(), email: 'ana@example.com', passwordHash: 'scrypt$x', createdAt: 1 };
    expect(await subject.store.users.create(user)).toBe(true);
    expect(await subject.store.users.create({ ...user, id: randomUUID() })).toBe(false);
    expect(await subject.store.users.findByEmail('ana@example.com')).toEqual(user);
    expect(await subject.store.users.get(user.id)).toEqual(user);
    expect((await subject.store.users.list()).map((each) => each.id)).toEqual([user.id]);
    expect(await subject.store.users.delete(user.id)).toBe(true);
    expect(await subject.store.users.findByEmail('ana@example.com')).toBeNull();
    expect(await subject.store.users.create({ ...user, id: randomUUID() })).toBe(true);
  });

  it('replaces a password hash only while the user still has the one it was checked against', async () => {
    const user = { id: randomUUID(), email: 'rehash@example.com', passwordHash: 'scrypt$old', createdAt: 1 };
    await subject.store.users.create(user);
    expect(await subject.store.users.replacePasswordHash(user.id, 'scrypt$other', 'scrypt$new')).toBe(false);
    expect((await subject.store.users.get(user.id))?.passwordHash).toBe('scrypt$old');
    expect(await subject.store.users.replacePasswordHash(user.id, 'scrypt$old', 'scrypt$new')).toBe(true);
    expect(await subject.store.users.findByEmail('rehash@example.com')).toEqual({ ...user, passwordHash: 'scrypt$new' });
    expect(await subject.store.users.replacePasswordHash('nobody', 'scrypt$old', 'scrypt$new')).toBe(false);
  });
});

describe.each(stores)('authorization codes port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

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
    await subject.store.codes.save(digest, record);
    const results = await Promise.all([subject.store.codes.consume(digest), subject.peer.codes.consume(digest), subject.store.codes.consume(digest)]);
    expect(results.filter((result) => result?.firstUse === true)).toHaveLength(1);
    expect(results.filter((result) => result?.firstUse === false)).toHaveLength(2);
    expect(results[0]!.record).toEqual(record);
    expect(await subject.store.codes.consume(newDigest())).toBeNull();
  });
});

describe.each(stores)('grants port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

  it("keeps a user's grant to an application, grows it with each approval under the same id, and lists the user's grants", async () => {
    const first = await subject.store.grants.approve('user-g', 'client-a', { scopes: ['public'], resources: ['https://api.example/'] }, 1_000);
    expect(first).toEqual({
      id: expect.any(String),
      userId: 'user-g',
      clientId: 'client-a',
      scopes: ['public'],
      resources: ['https://api.example/'],
      approvedAt: 1_000,
      lastUsedAt: 1_000,
    });
    expect(await subject.peer.grants.get('user-g', 'client-a')).toEqual(first);
    // Nothing new: the same grant, approved when it was, used now.
    expect(await subject.peer.grants.approve('user-g', 'client-a', { scopes: ['public'], resources: [] }, 2_000)).toEqual({ ...first, lastUsedAt: 2_000 });
    const grown = await subject.store.grants.approve('user-g', 'client-a', { scopes: ['public', 'organizer'], resources: ['https://api.example/'] }, 3_000);
    expect(grown).toEqual({ ...first, scopes: ['public', 'organizer'], approvedAt: 3_000, lastUsedAt: 3_000 });
    await subject.store.grants.approve('user-g', 'client-b', { scopes: ['public'], resources: [] }, 4_000);
    await subject.store.grants.approve('user-other', 'client-a', { scopes: ['public'], resources: [] }, 5_000);
    expect((await subject.peer.grants.list('user-g')).map((grant) => [grant.clientId, grant.approvedAt])).toEqual([
      ['client-b', 4_000],
      ['client-a', 3_000],
    ]);
    expect(await subject.store.grants.list('user-nobody')).toEqual([]);
    expect(await subject.store.grants.get('user-g', 'client-c')).toBeNull();
  });

  it('loses nothing when approvals of one grant race on two sidecars', async () => {
    const scopes = Array.from({ length: 12 }, (_, index) => `scope-${index}`);
    await Promise.all(
      scopes.map((scope, index) =>
        (index % 2 === 0 ? subject.store : subject.peer).grants.approve('user-race', 'client-a', { scopes: [scope], resources: [] }, 1_000 + index),
      ),
    );
    const grant = await subject.store.grants.get('user-race', 'client-a');
    expect([...grant!.scopes].sort()).toEqual([...scopes].sort());
  });

  it('marks a grant used only while it stands under the id it was issued with', async () => {
    const grant = await subject.store.grants.approve('user-t', 'client-a', { scopes: ['public'], resources: [] }, 1_000);
    expect(await subject.peer.grants.touch('user-t', 'client-a', grant.id, 7_000)).toBe(true);
    expect((await subject.store.grants.get('user-t', 'client-a'))!.lastUsedAt).toBe(7_000);
    expect(await subject.store.grants.touch('user-t', 'client-a', 'another-id', 8_000)).toBe(false);
    expect(await subject.store.grants.touch('user-t', 'client-b', grant.id, 8_000)).toBe(false);
    expect((await subject.store.grants.get('user-t', 'client-a'))!.lastUsedAt).toBe(7_000);

    expect(await subject.store.grants.endedAt('user-t', 'client-a')).toBeNull();
    expect(await subject.peer.grants.delete('user-t', 'client-a', 8_500)).toBe(true);
    expect(await subject.peer.grants.delete('user-t', 'client-a', 8_600)).toBe(false);
    expect(await subject.store.grants.get('user-t', 'client-a')).toBeNull();
    // When it ended is kept (the last time), beside no grant: a token of before grants issued earlier makes none.
    expect(await subject.store.grants.endedAt('user-t', 'client-a')).toBe(8_600);
    expect(await subject.store.grants.list('user-t')).toEqual([]);
    expect(await subject.store.grants.touch('user-t', 'client-a', grant.id, 9_000)).toBe(false);
    // Approved again after it ended: another grant, which the old id does not name.
    const again = await subject.store.grants.approve('user-t', 'client-a', { scopes: ['public'], resources: [] }, 10_000);
    expect(again.id).not.toBe(grant.id);
    expect(await subject.store.grants.touch('user-t', 'client-a', grant.id, 11_000)).toBe(false);
  });

  it('ends every grant of a deleted user, and every grant to a deleted application', async () => {
    for (const [user, client] of [
      ['user-1', 'client-a'],
      ['user-1', 'client-b'],
      ['user-2', 'client-a'],
      ['user-2', 'client-b'],
      ['user-3', 'client-b'],
    ] as const)
      await subject.store.grants.approve(user, client, { scopes: ['public'], resources: [] }, 1_000);
    await subject.store.users.create({ id: 'user-1', email: 'one@example.com', passwordHash: 'x', createdAt: 1 });
    await deleteUserAndTokens(subject.peer, 'user-1');
    expect(await subject.store.grants.list('user-1')).toEqual([]);
    await deleteApplicationAndTokens(subject.peer, 'client-b');
    expect((await subject.store.grants.list('user-2')).map((grant) => grant.clientId)).toEqual(['client-a']);
    expect(await subject.store.grants.list('user-3')).toEqual([]);
    // The user deleted before was not left behind as one of the application's users.
    await subject.store.grants.approve('user-1', 'client-b', { scopes: ['public'], resources: [] }, 2_000);
    await deleteApplicationAndTokens(subject.peer, 'client-b');
    expect(await subject.store.grants.list('user-1')).toEqual([]);
  });
});

describe.each(implementations)('tokens port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

  it('keeps the DPoP binding of access and refresh tokens and codes (jkt), cached or not', async () => {
    const jkt = 'x'.repeat(43);
    const access = newDigest();
    await subject.store.tokens.saveAccessToken(access, accessToken({ jkt }));
    expect((await subject.store.tokens.getAccessToken(access))?.jkt).toBe(jkt);
    // Read a second time: a cache answers from its own entry now.
    expect((await subject.peer.tokens.getAccessToken(access))?.jkt).toBe(jkt);
    expect((await subject.store.tokens.getAccessToken(access))?.jkt).toBe(jkt);
    const unbound = newDigest();
    await subject.store.tokens.saveAccessToken(unbound, accessToken());
    expect((await subject.store.tokens.getAccessToken(unbound))?.jkt).toBeUndefined();
    const now = Date.now();
    const refresh = newDigest();
    await subject.store.tokens.saveRefreshToken(refresh, {
      clientId: 'c',
      userId: 'u',
      scopes: ['public'],
      familyId: `f-${refresh}`,
      issuedAt: now,
      expiresAt: now + 60_000,
      jkt,
    });
    expect((await subject.store.tokens.getRefreshToken(refresh))?.jkt).toBe(jkt);
    const code = newDigest();
    await subject.store.codes.save(code, {
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
    expect((await subject.store.codes.consume(code))?.record.jkt).toBe(jkt);
  });

  it('saves, reads and revokes access tokens, publishing the revocation to every subscriber', async () => {
    const events: RevocationEvent[] = [];
    const unsubscribe = await subject.peer.tokens.subscribeRevocations({
      onRevoked: (event) => events.push(event),
      onInterrupted: () => {},
      onReset: () => {},
    });
    const digest = newDigest();
    await subject.store.tokens.saveAccessToken(digest, accessToken());
    // A cache answers with its own frozen object, the record and what it keeps beside it.
    expect(await subject.peer.tokens.getAccessToken(digest)).toMatchObject(accessToken({ issuedAt: expect.any(Number), expiresAt: expect.any(Number) }));
    expect(await subject.store.tokens.revokeAccessToken(digest)).toBe(1);
    expect(await subject.store.tokens.getAccessToken(digest)).toBeNull();
    await eventually(() => events.length === 1, 2_000);
    expect(events[0]!.accessTokens).toEqual([digest]);
    expect(events[0]!.publishedAt).toBeLessThanOrEqual(Date.now());
    await unsubscribe();
  });

  it('keeps the audience (the resources a grant is for) of codes, access and refresh tokens, as every sidecar reads them', async () => {
    const audience = ['https://api.ticketing.example/api/public', 'https://api.ticketing.example/organizer'];
    const access = newDigest();
    await subject.store.tokens.saveAccessToken(access, accessToken({ audience }));
    expect((await subject.peer.tokens.getAccessToken(access))!.audience).toEqual(audience);
    const refresh = newDigest();
    await subject.store.tokens.saveRefreshToken(refresh, refreshToken({ audience }));
    expect((await subject.peer.tokens.getRefreshToken(refresh))!.audience).toEqual(audience);
    expect((await subject.peer.tokens.consumeRefreshToken(refresh))!.record.audience).toEqual(audience);
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
    await subject.store.codes.save(code, { ...codeRecord, familyId: 'f', audience, issuedAt: now, expiresAt: now + 600_000 });
    expect((await subject.peer.codes.consume(code))!.record.audience).toEqual(audience);
  });

  it('expires tokens by itself, not only on read', async () => {
    const digest = newDigest();
    // A second of life: read back at once even on a loaded machine, then gone by itself.
    await subject.store.tokens.saveAccessToken(digest, accessToken({ expiresAt: Date.now() + 1_000 }));
    expect(await subject.store.tokens.getAccessToken(digest)).not.toBeNull();
    await eventually(async () => (await subject.store.tokens.getAccessToken(digest)) === null, 10_000);
    // An already expired record is never stored.
    const stale = newDigest();
    await subject.store.tokens.saveAccessToken(stale, accessToken({ expiresAt: Date.now() - 1 }));
    expect(await subject.store.tokens.getAccessToken(stale)).toBeNull();
  });

  it('rotates refresh tokens once and reports reuse', async () => {
    const digest = newDigest();
    await subject.store.tokens.saveRefreshToken(digest, refreshToken());
    expect(await subject.store.tokens.getRefreshToken(digest)).toEqual(refreshToken({ issuedAt: expect.any(Number), expiresAt: expect.any(Number) }));
    expect((await subject.store.tokens.consumeRefreshToken(digest))!.firstUse).toBe(true);
    expect(await subject.store.tokens.getRefreshToken(digest)).toBeNull();
    expect((await subject.store.tokens.consumeRefreshToken(digest))!.firstUse).toBe(false);
  });

  it("revokes a whole token family, a user's tokens and an application's tokens", async () => {
    const familyAccess = newDigest();
    const familyRefresh = newDigest();
    const otherFamily = newDigest();
    const appToken = newDigest();
    await subject.store.tokens.saveAccessToken(familyAccess, accessToken({ familyId: 'fam-x', userId: 'user-x' }));
    await subject.store.tokens.saveRefreshToken(familyRefresh, refreshToken({ familyId: 'fam-x', userId: 'user-x' }));
    await subject.store.tokens.saveAccessToken(otherFamily, accessToken({ familyId: 'fam-y', userId: 'user-x' }));
    await subject.store.tokens.saveAccessToken(appToken, accessToken({ kind: 'application', userId: null, familyId: null, clientId: 'client-z' }));

    expect(await subject.store.tokens.revokeFamily('fam-x')).toBe(2);
    expect(await subject.store.tokens.getAccessToken(familyAccess)).toBeNull();
    expect(await subject.store.tokens.getRefreshToken(familyRefresh)).toBeNull();
    expect(await subject.store.tokens.getAccessToken(otherFamily)).not.toBeNull();

    expect(await subject.store.tokens.revokeUserTokens('user-x')).toBe(1);
    expect(await subject.store.tokens.getAccessToken(otherFamily)).toBeNull();
    expect(await subject.store.tokens.getAccessToken(appToken)).not.toBeNull();

    expect(await subject.store.tokens.revokeClientTokens('client-z')).toBe(1);
    expect(await subject.store.tokens.getAccessToken(appToken)).toBeNull();
    expect(await subject.store.tokens.revokeClientTokens('client-z')).toBe(0);
  });

  it('revokes the tokens of one user at one application, announced to the peer, and keeps those saved after (not for good)', async () => {
    const mine = { access: newDigest(), refresh: newDigest() };
    const myOtherApplication = newDigest();
    const otherUserSameApplication = newDigest();
    const applicationToken = newDigest();
    await subject.store.tokens.saveAccessToken(mine.access, accessToken({ userId: 'user-d', clientId: 'client-d', familyId: 'fam-d1' }));
    await subject.store.tokens.saveRefreshToken(mine.refresh, refreshToken({ userId: 'user-d', clientId: 'client-d', familyId: 'fam-d1' }));
    await subject.store.tokens.saveAccessToken(myOtherApplication, accessToken({ userId: 'user-d', clientId: 'client-e', familyId: 'fam-d2' }));
    await subject.store.tokens.saveAccessToken(otherUserSameApplication, accessToken({ userId: 'user-f', clientId: 'client-d', familyId: 'fam-d3' }));
    await subject.store.tokens.saveAccessToken(applicationToken, accessToken({ kind: 'application', userId: null, familyId: null, clientId: 'client-d' }));
    for (const digest of [mine.access, myOtherApplication, otherUserSameApplication, applicationToken])
      expect(await subject.peer.tokens.getAccessToken(digest)).not.toBeNull();

    expect(await subject.store.tokens.revokeUserClientTokens('user-d', 'client-d')).toBe(2);
    await eventually(async () => (await subject.peer.tokens.getAccessToken(mine.access)) === null);
    expect(await subject.peer.tokens.getRefreshToken(mine.refresh)).toBeNull();
    for (const digest of [myOtherApplication, otherUserSameApplication, applicationToken])
      expect(await subject.peer.tokens.getAccessToken(digest)).not.toBeNull();

    // The user may connect the application again at once: its new tokens are kept.
    const later = newDigest();
    await subject.peer.tokens.saveAccessToken(later, accessToken({ userId: 'user-d', clientId: 'client-d', familyId: 'fam-d4' }));
    expect(await subject.store.tokens.getAccessToken(later)).not.toBeNull();
    expect(await endGrant(subject.store, 'user-d', 'client-d')).toEqual({ existed: false, revoked: 1 });
    expect(await subject.store.tokens.getAccessToken(later)).toBeNull();
  });

  it('revokes every token issued from the assertions of one identity provider subject, or of the whole provider, on the peer too', async () => {
    const idp = 'https://idp.company.example';
    const ada = [newDigest(), newDigest()];
    const grace = newDigest();
    const elsewhere = newDigest();
    for (const digest of ada) await subject.store.tokens.saveAccessToken(digest, accessToken({ identity: { issuer: idp, subject: 'ada' } }));
    await subject.store.tokens.saveAccessToken(grace, accessToken({ identity: { issuer: idp, subject: 'grace' } }));
    await subject.store.tokens.saveAccessToken(elsewhere, accessToken({ identity: { issuer: 'https://idp.other.example', subject: 'ada' } }));
    // The peer reads them first: a cached peer holds them until the feed tells it.
    for (const digest of [...ada, grace, elsewhere]) expect(await subject.peer.tokens.getAccessToken(digest)).not.toBeNull();

    expect(await subject.store.tokens.revokeIdentityTokens(idp, 'ada')).toBe(2);
    await eventually(async () => (await subject.peer.tokens.getAccessToken(ada[0]!)) === null && (await subject.peer.tokens.getAccessToken(ada[1]!)) === null);
    expect(await subject.peer.tokens.getAccessToken(grace)).not.toBeNull();
    expect(await subject.peer.tokens.getAccessToken(elsewhere)).not.toBeNull();

    expect(await subject.store.tokens.revokeIdentityTokens(idp)).toBe(1);
    await eventually(async () => (await subject.peer.tokens.getAccessToken(grace)) === null);
    expect(await subject.peer.tokens.getAccessToken(elsewhere)).not.toBeNull();
  });

  it('revokes every token of a provider that named its user by one e-mail address, whatever its subject, on the peer too', async () => {
    const idp = 'https://idp.company.example';
    const byEmail = [newDigest(), newDigest()];
    const otherEmail = newDigest();
    const otherProvider = newDigest();
    const identity = (subject: string, email: string, issuer = idp) => ({ identity: { issuer, subject, email } });
    await subject.store.tokens.saveAccessToken(byEmail[0]!, accessToken(identity('ada', 'ada@company.example')));
    await subject.store.tokens.saveAccessToken(byEmail[1]!, accessToken(identity('ada-2', 'ada@company.example')));
    await subject.store.tokens.saveAccessToken(otherEmail, accessToken(identity('ada', 'grace@company.example')));
    await subject.store.tokens.saveAccessToken(otherProvider, accessToken(identity('ada', 'ada@company.example', 'https://idp.other.example')));
    for (const digest of [...byEmail, otherEmail, otherProvider]) expect(await subject.peer.tokens.getAccessToken(digest)).not.toBeNull();

    expect(await subject.store.tokens.revokeIdentityEmailTokens(idp, 'ada@company.example')).toBe(2);
    await eventually(
      async () => (await subject.peer.tokens.getAccessToken(byEmail[0]!)) === null && (await subject.peer.tokens.getAccessToken(byEmail[1]!)) === null,
    );
    expect(await subject.peer.tokens.getAccessToken(otherEmail)).not.toBeNull();
    expect(await subject.peer.tokens.getAccessToken(otherProvider)).not.toBeNull();
    // The subject's own index still names the one left of it.
    expect(await subject.store.tokens.revokeIdentityTokens(idp, 'ada')).toBe(1);
  });

  it('revokes with an access token the tokens exchanged from it, and from those; one exchanged while it was revoked is born revoked', async () => {
    const subjectDigest = newDigest();
    const exchanged = newDigest();
    const chained = newDigest();
    await subject.store.tokens.saveAccessToken(subjectDigest, accessToken());
    await subject.store.tokens.saveAccessToken(exchanged, accessToken({ act: { clientId: 'service' }, exchangedFrom: [subjectDigest] }));
    await subject.store.tokens.saveAccessToken(chained, accessToken({ act: { clientId: 'service' }, exchangedFrom: [exchanged, subjectDigest] }));
    for (const digest of [exchanged, chained]) expect(await subject.peer.tokens.getAccessToken(digest)).not.toBeNull();

    expect(await subject.store.tokens.revokeAccessToken(subjectDigest)).toBe(3);
    await eventually(
      async () => (await subject.peer.tokens.getAccessToken(exchanged)) === null && (await subject.peer.tokens.getAccessToken(chained)) === null,
    );
    const late = newDigest();
    await subject.peer.tokens.saveAccessToken(late, accessToken({ exchangedFrom: [subjectDigest] }));
    expect(await subject.store.tokens.getAccessToken(late)).toBeNull();
  });

  it('revokes every token of a deleted application or user', async () => {
    const digest = newDigest();
    await subject.store.applications.put({
      clientId: 'client-del',
      name: 'n',
      secretDigest: null,
      redirectUris: [],
      scopes: ['public'],
      confidential: false,
      createdAt: 1,
    });
    await subject.store.tokens.saveAccessToken(digest, accessToken({ clientId: 'client-del' }));
    await deleteApplicationAndTokens(subject.store, 'client-del');
    expect(await subject.store.tokens.getAccessToken(digest)).toBeNull();

    const user = { id: 'user-del', email: 'del@example.com', passwordHash: 'x', createdAt: 1 };
    await subject.store.users.create(user);
    const userToken = newDigest();
    await subject.store.tokens.saveAccessToken(userToken, accessToken({ userId: 'user-del' }));
    await deleteUserAndTokens(subject.store, 'user-del');
    expect(await subject.store.tokens.getAccessToken(userToken)).toBeNull();
  });

  it('refuses for good a token of a revoked family, or of a deleted user or application, saved afterwards (a grant in flight)', async () => {
    await subject.store.tokens.saveAccessToken(newDigest(), accessToken({ familyId: 'fam-gone' }));
    await subject.store.tokens.revokeFamily('fam-gone');
    const late = { access: newDigest(), refresh: newDigest() };
    await subject.peer.tokens.saveAccessToken(late.access, accessToken({ familyId: 'fam-gone' }));
    await subject.peer.tokens.saveRefreshToken(late.refresh, refreshToken({ familyId: 'fam-gone' }));
    expect(await subject.store.tokens.getAccessToken(late.access)).toBeNull();
    expect(await subject.store.tokens.getRefreshToken(late.refresh)).toBeNull();

    await subject.store.users.create({ id: 'user-gone', email: 'gone@example.com', passwordHash: 'x', createdAt: 1 });
    await deleteUserAndTokens(subject.store, 'user-gone');
    const forDeletedUser = newDigest();
    await subject.peer.tokens.saveAccessToken(forDeletedUser, accessToken({ userId: 'user-gone', familyId: 'fam-other' }));
    expect(await subject.store.tokens.getAccessToken(forDeletedUser)).toBeNull();

    await deleteApplicationAndTokens(subject.store, 'client-gone');
    const forDeletedApplication = newDigest();
    await subject.peer.tokens.saveAccessToken(
      forDeletedApplication,
      accessToken({ kind: 'application', clientId: 'client-gone', userId: null, familyId: null }),
    );
    expect(await subject.store.tokens.getAccessToken(forDeletedApplication)).toBeNull();
  });

  it("keeps tokens saved after a user's or an application's tokens were revoked (neither is gone for good)", async () => {
    await subject.store.tokens.revokeUserTokens('user-back');
    await subject.store.tokens.revokeClientTokens('client-back');
    const digest = newDigest();
    await subject.peer.tokens.saveAccessToken(digest, accessToken({ userId: 'user-back', clientId: 'client-back' }));
    expect(await subject.store.tokens.getAccessToken(digest)).not.toBeNull();
  });

  it('lets no token escape its indexes when saves race a revocation: a later revocation finds every one left', async () => {
    const saved = Array.from({ length: 60 }, newDigest);
    const revoked = newDigest();
    await subject.store.tokens.saveAccessToken(revoked, accessToken({ userId: 'user-race', familyId: 'fam-race-0' }));
    // Saves through one handle, the revocation through another, all in flight together.
    const [, removed] = await Promise.all([
      Promise.all(
        saved.map((digest, index) => subject.store.tokens.saveAccessToken(digest, accessToken({ userId: 'user-race', familyId: `fam-race-${index % 7}` }))),
      ),
      subject.peer.tokens.revokeUserTokens('user-race'),
    ]);
    expect(removed).toBeGreaterThanOrEqual(1);
    expect(await subject.store.tokens.getAccessToken(revoked)).toBeNull();
    // Whatever survived the first revocation (saved after it read the index) is still indexed.
    await subject.peer.tokens.revokeUserTokens('user-race');
    for (const digest of saved) expect(await subject.store.tokens.getAccessToken(digest)).toBeNull();
  });
});

describe.each(stores)('counters port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

  it('counts within a window that its own increments do not extend', async () => {
    // Times are measured from the first increment, with wide margins, so a loaded machine
    // cannot push a step across the window's end.
    const windowMs = 1_000;
    const started = Date.now();
    expect(await subject.store.counters.increment('login:a', windowMs)).toBe(1);
    expect(await subject.peer.counters.increment('login:a', windowMs)).toBe(2);
    await sleepUntil(started + 400);
    expect(await subject.store.counters.increment('login:a', windowMs)).toBe(3);
    // Had that increment extended the window, the counter would live until ~1,400 ms.
    await sleepUntil(started + windowMs + 150);
    expect(await subject.store.counters.increment('login:a', windowMs)).toBe(1);
    await subject.store.counters.reset('login:a');
    expect(await subject.store.counters.increment('login:a', windowMs)).toBe(1);
  });

  it('takes back an increment of a live counter, and leaves a gone counter gone', async () => {
    await subject.store.counters.increment('login:b', 600);
    await subject.store.counters.increment('login:b', 600);
    await subject.peer.counters.decrement('login:b');
    expect(await subject.store.counters.increment('login:b', 600)).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 700));
    await subject.store.counters.decrement('login:b');
    await subject.store.counters.decrement('login:never');
    expect(await subject.store.counters.increment('login:b', 600)).toBe(1);
    expect(await subject.store.counters.increment('login:never', 600)).toBe(1);
    // the window still ends: a decrement did not leave a counter without expiry
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(await subject.store.counters.increment('login:b', 600)).toBe(1);
  });
});

describe.each(stores)('secrets port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

  it('creates a shared secret once, whoever asks first', async () => {
    const [first, second] = await Promise.all([subject.store.secrets.getOrCreate('k', 'one'), subject.peer.secrets.getOrCreate('k', 'two')]);
    expect(first).toBe(second);
    expect(await subject.store.secrets.getOrCreate('k', 'three')).toBe(first);
  });
});

describe.each(stores)('sessions port contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);

  it('keeps sessions until their time is up or they are deleted', async () => {
    await subject.store.sessions.save('s1', { userId: 'u', createdAt: 1, csrf: 'x' }, 60_000);
    expect(await subject.peer.sessions.get('s1')).toEqual({ userId: 'u', createdAt: 1, csrf: 'x' });
    await subject.store.sessions.delete('s1');
    expect(await subject.store.sessions.get('s1')).toBeNull();
    await subject.store.sessions.save('s2', { userId: null, createdAt: 1 }, 1_000);
    expect(await subject.peer.sessions.get('s2')).not.toBeNull();
    await eventually(async () => (await subject.store.sessions.get('s2')) === null, 10_000);
  });
});

/** The shared signals' records (src/shared-signals/signals-store.ts), built on each store's backend as the room builds them: one per handle, shared by both handles of a memory store. */
describe.each(stores)('shared signals records contract: %s', (_name, _driver, open) => {
  const subject = eachTest(open);
  const handles = (): [SignalsStore, SignalsStore] => {
    const own = signalsStoreFor(subject.store.backend);
    return [own, subject.peer === subject.store ? own : signalsStoreFor(subject.peer.backend)];
  };
  const idp = 'https://idp.company.example';

  it('lets one sidecar claim an event, shows the others it is being applied, then applied; a released claim is claimed again', async () => {
    const [signals, peer] = handles();
    expect(await signals.claimEvent(idp, 'jti-1', 60_000)).toBe('claimed');
    expect(await peer.claimEvent(idp, 'jti-1', 60_000)).toBe('applying');
    // The same jti of another issuer is another event.
    expect(await peer.claimEvent('https://idp.other.example', 'jti-1', 60_000)).toBe('claimed');
    await signals.completeEvent(idp, 'jti-1', 60_000);
    await peer.releaseEvent(idp, 'jti-1');
    expect(await peer.claimEvent(idp, 'jti-1', 60_000)).toBe('applied');
    expect(await signals.claimEvent(idp, 'jti-2', 60_000)).toBe('claimed');
    await signals.releaseEvent(idp, 'jti-2');
    expect(await peer.claimEvent(idp, 'jti-2', 60_000)).toBe('claimed');
  });

  it('lets a claim lapse (its applier died) and an applied mark expire after its keep', async () => {
    const [signals, peer] = handles();
    expect(await signals.claimEvent(idp, 'lapsing', 1_000)).toBe('claimed');
    await eventually(async () => (await peer.claimEvent(idp, 'lapsing', 60_000)) === 'claimed', 10_000);
    await peer.completeEvent(idp, 'lapsing', 1_000);
    expect(await signals.claimEvent(idp, 'lapsing', 60_000)).toBe('applied');
    await eventually(async () => (await signals.claimEvent(idp, 'lapsing', 60_000)) === 'claimed', 10_000);
  });

  it('keeps what was said of a subject under each of its names: the latest revocation, disabled until enabled, forgotten after its keep unless disabled', async () => {
    const [signals, peer] = handles();
    const ada = { by: 'sub', value: 'ada' } as const;
    const adaByEmail = { by: 'email', value: 'ada@company.example' } as const;
    const grace = { by: 'sub', value: 'grace' } as const;
    expect(await peer.subjectState(idp, [ada, adaByEmail])).toEqual({ revokedBefore: 0, disabled: false });
    await signals.markSubject(idp, ada, { revokedBefore: 1_800_000_100 }, 60_000);
    await signals.markSubject(idp, ada, { revokedBefore: 1_800_000_050 }, 60_000);
    await signals.markSubject(idp, adaByEmail, { revokedBefore: 1_800_000_000, disabled: true }, 60_000);
    expect(await peer.subjectState(idp, [ada])).toEqual({ revokedBefore: 1_800_000_100, disabled: false });
    expect(await peer.subjectState(idp, [ada, adaByEmail])).toEqual({ revokedBefore: 1_800_000_100, disabled: true });
    expect(await peer.subjectState('https://idp.other.example', [ada, adaByEmail])).toEqual({ revokedBefore: 0, disabled: false });
    await peer.markSubject(idp, adaByEmail, { disabled: false }, 60_000);
    expect(await signals.subjectState(idp, [ada, adaByEmail])).toEqual({ revokedBefore: 1_800_000_100, disabled: false });

    await signals.markSubject(idp, ada, { disabled: true }, 1_000);
    await signals.markSubject(idp, grace, { revokedBefore: 1_800_000_000 }, 1_000);
    // Grace's record expires after its keep; Ada's, given the same keep, stays while she is disabled.
    await eventually(async () => (await peer.subjectState(idp, [grace])).revokedBefore === 0, 10_000);
    expect(await peer.subjectState(idp, [ada])).toEqual({ revokedBefore: 1_800_000_100, disabled: true });
  });

  it('gives the lease of a stream to one owner at a time, until it is released or lapses', async () => {
    const [signals, peer] = handles();
    expect(await signals.holdLease('company', 'a', 60_000)).toBe(true);
    expect(await peer.holdLease('company', 'b', 60_000)).toBe(false);
    expect(await signals.holdLease('company', 'a', 1_000)).toBe(true);
    expect(await peer.holdLease('other-receiver', 'b', 60_000)).toBe(true);
    await peer.releaseLease('company', 'b');
    expect(await peer.holdLease('company', 'b', 60_000)).toBe(false);
    await eventually(() => peer.holdLease('company', 'b', 60_000), 10_000);
    await signals.releaseLease('company', 'a');
    expect(await signals.holdLease('company', 'a', 60_000)).toBe(false);
    await peer.releaseLease('company', 'b');
    expect(await signals.holdLease('company', 'a', 60_000)).toBe(true);
  });

  it("keeps a stream's state, field by field, for every sidecar", async () => {
    const [signals, peer] = handles();
    expect(await peer.readStream('company')).toEqual({});
    await signals.updateStream('company', { streamId: 's-1', status: 'enabled', verificationState: 'x' });
    await peer.updateStream('company', { status: 'paused', statusReason: 'maintenance', verificationState: '' });
    expect(await signals.readStream('company')).toEqual({ streamId: 's-1', status: 'paused', statusReason: 'maintenance' });
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
    await store.tokens.saveAccessToken(tokenDigest(token), accessToken());
    const keys = await redis.keys(`${prefix}*`);
    expect(keys.some((key) => key.includes(token))).toBe(false);
    for (const key of keys) expect(await redis.get(key).catch(() => '')).not.toContain(token);
    const ttl = await redis.pttl(`${prefix}at:${tokenDigest(token)}`);
    expect(ttl).toBeGreaterThan(3_000_000);
    expect(ttl).toBeLessThanOrEqual(3_600_000);
  });

  it("writes every port's keys under the names of the documented key layout, which sidecars of every version share", async () => {
    const documented = readFileSync(new URL('../docs/store.md', import.meta.url), 'utf8')
      .split('## Key layout')[1]!
      .split('\n## ')[0]!
      .matchAll(/`([a-z-]+(?::[a-z]+)*)(?::<[a-z_]+>)?/g);
    const names = new Set([...documented].map((match) => match[1]!));
    const now = Date.now();
    await store.applications.put({ clientId: 'c-layout', name: 'n', secretDigest: null, redirectUris: [], scopes: [], confidential: false, createdAt: now });
    await store.users.create({ id: 'u-layout', email: 'layout@example.com', passwordHash: 'x', createdAt: now });
    await store.users.create({ id: 'u-stays', email: 'stays@example.com', passwordHash: 'x', createdAt: now });
    await store.codes.save(newDigest(), {
      clientId: 'c',
      userId: 'u',
      redirectUri: 'https://a/cb',
      scopes: [],
      codeChallenge: null,
      codeChallengeMethod: null,
      familyId: 'f',
      issuedAt: now,
      expiresAt: inOneHour(),
    });
    await store.tokens.saveAccessToken(newDigest(), accessToken({ userId: 'u-other', familyId: 'f-layout', clientId: 'c-layout' }));
    await store.tokens.saveRefreshToken(newDigest(), refreshToken({ userId: 'u-other', familyId: 'f-layout', clientId: 'c-layout' }));
    await store.sessions.save('s-layout', { userId: null, createdAt: now }, 60_000);
    await store.grants.approve('u-other', 'c-layout', { scopes: ['public'], resources: [] }, now);
    await store.counters.increment('login:layout', 60_000);
    await store.secrets.getOrCreate('layout', 'x');
    // The signed identity's keys, through the same door.
    await redisKeySetStore(store.backend as RedisDoor).replace(null, '[]');
    await deleteUserAndTokens(store, 'u-layout');
    const signals = signalsStoreFor(store.backend);
    await signals.claimEvent('https://idp.example', 'jti', 60_000);
    await signals.markSubject('https://idp.example', { by: 'sub', value: 'ada' }, { revokedBefore: 1 }, 60_000);
    await signals.holdLease('company', 'owner', 60_000);
    await signals.updateStream('company', { status: 'enabled' });

    const written = new Set((await redis.keys(`${prefix}*`)).map((key) => key.slice(prefix.length).replace(/^(idx:[a-z]+|[a-z-]+):.*$/, '$1')));
    expect([...written].sort()).toEqual(
      [
        'app',
        'apps',
        'at',
        'code',
        'counter',
        'grant-users',
        'grants',
        'identity-keys',
        'idx:client',
        'idx:family',
        'idx:grant',
        'idx:user',
        'rt',
        'secret',
        'session',
        'ssf-event',
        'ssf-lease',
        'ssf-stream',
        'ssf-subject',
        'user',
        'user-email',
        'users',
      ].sort(),
    );
    for (const name of written) expect(names).toContain(name);
    // The user's index stays marked, for good, after the user is gone.
    expect(await redis.zscore(`${prefix}idx:user:u-layout`, 'revoked')).not.toBeNull();
  });
});
