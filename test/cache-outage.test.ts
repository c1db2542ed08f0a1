import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildTokengate } from '../src/app.js';
import { parseConfig } from '../src/load-config.js';
import type { CacheConfig } from '../src/config/schema.js';
import { createMetrics, type Metrics } from '../src/observability/metrics.js';
import { CachedTokens, cached } from '../src/store/cached.js';
import { StoreUnavailableError, type AccessTokenRecord, type Store } from '../src/store/store.js';
import { Redis } from 'ioredis';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest } from '../src/token/token-value.js';
import { USER_TOKEN, countingStore, startUpstream } from './support/gateway.js';
import { startTokengate } from './support/instance.js';
import { valueOf } from './support/metrics.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';
import { eventually, sleep } from './support/wait.js';

// These tests kill, freeze and restart Redis, so they run against a redis-server of their own.
const COMMAND_TIMEOUT_MS = 300;
/** What "answered within the command timeout" allows on a busy test machine. */
const MARGIN_MS = 400;

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

let redis: ThrowawayRedis;
let prefix: string;
const opened: Array<{ close(): Promise<void> }> = [];

interface Sidecar {
  cache: CachedTokens;
  metrics: Metrics;
  /** getAccessToken calls that reached the real Redis store behind the cache. */
  storeReads(): number;
}

async function sidecar(config: Partial<CacheConfig> = {}): Promise<Sidecar> {
  const store = createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS });
  const counted = countingStore(store);
  const metrics = createMetrics();
  const cache = cached(counted.store.tokens, { ...defaults, ...config }, metrics);
  await cache.subscribed;
  opened.push(closing(cache, store));
  return { cache, metrics, storeReads: () => counted.calls.getAccessToken };
}

/** What closes a cache and the store under it. */
function closing(cache: CachedTokens, store: { close(): Promise<void> }): { close(): Promise<void> } {
  return {
    async close() {
      await cache.stop();
      await store.close();
    },
  };
}

/** How a lookup ended and how long it took. */
async function outcome(lookup: Promise<AccessTokenRecord | null>): Promise<{ answer: 'valid' | 'unknown' | 'unavailable' | 'other'; ms: number }> {
  const started = performance.now();
  try {
    const record = await lookup;
    return { answer: record === null ? 'unknown' : 'valid', ms: performance.now() - started };
  } catch (error) {
    return { answer: error instanceof StoreUnavailableError ? 'unavailable' : 'other', ms: performance.now() - started };
  }
}

beforeAll(async () => {
  redis = await ThrowawayRedis.start();
});
beforeEach(() => {
  prefix = uniquePrefix('cache-outage');
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((each) => each.close()));
  // Every test leaves a running, empty server to the next one.
  await redis.kill();
  await redis.restart();
});
afterAll(async () => {
  await redis.kill();
});

