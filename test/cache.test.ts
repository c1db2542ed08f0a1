import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { CacheConfig } from '../src/config/schema.js';
import { createMetrics, type Metrics } from '../src/observability/metrics.js';
import { cached, type CachedTokens } from '../src/store/cached.js';
import { deleteApplicationAndTokens, deleteUserAndTokens } from '../src/store/deletions.js';
import { withTokens, type AccessTokenRecord, type Store } from '../src/store/store.js';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest } from '../src/token/token-value.js';
import { countingStore } from './support/gateway.js';
import { observationsOf, valueOf } from './support/metrics.js';
import { createTestRedisStore, deletePrefix, rawRedis, uniquePrefix } from './support/redis.js';
import { holdingReads } from './support/stores.js';
import { eventually, sleep } from './support/wait.js';

const prefix = uniquePrefix('cache');
const redis = rawRedis();
const minter = createTokenMinter(decodeTagKey(generateTagKey()));
const newDigest = () => tokenDigest(minter.mint());

const defaults: CacheConfig = { enabled: true, maxEntries: 1000, ttlSeconds: 60, negativeTtlSeconds: 5, negativeMaxEntries: 100, staleIfErrorSeconds: 0 };

function accessToken(overrides: Partial<AccessTokenRecord> = {}): AccessTokenRecord {
  return {
    kind: 'user',
    clientId: 'client-a',
    userId: 'user-1',
    scopes: ['public'],
    familyId: 'family-1',
    issuedAt: Date.now(),
    expiresAt: Date.now() + 3_600_000,
    ...overrides,
  };
}

interface Sidecar {
  cache: CachedTokens;
  /** The sidecar's store with its tokens read through the cache, as the instance has it. */
  store: Store;
  metrics: Metrics;
  /** getAccessToken calls that reached the real Redis store behind the cache. */
  storeReads(): number;
}

const opened: Array<{ cache: CachedTokens; store: Store }> = [];

/** One sidecar's view: a cache over its own Redis store, all sidecars sharing one key prefix. */
async function sidecar(config: Partial<CacheConfig> = {}, wrap: (store: Store) => Store = (store) => store): Promise<Sidecar> {
  const redisStore = createTestRedisStore(prefix);
  const counted = countingStore(redisStore);
  const metrics = createMetrics();
  const cache = cached(wrap(counted.store).tokens, { ...defaults, ...config }, metrics);
  await cache.subscribed;
  opened.push({ cache, store: redisStore });
  return { cache, store: withTokens(redisStore, cache), metrics, storeReads: () => counted.calls.getAccessToken };
}

afterEach(async () => {
  await Promise.all(opened.splice(0).map(async ({ cache, store }) => (await cache.stop(), await store.close())));
});
afterAll(async () => {
  redis.disconnect();
  await deletePrefix(prefix);
});

describe('token cache: what it serves', () => {
  it('answers a cached token without a store call, and only for its cache life', async () => {
    const { cache, metrics, storeReads } = await sidecar({ ttlSeconds: 1 });
    const digest = newDigest();
    await cache.saveAccessToken(digest, accessToken());
    const firstRead = Date.now();
    const record = await cache.getAccessToken(digest);
    expect(record).toMatchObject({ userId: 'user-1', scopes: ['public'] });
    for (let i = 0; i < 5; i++) expect(await cache.getAccessToken(digest)).toBe(record);
    expect(storeReads()).toBe(1);
    expect(await valueOf(metrics.cacheHits)).toBe(5);
    expect(await valueOf(metrics.cacheMisses)).toBe(1);

    // Gone from Redis without a revocation message: the cache cannot know, and answers until its entry's life ends.
    await redis.del(`${prefix}at:${digest}`);
    expect(await cache.getAccessToken(digest)).toBe(record);
    await sleep(firstRead + 1_000 - Date.now() + 20);
    expect(await cache.getAccessToken(digest)).toBeNull();
    expect(storeReads()).toBe(2);
  });

  it('never answers for a token past its own expiry, however long the cache life', async () => {
    const { cache, storeReads } = await sidecar({ ttlSeconds: 3600, staleIfErrorSeconds: 3600 });
    const digest = newDigest();
    await cache.saveAccessToken(digest, accessToken({ expiresAt: Date.now() + 300 }));
    expect(await cache.getAccessToken(digest)).not.toBeNull();
    await sleep(320);
    expect(await cache.getAccessToken(digest)).toBeNull();
    // Refused by the cache itself: it knows the expiry, the store was not asked.
    expect(storeReads()).toBe(1);
  });

  it('hands out frozen records: one caller cannot change what the next one is served', async () => {
    const { cache } = await sidecar();
    const digest = newDigest();
    await cache.saveAccessToken(digest, accessToken());
    const record = (await cache.getAccessToken(digest))!;
    expect(() => record.scopes.push('admin')).toThrow(TypeError);
    expect(() => Object.assign(record, { userId: 'someone-else' })).toThrow(TypeError);
    expect(await cache.getAccessToken(digest)).toMatchObject({ userId: 'user-1', scopes: ['public'] });
  });

  it('keeps the audience in the flat frozen entry: one shared list per distinct audience, an empty one for tokens without', async () => {
    const { cache } = await sidecar();
    const audience = ['https://api.ticketing.example/api/public'];
    const [first, second, none] = [newDigest(), newDigest(), newDigest()];
    await cache.saveAccessToken(first, accessToken({ audience }));
    await cache.saveAccessToken(second, accessToken({ audience: [...audience] }));
    await cache.saveAccessToken(none, accessToken());
    const [a, b, c] = await Promise.all([cache.getAccessToken(first), cache.getAccessToken(second), cache.getAccessToken(none)]);
    expect(a!.audience).toEqual(audience);
    expect(b!.audience).toBe(a!.audience);
    expect(c!.audience).toEqual([]);
    expect(() => a!.audience.push('https://elsewhere.example')).toThrow(TypeError);
    expect(() => c!.audience.push('https://elsewhere.example')).toThrow(TypeError);
  });

  it('sends one store call for concurrent misses on the same token', async () => {
    const { cache, metrics, storeReads } = await sidecar();
    const known = newDigest();
    await cache.saveAccessToken(known, accessToken());
    const unknown = newDigest();

    const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => cache.getAccessToken(i % 2 === 0 ? known : unknown)));
    expect(answers.filter((answer) => answer === null)).toHaveLength(50);
    expect(new Set(answers.filter((answer) => answer !== null)).size).toBe(1);
    expect(storeReads()).toBe(2);
    expect(await valueOf(metrics.cacheMisses)).toBe(2);
    expect(await valueOf(metrics.cacheSharedMisses)).toBe(98);
  });
});

