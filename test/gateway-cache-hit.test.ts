import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest } from '../src/token/token-value.js';
import { countingStore, startUpstream, USER_TOKEN, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { valueOf } from './support/metrics.js';

/**
 * The gateway asks the token cache before the tag check, so a cached token costs no HMAC.
 * What must not follow from that: a value without this deployment's tag getting in through the
 * cache, or a revoked token staying in.
 */

let upstream: Upstream;
let gateway: RunningTokengate;
let calls: { getAccessToken: number };

beforeAll(async () => {
  upstream = await startUpstream();
  gateway = await startTokengate('gateway-cache-hit', {
    config: { routes: [{ path: '/api/public/me', methods: ['GET'], token: 'user', scopes: ['public'], upstream: upstream.url }] },
    wrap(store) {
      const counting = countingStore(store);
      calls = counting.calls;
      return counting.store;
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
});

const status = async (token: string) => (await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } })).status;
const cacheHits = () => valueOf(gateway.tokengate.context.metrics.cacheHits);
const forgedTokens = () => valueOf(gateway.tokengate.context.metrics.forgedTokens);

describe('the cache-hit path', () => {
  it('answers a cached token from the cache alone: no store call, counted as a hit', async () => {
    const token = await gateway.issue();
    expect(await status(token)).toBe(200);
    const [storeCalls, hits] = [calls.getAccessToken, await cacheHits()];
    expect([await status(token), await status(token)]).toEqual([200, 200]);
    expect(calls.getAccessToken - storeCalls).toBe(0);
    expect((await cacheHits()) - hits).toBe(2);
  });

  it('keeps refusing a value the store holds under another tag key: it never gets into the cache', async () => {
    // A record written behind the gateway's back for a value minted with a foreign key (a forger
    // with write access to Redis, or a token from before a tag key change).
    const foreign = createTokenMinter(decodeTagKey(generateTagKey())).mint();
    const now = Date.now();
    await gateway.store.tokens.saveAccessToken(tokenDigest(foreign), { ...USER_TOKEN, scopes: ['public'], issuedAt: now, expiresAt: now + 3_600_000 });
    const [storeCalls, forged, hits] = [calls.getAccessToken, await forgedTokens(), await cacheHits()];
    for (let i = 0; i < 3; i++) expect(await status(foreign)).toBe(401);
    expect(calls.getAccessToken - storeCalls).toBe(0);
    expect((await forgedTokens()) - forged).toBe(3);
    expect((await cacheHits()) - hits).toBe(0);
    expect(gateway.tokengate.context.cache!.peek(tokenDigest(foreign))).toBeUndefined();
  });

  it('refuses a cached token as soon as it is revoked, though hits skip the tag check', async () => {
    const token = await gateway.issue();
    expect([await status(token), await status(token)]).toEqual([200, 200]);
    await gateway.tokengate.context.store.tokens.revokeAccessToken(tokenDigest(token));
    expect(await status(token)).toBe(401);
  });
});