describe('token cache: the revocation subscription', () => {
  it('clears the whole cache when its subscription was cut and is back, then hears revocations again', async () => {
    const issuer = await sidecar();
    const gateway = await sidecar();
    const missed = newDigest();
    const later = newDigest();
    await issuer.cache.saveAccessToken(missed, accessToken());
    await issuer.cache.saveAccessToken(later, accessToken());
    expect(await gateway.cache.getAccessToken(missed)).not.toBeNull();

    const admin = redis.client();
    // A revocation the gateway cannot hear of (the record goes, no message), then the cut.
    await admin.del(`${prefix}at:${missed}`);
    await admin.client('KILL', 'TYPE', 'pubsub');
    await eventually(async () => (await valueOf(gateway.metrics.cacheResets)) === 1);
    expect(await valueOf(gateway.metrics.revocationFeedUp)).toBe(1);
    expect(await valueOf(gateway.metrics.cacheEntries, { kind: 'valid' })).toBe(0);
    expect(await gateway.cache.getAccessToken(missed)).toBeNull();

    // Subscribed again: the next revocation arrives as before.
    expect(await gateway.cache.getAccessToken(later)).not.toBeNull();
    await issuer.cache.revokeAccessToken(later);
    await eventually(async () => (await gateway.cache.getAccessToken(later)) === null);
    admin.disconnect();
  });

  it('while its subscription is down, asks the store before answering, and answers alone only when the store cannot', async () => {
    const gateway = await sidecar();
    const revoked = newDigest();
    const valid = newDigest();
    await gateway.cache.saveAccessToken(revoked, accessToken());
    await gateway.cache.saveAccessToken(valid, accessToken());
    expect(await gateway.cache.getAccessToken(revoked)).not.toBeNull();
    expect(await gateway.cache.getAccessToken(valid)).not.toBeNull();
    const reads = gateway.storeReads();

    // Keep the subscriber out: no room for it to reconnect, while the command connection stays.
    const admin = redis.client();
    const connected = Number(/connected_clients:(\d+)/.exec(await admin.info('clients'))![1]);
    await admin.config('SET', 'maxclients', String(connected - 1));
    await admin.client('KILL', 'TYPE', 'pubsub');
    await eventually(async () => (await valueOf(gateway.metrics.revocationFeedUp)) === 0);
    await admin.del(`${prefix}at:${revoked}`);

    expect(await gateway.cache.getAccessToken(revoked)).toBeNull();
    expect(await gateway.cache.getAccessToken(valid)).not.toBeNull();
    expect(gateway.storeReads()).toBe(reads + 2);

    // The store is gone too: then nothing can be revoked through it either, and the cache answers.
    admin.disconnect();
    await redis.kill();
    expect((await outcome(gateway.cache.getAccessToken(valid))).answer).toBe('valid');
    expect(await valueOf(gateway.metrics.cacheStaleHits)).toBe(1);
  });
});