describe('token cache: unknown tokens', () => {
  it('remembers an unknown token, and forgets it when the token is saved through it', async () => {
    const { cache, metrics, storeReads } = await sidecar();
    const digest = newDigest();
    for (let i = 0; i < 10; i++) expect(await cache.getAccessToken(digest)).toBeNull();
    expect(storeReads()).toBe(1);
    expect(await valueOf(metrics.cacheNegativeHits)).toBe(9);

    await cache.saveAccessToken(digest, accessToken());
    expect(await cache.getAccessToken(digest)).toMatchObject({ userId: 'user-1' });
  });

  it('does not record a token as unknown from a read that began before it was saved', async () => {
    let held!: ReturnType<typeof holdingReads>;
    const { cache } = await sidecar({}, (store) => (held = holdingReads(store)).store);
    const digest = newDigest();

    const early = cache.getAccessToken(digest);
    await held.read; // Redis has answered "unknown"; the answer is on its way back
    await cache.saveAccessToken(digest, accessToken());
    held.release();
    expect(await early).toBeNull(); // it asked before the token existed
    expect(await cache.getAccessToken(digest)).toMatchObject({ userId: 'user-1' });
  });

  it('accepts a token saved on another sidecar at most negativeTtlSeconds after it refused it', async () => {
    const issuer = await sidecar({ negativeTtlSeconds: 1 });
    const gateway = await sidecar({ negativeTtlSeconds: 1 });
    const digest = newDigest();

    const refusedAt = Date.now();
    expect(await gateway.cache.getAccessToken(digest)).toBeNull();
    await issuer.cache.saveAccessToken(digest, accessToken());
    expect(await issuer.cache.getAccessToken(digest)).not.toBeNull();
    // The bound is real: until the negative entry ends, the gateway still says unknown ...
    expect(await gateway.cache.getAccessToken(digest)).toBeNull();
    // ... and not a moment longer.
    await sleep(refusedAt + 1_000 - Date.now() + 20);
    expect(await gateway.cache.getAccessToken(digest)).toMatchObject({ userId: 'user-1' });
  });

  it('keeps unknown tokens apart: a flood of them never evicts a valid token, and both stay bounded', async () => {
    const { cache, metrics, storeReads } = await sidecar({ maxEntries: 20, negativeMaxEntries: 10 });
    const valid = Array.from({ length: 20 }, newDigest);
    await Promise.all(valid.map((digest) => cache.saveAccessToken(digest, accessToken())));
    for (const digest of valid) expect(await cache.getAccessToken(digest)).not.toBeNull();
    expect(storeReads()).toBe(20);

    const flood = Array.from({ length: 500 }, newDigest);
    expect((await Promise.all(flood.map((digest) => cache.getAccessToken(digest)))).every((answer) => answer === null)).toBe(true);
    expect(storeReads()).toBe(520);
    for (const digest of valid) expect(await cache.getAccessToken(digest)).not.toBeNull();
    expect(storeReads()).toBe(520);
    expect(await valueOf(metrics.cacheEntries, { kind: 'valid' })).toBe(20);
    expect(await valueOf(metrics.cacheEntries, { kind: 'unknown' })).toBe(10);
    expect(await valueOf(metrics.cacheEvictions, { kind: 'unknown' })).toBe(490);
    expect(await valueOf(metrics.cacheEvictions, { kind: 'valid' })).toBe(0);

    // Valid tokens are bounded as well: the least recently used go.
    const more = Array.from({ length: 5 }, newDigest);
    await Promise.all(more.map((digest) => cache.saveAccessToken(digest, accessToken())));
    for (const digest of more) await cache.getAccessToken(digest);
    expect(await valueOf(metrics.cacheEntries, { kind: 'valid' })).toBe(20);
    expect(await valueOf(metrics.cacheEvictions, { kind: 'valid' })).toBe(5);
  });
});