describe('token cache: Redis outages', () => {
  it('serves cached tokens, fails uncached ones fast, and recovers by itself when Redis is killed and restarted under traffic', async () => {
    const issuer = await sidecar();
    // Traffic may find a token unknown between the restart and the issuer saving it again.
    const gateway = await sidecar({ negativeTtlSeconds: 1 });
    const cachedToken = newDigest();
    // Valid tokens the gateway has not seen yet: each round of traffic presents a new one.
    const unseen = Array.from({ length: 1_000 }, newDigest);
    // Saved a hundred at a time: a thousand writes at once can outlast the command timeout on a loaded machine.
    const tokens = [cachedToken, ...unseen];
    for (let start = 0; start < tokens.length; start += 100) {
      await Promise.all(tokens.slice(start, start + 100).map((digest) => issuer.cache.saveAccessToken(digest, accessToken())));
    }
    expect(await gateway.cache.getAccessToken(cachedToken)).not.toBeNull();

    let phase = 'up' as 'up' | 'down' | 'back';
    const seen: Array<{ phase: typeof phase; token: 'cached' | 'uncached' | 'unknown'; answer: string; ms: number }> = [];
    let running = true;
    const traffic = (async () => {
      for (let round = 0; running && round < unseen.length; round++) {
        const now = phase;
        const results = await Promise.all([
          outcome(gateway.cache.getAccessToken(cachedToken)),
          outcome(gateway.cache.getAccessToken(unseen[round]!)),
          outcome(gateway.cache.getAccessToken(newDigest())),
        ]);
        seen.push(...(['cached', 'uncached', 'unknown'] as const).map((token, i) => ({ phase: now, token, ...results[i]! })));
        await sleep(5);
      }
    })();

    await sleep(50);
    await redis.kill();
    phase = 'down';
    await sleep(600);
    // Unknown while Redis is down is "unavailable", never remembered as unknown.
    const during = newDigest();
    expect((await outcome(gateway.cache.getAccessToken(during))).answer).toBe('unavailable');

    phase = 'back';
    await redis.restart();
    // Restarted empty: the issuer saves its tokens again, nobody restarts the sidecars.
    await eventually(async () => {
      try {
        for (const digest of [cachedToken, unseen.at(-1)!, during]) await issuer.cache.saveAccessToken(digest, accessToken());
        return true;
      } catch {
        return false;
      }
    });
    // The gateway's own connection is back too (each process reconnects on its own schedule).
    await eventually(async () => (await outcome(gateway.cache.getAccessToken(newDigest()))).answer === 'unknown');
    // A token issued now is accepted at once; the ones saved again within the negative TTL.
    const issuedAfter = newDigest();
    await issuer.cache.saveAccessToken(issuedAfter, accessToken());
    expect(await gateway.cache.getAccessToken(issuedAfter)).not.toBeNull();
    await eventually(async () => (await outcome(gateway.cache.getAccessToken(unseen.at(-1)!))).answer === 'valid');
    await eventually(async () => (await outcome(gateway.cache.getAccessToken(during))).answer === 'valid');
    await eventually(async () => (await outcome(gateway.cache.getAccessToken(cachedToken))).answer === 'valid');
    await eventually(async () => (await valueOf(gateway.metrics.cacheResets)) === 1);
    await sleep(50);
    running = false;
    await traffic;

    const down = seen.filter((each) => each.phase === 'down');
    expect(down.length).toBeGreaterThan(10);
    expect(down.filter((each) => each.token === 'cached').every((each) => each.answer === 'valid')).toBe(true);
    expect(down.filter((each) => each.token !== 'cached').every((each) => each.answer === 'unavailable')).toBe(true);
    expect(seen.filter((each) => each.answer === 'other')).toEqual([]);
    expect(Math.max(...seen.map((each) => each.ms))).toBeLessThan(COMMAND_TIMEOUT_MS + MARGIN_MS);
    expect(seen.filter((each) => each.phase === 'back' && each.token === 'cached').at(-1)?.answer).toBe('valid');
    expect(await valueOf(gateway.metrics.storeUp)).toBe(1);
  });

  it('starts while Redis is down without waiting for it, and caches once it is up', async () => {
    await redis.kill();
    const metrics = createMetrics();
    const store = createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS });
    const cache = cached(store.tokens, defaults, metrics);
    opened.push(closing(cache, store));
    const digest = newDigest();
    const first = await outcome(cache.getAccessToken(digest));
    expect(first.answer).toBe('unavailable');
    expect(first.ms).toBeLessThan(COMMAND_TIMEOUT_MS + MARGIN_MS);
    expect(await valueOf(metrics.revocationFeedUp)).toBe(0);

    await redis.restart();
    await cache.subscribed;
    expect(await valueOf(metrics.revocationFeedUp)).toBe(1);
    await cache.saveAccessToken(digest, accessToken());
    expect(await cache.getAccessToken(digest)).not.toBeNull();
    expect(await cache.getAccessToken(digest)).not.toBeNull();
    expect(await valueOf(metrics.cacheHits)).toBe(1);
  });

  it('answers within the command timeout when Redis hangs (connection open, no replies)', async () => {
    const gateway = await sidecar();
    const cachedToken = newDigest();
    const uncachedToken = newDigest();
    for (const digest of [cachedToken, uncachedToken]) await gateway.cache.saveAccessToken(digest, accessToken());
    expect(await gateway.cache.getAccessToken(cachedToken)).not.toBeNull();

    redis.pause();
    try {
      const [uncached, cachedResult] = await Promise.all([
        outcome(gateway.cache.getAccessToken(uncachedToken)),
        outcome(gateway.cache.getAccessToken(cachedToken)),
      ]);
      expect(uncached.answer).toBe('unavailable');
      expect(uncached.ms).toBeGreaterThanOrEqual(COMMAND_TIMEOUT_MS - 5);
      expect(uncached.ms).toBeLessThan(COMMAND_TIMEOUT_MS + MARGIN_MS);
      expect(cachedResult.answer).toBe('valid');
      expect(await valueOf(gateway.metrics.storeUp)).toBe(0);
    } finally {
      redis.resume();
    }
    expect(await gateway.cache.getAccessToken(uncachedToken)).not.toBeNull();
  });

  it('serves a cached token past its cache life only with staleIfErrorSeconds, and never past its own expiry', async () => {
    const strict = await sidecar({ ttlSeconds: 1 });
    const lenient = await sidecar({ ttlSeconds: 1, staleIfErrorSeconds: 1 });
    const longLived = newDigest();
    const shortLived = newDigest();
    await strict.cache.saveAccessToken(longLived, accessToken());
    await strict.cache.saveAccessToken(shortLived, accessToken({ expiresAt: Date.now() + 1_400 }));
    const cachedAt = Date.now();
    for (const { cache } of [strict, lenient]) {
      expect(await cache.getAccessToken(longLived)).not.toBeNull();
      expect(await cache.getAccessToken(shortLived)).not.toBeNull();
    }
    await redis.kill();

    await sleep(cachedAt + 1_100 - Date.now());
    expect((await outcome(strict.cache.getAccessToken(longLived))).answer).toBe('unavailable');
    expect((await outcome(lenient.cache.getAccessToken(longLived))).answer).toBe('valid');
    expect((await outcome(lenient.cache.getAccessToken(shortLived))).answer).toBe('valid');
    expect(await valueOf(lenient.metrics.cacheStaleHits)).toBe(2);

    await sleep(cachedAt + 1_450 - Date.now());
    expect((await outcome(lenient.cache.getAccessToken(shortLived))).answer).toBe('unknown');
    await sleep(cachedAt + 2_050 - Date.now());
    expect((await outcome(lenient.cache.getAccessToken(longLived))).answer).toBe('unavailable');
  });

  it('does not serve a token whose expiry passed while a hung store was being asked', async () => {
    const { cache } = await sidecar({ ttlSeconds: 1, staleIfErrorSeconds: 60 });
    const digest = newDigest();
    const cachedAt = Date.now();
    await cache.saveAccessToken(digest, accessToken({ expiresAt: cachedAt + 1_200 }));
    expect(await cache.getAccessToken(digest)).not.toBeNull();
    await sleep(cachedAt + 1_050 - Date.now());
    redis.pause();
    try {
      // Past its cache life, so the store is asked; it answers nothing, and meanwhile the token expires.
      expect((await outcome(cache.getAccessToken(digest))).answer).toBe('unknown');
    } finally {
      redis.resume();
    }
  });
});

describe('redis store: a command that failed stays failed', () => {
  // ioredis keeps a command that timed out, and sends it anyway once Redis is back: a write its
  // caller was told had failed (a consumed code, a counter) would then be applied behind its back.
  async function expectNotApplied(store: Store, digest: string): Promise<void> {
    await redis.restart();
    await eventually(
      async () =>
        await store.ping().then(
          () => true,
          () => false,
        ),
    );
    await sleep(100);
    const admin = redis.client();
    expect(await admin.exists(`${prefix}at:${digest}`, `${prefix}counter:attempts`)).toBe(0);
    admin.disconnect();
  }

  it('when it was sent while Redis was down', async () => {
    const store = createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: 100 });
    opened.push(store);
    await store.ping();
    const digest = newDigest();
    await redis.kill();
    // Between ioredis's reconnect attempts 2 (t+300 ms, which flushes its queue with an error)
    // and 3 (t+700 ms), so that Redis is back for attempt 3.
    await sleep(350);
    const failures = await Promise.allSettled([store.tokens.saveAccessToken(digest, accessToken()), store.counters.increment('attempts', 60_000)]);
    expect(failures.map((failure) => failure.status === 'rejected' && failure.reason instanceof StoreUnavailableError)).toEqual([true, true]);
    await expectNotApplied(store, digest);
  });

  it('when it was written but not answered before the connection dropped', async () => {
    const store = createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS });
    opened.push(store);
    await store.ping();
    const digest = newDigest();
    redis.pause();
    await expect(store.tokens.saveAccessToken(digest, accessToken())).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(store.counters.increment('attempts', 60_000)).rejects.toBeInstanceOf(StoreUnavailableError);
    await redis.kill();
    await expectNotApplied(store, digest);
  });
});