describe('token cache: revocation', () => {
  it('drops a token revoked on another sidecar as the message arrives, for every kind of revocation', async () => {
    const issuer = await sidecar();
    const gateway = await sidecar();
    const single = newDigest();
    const ofUser = newDigest();
    const ofClient = newDigest();
    const ofFamily = newDigest();
    const untouched = newDigest();
    await issuer.cache.saveAccessToken(single, accessToken());
    await issuer.cache.saveAccessToken(ofUser, accessToken({ userId: 'user-revoked', familyId: 'family-2' }));
    await issuer.cache.saveAccessToken(ofClient, accessToken({ kind: 'application', userId: null, familyId: null, clientId: 'client-revoked' }));
    await issuer.cache.saveAccessToken(ofFamily, accessToken({ familyId: 'family-revoked', userId: 'user-2' }));
    await issuer.cache.saveAccessToken(untouched, accessToken({ userId: 'user-3', familyId: 'family-3', clientId: 'client-b' }));
    for (const digest of [single, ofUser, ofClient, ofFamily, untouched]) {
      expect(await gateway.cache.getAccessToken(digest)).not.toBeNull();
      expect(await issuer.cache.getAccessToken(digest)).not.toBeNull();
    }
    const gatewayReads = gateway.storeReads();

    const revocations: Array<[string, () => Promise<number>]> = [
      [single, () => issuer.cache.revokeAccessToken(single)],
      [ofUser, () => issuer.cache.revokeUserTokens('user-revoked')],
      [ofClient, () => issuer.cache.revokeClientTokens('client-revoked')],
      [ofFamily, () => issuer.cache.revokeFamily('family-revoked')],
    ];
    for (const [digest, revoke] of revocations) {
      expect(await revoke()).toBe(1);
      // The sidecar that revoked forgets at once ...
      expect(await issuer.cache.getAccessToken(digest)).toBeNull();
      // ... the other as soon as the message arrives (its cache life is an hour away).
      await eventually(async () => (await gateway.cache.getAccessToken(digest)) === null);
    }
    expect(await gateway.cache.getAccessToken(untouched)).not.toBeNull();
    expect(gateway.storeReads()).toBe(gatewayReads + 4);
    expect(await valueOf(gateway.metrics.revocationMessages)).toBe(4);
    expect(await observationsOf(gateway.metrics.revocationDelay)).toBe(4);
  });

  it('does not cache what a read in flight brings back after a revocation overtook it', async () => {
    const issuer = await sidecar();
    let held!: ReturnType<typeof holdingReads>;
    const gateway = await sidecar({}, (store) => (held = holdingReads(store)).store);
    const digest = newDigest();
    await issuer.cache.saveAccessToken(digest, accessToken());

    const early = gateway.cache.getAccessToken(digest);
    await held.read; // Redis has answered with the record; the answer is on its way back
    await issuer.cache.revokeAccessToken(digest);
    await eventually(async () => (await valueOf(gateway.metrics.revocationMessages)) === 1);
    held.release();
    expect(await early).not.toBeNull(); // it asked before the revocation
    expect(await gateway.cache.getAccessToken(digest)).toBeNull();
  });

  it("forgets a deleted user's and a deleted application's tokens at once", async () => {
    const { cache, store } = await sidecar();
    const userToken = newDigest();
    const appToken = newDigest();
    await store.users.create({ id: 'user-deleted', email: 'deleted@example.com', passwordHash: 'x', createdAt: 1 });
    await store.applications.put({
      clientId: 'client-deleted',
      name: 'n',
      secretDigest: null,
      redirectUris: [],
      scopes: ['public'],
      confidential: false,
      createdAt: 1,
    });
    await cache.saveAccessToken(userToken, accessToken({ userId: 'user-deleted' }));
    await cache.saveAccessToken(appToken, accessToken({ kind: 'application', userId: null, familyId: null, clientId: 'client-deleted' }));
    expect(await cache.getAccessToken(userToken)).not.toBeNull();
    expect(await cache.getAccessToken(appToken)).not.toBeNull();
    await deleteUserAndTokens(store, 'user-deleted');
    await deleteApplicationAndTokens(store, 'client-deleted');
    expect(await cache.getAccessToken(userToken)).toBeNull();
    expect(await cache.getAccessToken(appToken)).toBeNull();
  });

  it('stops listening when stopped', async () => {
    const issuer = await sidecar();
    const gateway = await sidecar();
    await gateway.cache.stop();
    await issuer.cache.revokeAccessToken(newDigest());
    await sleep(100);
    expect(await valueOf(gateway.metrics.revocationMessages)).toBe(0);
    expect(await valueOf(gateway.metrics.revocationFeedUp)).toBe(0);
  });
});