describe('tokengate with the cache: wiring and readiness', () => {
  const config = (cacheEnabled: boolean) =>
    parseConfig(
      [
        'server: { host: 127.0.0.1, port: 0 }',
        'admin: { host: 127.0.0.1, port: 0 }',
        'issuer: { issuerUrl: "http://localhost:8080" }',
        `store: { driver: redis, url: "${'$'}{REDIS_URL}", keyPrefix: "${'$'}{PREFIX}", commandTimeoutMs: ${COMMAND_TIMEOUT_MS} }`,
        `cache: { enabled: ${cacheEnabled} }`,
        'logging: { level: silent }',
      ].join('\n'),
      'test.yaml',
      { REDIS_URL: redis.url, PREFIX: prefix },
    );

  it('reads tokens through the cache when it is enabled, and not otherwise', async () => {
    const withCache = await buildTokengate(config(true));
    const without = await buildTokengate(config(false));
    opened.push(withCache, without);
    expect(withCache.context.store.tokens).toBeInstanceOf(CachedTokens);
    expect(without.context.store.tokens).not.toBeInstanceOf(CachedTokens);
  });

  it('is unready while Redis is down, says so within the command timeout, and ready again when it is back', async () => {
    const tokengate = await buildTokengate(config(true));
    opened.push(tokengate);
    expect((await tokengate.ops.inject('/readyz')).statusCode).toBe(200);

    await redis.kill();
    const started = performance.now();
    const down = await tokengate.ops.inject('/readyz');
    expect(performance.now() - started).toBeLessThan(COMMAND_TIMEOUT_MS + MARGIN_MS);
    expect(down.statusCode).toBe(503);
    expect(down.json()).toEqual({ status: 'unavailable', store: 'redis', reason: 'store_unreachable' });
    expect(await valueOf(tokengate.context.metrics.storeUp)).toBe(0);

    await redis.restart();
    await eventually(async () => (await tokengate.ops.inject('/readyz')).statusCode === 200);
    expect(await valueOf(tokengate.context.metrics.storeUp)).toBe(1);
  });
});

describe('the gateway when Redis comes back but cannot answer commands yet', () => {
  it('clears its cache only once the store answers again: no 503 for a cached valid token around a restart', async () => {
    // Redis restarts accepting the revocation feed's SUBSCRIBE but refusing the commands the
    // store needs (an ACL takes them from the default user): the feed is back before the store
    // is. A second user, the operator's, can still write.
    const operator = 'operator:operator-password';
    const operatorUrl = redis.url.replace('redis://', `redis://${operator}@`);
    const upstream = await startUpstream();
    const gateway = await startTokengate('cache-outage-restart', {
      config: { routes: [{ path: '/api/public/me', methods: ['GET'], token: 'user', scopes: ['public'], upstream: upstream.url }] },
      store: createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS }),
    });
    opened.push(gateway, upstream);
    const tokens = await Promise.all(Array.from({ length: 10 }, () => gateway.issue()));
    const status = async (token: string) => {
      const response = await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
      await response.arrayBuffer();
      return response.status;
    };
    for (const token of tokens) expect(await status(token)).toBe(200);

    const statuses = new Map<number, number>();
    let running = true;
    const traffic = (async () => {
      while (running) {
        for (const code of await Promise.all(tokens.map(status))) statuses.set(code, (statuses.get(code) ?? 0) + 1);
        await sleep(5);
      }
    })();
    const admin = new Redis(operatorUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
    admin.on('error', () => {});
    let resetsWhileRefused: number;
    try {
      await sleep(100);
      await redis.kill();
      await sleep(300);
      await redis.restart(
        [
          '--user',
          'default',
          'on',
          'nopass',
          '~*',
          '&*',
          '+@all',
          '-get',
          '-ping',
          '-evalsha',
          '--user',
          'operator',
          'on',
          '>operator-password',
          '~*',
          '&*',
          '+@all',
        ],
        operatorUrl,
      );
      // Restarted empty: the operator's store saves the tokens again (as the issuer would).
      const restorer = createTestRedisStore(prefix, { url: operatorUrl });
      opened.push(restorer);
      const now = Date.now();
      await Promise.all(
        tokens.map((token) =>
          restorer.tokens.saveAccessToken(tokenDigest(token), { ...USER_TOKEN, scopes: ['public'], issuedAt: now, expiresAt: now + 3_600_000 }),
        ),
      );
      await admin.connect();
      await eventually(async () => Number(((await admin.call('PUBSUB', 'NUMSUB', `${prefix}revocations`)) as [string, number])[1]) === 1, 5_000);
      // The feed is back, the store is not: the cache keeps answering for what it holds.
      await sleep(500);
      resetsWhileRefused = await valueOf(gateway.tokengate.context.metrics.cacheResets);
      await admin.call('ACL', 'SETUSER', 'default', '+get', '+ping', '+evalsha');
      await eventually(async () => (await valueOf(gateway.tokengate.context.metrics.cacheResets)) === 1, 5_000);
      await sleep(100);
    } finally {
      running = false;
      await traffic;
      admin.disconnect();
    }

    expect(statuses.get(200)).toBeGreaterThan(50);
    expect(Object.fromEntries(statuses)).toEqual({ 200: statuses.get(200) });
    expect(resetsWhileRefused).toBe(0);
  });
});

describe('the gateway while Redis is killed and restarted under traffic', () => {
  it('keeps answering: cached tokens 200, others 503 + Retry-After within the command timeout, never 401 for a valid token; recovers without a restart', async () => {
    const upstream = await startUpstream();
    const gateway = await startTokengate('cache-outage-gateway', {
      config: { routes: [{ path: '/api/public/me', methods: ['GET'], token: 'user', scopes: ['public'], upstream: upstream.url }] },
      store: createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: COMMAND_TIMEOUT_MS }),
    });
    opened.push(gateway, upstream);
    const request = async (token: string) => {
      const started = performance.now();
      const response = await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
      await response.arrayBuffer();
      return { status: response.status, retryAfter: response.headers.get('retry-after'), ms: performance.now() - started };
    };
    const cachedToken = await gateway.issue();
    const unseen = await Promise.all(Array.from({ length: 500 }, () => gateway.issue()));
    expect((await request(cachedToken)).status).toBe(200);

    let phase = 'up' as 'up' | 'down' | 'back';
    const seen: Array<{ phase: typeof phase; token: 'cached' | 'uncached' | 'unknown'; status: number; retryAfter: string | null; ms: number }> = [];
    let running = true;
    const traffic = (async () => {
      for (let round = 0; running && round < unseen.length; round++) {
        const now = phase;
        const results = await Promise.all([request(cachedToken), request(unseen[round]!), request(gateway.tokengate.context.minter.mint())]);
        seen.push(...(['cached', 'uncached', 'unknown'] as const).map((token, i) => ({ phase: now, token, ...results[i]! })));
      }
    })();

    await sleep(100);
    await redis.kill();
    phase = 'down';
    // Long enough to see a few rounds of requests, however busy the machine.
    await eventually(() => seen.filter((each) => each.phase === 'down').length > 30, 15_000);
    phase = 'back';
    await redis.restart();
    // Restarted empty: a token issued now is accepted without restarting the gateway.
    let fresh = '';
    await eventually(async () => {
      try {
        fresh = await gateway.issue();
        return true;
      } catch {
        return false;
      }
    });
    await eventually(async () => (await request(fresh)).status === 200);
    running = false;
    await traffic;

    const during = seen.filter((each) => each.phase === 'down');
    expect(during.length).toBeGreaterThan(20);
    expect(during.filter((each) => each.token === 'cached').every((each) => each.status === 200)).toBe(true);
    expect(during.filter((each) => each.token !== 'cached').every((each) => each.status === 503 && each.retryAfter !== null)).toBe(true);
    expect(seen.filter((each) => each.phase !== 'back' && each.token !== 'unknown' && each.status === 401)).toEqual([]);
    expect(seen.filter((each) => each.status >= 500 && each.status !== 503)).toEqual([]);
    expect(Math.max(...seen.map((each) => each.ms))).toBeLessThan(COMMAND_TIMEOUT_MS + MARGIN_MS);
    expect((await gateway.tokengate.ops.inject('/readyz')).statusCode).toBe(200);
  });
});
