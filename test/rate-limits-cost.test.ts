import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../src/observability/metrics.js';
import { STORE_COMMANDS_PER_SECOND } from '../src/ratelimit/bucket.js';
import { leasesFor } from '../src/ratelimit/leases.js';
import { RateLimiter, TIER_READS_PER_SECOND } from '../src/ratelimit/limiter.js';
import type { RedisStore } from '../src/store/redis.js';
import { verifiedToken } from '../src/store/verified-token.js';
import { APPLICATION_TOKEN, startUpstream } from './support/gateway.js';
import { registerApplication, startTokengate, type RunningTokengate } from './support/instance.js';
import { admittedByPerfectLimiter, countIn, momentsIn, runPaced } from './support/paced-load.js';
import { createTestRedisStore } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';

/**
 * What an application that stays over its limit costs the store: four sidecars, one application
 * at three times its policy, split 70/10/10/10, for 30 s, on a Redis of the test's own whose
 * commands are counted (INFO commandstats, every command a script runs included). Whatever the
 * policy's rate (20/s and 2,000/s), Redis runs at most STORE_COMMANDS_PER_SECOND per sidecar
 * (and the tier reads),
 * and every 10 s window admits 0.9x to 1.05x of the policy, plus one burst.
 *
 * The 20/s run goes through four gateways over HTTP. The 2,000/s run (6,000 requests a second)
 * drives four sidecars' RateLimiters directly, each on its own connections to Redis: the test
 * machine cannot send that over HTTP beside the sidecars serving it.
 */

const SPLIT = [0.7, 0.1, 0.1, 0.1];
const RUN_MS = 30_000;
const WINDOW_MS = 10_000;

const closing: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closing.reverse()) await close();
});

async function commandsOf(redis: ThrowawayRedis): Promise<number> {
  const client = redis.client();
  try {
    const stats = await client.info('commandstats');
    let calls = 0;
    for (const match of stats.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) if (match[1] !== 'info') calls += Number(match[2]);
    return calls;
  } finally {
    client.disconnect();
  }
}

/**
 * Each window admitted at most the policy (plus its burst and 5 %), and at least 0.9x what a
 * perfect limiter admits of the same requests as they were sent: a busy machine sends late
 * requests in bunches, past any burst, so a fixed share of the policy would judge the machine.
 */
function expectWithinPolicy(windows: number[], sentAtMs: readonly number[], rate: number, burst: number): void {
  const perWindow = (rate * WINDOW_MS) / 1000;
  const perfect = admittedByPerfectLimiter(sentAtMs, rate, burst);
  windows.forEach((admitted, index) => {
    const reference = momentsIn(perfect, index * WINDOW_MS, (index + 1) * WINDOW_MS);
    expect(admitted, `window ${index}: a perfect limiter admits ${reference}`).toBeGreaterThanOrEqual(0.9 * reference);
    expect(admitted, `window ${index}`).toBeLessThanOrEqual(1.05 * perWindow + burst);
    expect(reference, `window ${index}: what a perfect limiter admits`).toBeGreaterThanOrEqual(0.5 * perWindow);
  });
}

function report(line: string): void {
  if (process.env.TOKENGATE_RATE_LIMIT_REPORT) process.stdout.write(`${line}\n`);
}

describe('an application at 3x its policy across four sidecars', () => {
  it('costs Redis at most the bound per sidecar at 20/s, through four gateways', async () => {
    const rate = 20;
    const burst = 5;
    const redis = await ThrowawayRedis.start();
    closing.push(() => redis.kill());
    const upstream = await startUpstream((_request, response) => response.end('ok'));
    closing.push(() => upstream.close());
    const config = {
      rateLimits: { partners: { requestsPerSecond: rate, burst } },
      routes: [{ path: '/api/events', token: 'application', upstream: upstream.url, rateLimit: 'partners' }],
    };
    const prefix = 'tokengate-test:rl-cost:';
    const sidecars: RunningTokengate[] = [];
    for (const _share of SPLIT) {
      const store = createTestRedisStore(prefix, { url: redis.url });
      sidecars.push(await startTokengate('rl-cost', { config, store, ...(sidecars[0] === undefined ? {} : { sharing: sidecars[0] }) }));
    }
    closing.push(async () => {
      for (const sidecar of sidecars) await sidecar.close();
    });
    const { clientId } = await registerApplication(sidecars[0]!.store);
    const token = await sidecars[0]!.issue({ ...APPLICATION_TOKEN, clientId });
    const clients = sidecars.map((sidecar, index) => ({
      rate: 3 * rate * SPLIT[index]!,
      url: `${sidecar.baseUrl}/api/events`,
      headers: { authorization: `Bearer ${token}` },
    }));
    const before = await commandsOf(redis);
    const results = await runPaced(clients, RUN_MS);
    const perSecond = ((await commandsOf(redis)) - before) / (RUN_MS / 1000);
    expect(results.filter((result) => result.status !== 200 && result.status !== 429)).toEqual([]);
    const windows = [0, 1, 2].map((index) => countIn(results, 200, index * WINDOW_MS, (index + 1) * WINDOW_MS));
    report(`rate limits at 3x of 20/s, 4 sidecars over HTTP: ${perSecond.toFixed(1)} Redis commands/s; admitted per 10 s ${windows.join(', ')}`);
    // And each sidecar reads the application's tier; a token check is a store read until the cache holds it (once per sidecar).
    expect(perSecond).toBeLessThanOrEqual(SPLIT.length * (STORE_COMMANDS_PER_SECOND + TIER_READS_PER_SECOND));
    expectWithinPolicy(
      windows,
      results.map((result) => result.sentAtMs),
      rate,
      burst,
    );
  }, 90_000);

  it('costs Redis at most the bound per sidecar at 2,000/s, four RateLimiters driven directly', async () => {
    const rate = 2_000;
    const burst = 200;
    const redis = await ThrowawayRedis.start();
    closing.push(() => redis.kill());
    const config = { rateLimits: { partners: { by: 'application' as const, requestsPerSecond: rate, burst } } };
    const limiters = SPLIT.map(() => {
      const store: RedisStore = createTestRedisStore('tokengate-test:rl-cost-direct:', { url: redis.url });
      const limiter = new RateLimiter(config, leasesFor(store.backend), async () => null, createMetrics(), pino({ level: 'silent' }));
      closing.push(async () => {
        await limiter.close();
        await store.close();
      });
      return limiter;
    });
    const token = verifiedToken({ ...APPLICATION_TOKEN, clientId: 'over-its-limit', issuedAt: Date.now(), expiresAt: Date.now() + 3_600_000 });
    const limits = limiters.map((limiter) => limiter.forRoute('/api/events', 'partners'));
    const admittedAt: number[] = [];
    const sentAt: number[] = [];
    const refusedBy = { count: 0 };
    // Each sidecar's share of 3x the rate, sent every 5 ms (a loaded machine's late ticks catch up).
    const started = performance.now();
    const sent = SPLIT.map(() => 0);
    const before = await commandsOf(redis);
    const pending = new Set<Promise<void>>();
    const record = (outcome: unknown) => {
      if (outcome !== null && typeof outcome === 'object' && 'refusal' in outcome) refusedBy.count += 1;
      else admittedAt.push(performance.now() - started);
    };
    await new Promise<void>((resolve) => {
      const tick = setInterval(() => {
        const elapsed = performance.now() - started;
        if (elapsed >= RUN_MS) {
          clearInterval(tick);
          resolve();
          return;
        }
        limiters.forEach((limiter, index) => {
          const due = Math.floor((3 * rate * SPLIT[index]! * elapsed) / 1000);
          for (; sent[index]! < due; sent[index]! += 1) {
            sentAt.push(elapsed);
            const outcome = limiter.admit(limits[index]!, token);
            if (outcome instanceof Promise) {
              const waiting = outcome.then(record).finally(() => pending.delete(waiting));
              pending.add(waiting);
            } else record(outcome);
          }
        });
      }, 5);
    });
    await Promise.all(pending);
    const perSecond = ((await commandsOf(redis)) - before) / (RUN_MS / 1000);
    const windows = [0, 1, 2].map((index) => admittedAt.filter((at) => at >= index * WINDOW_MS && at < (index + 1) * WINDOW_MS).length);
    report(
      `rate limits at 3x of 2,000/s, 4 RateLimiters: ${perSecond.toFixed(1)} Redis commands/s; admitted per 10 s ${windows.join(', ')}; refused ${refusedBy.count}`,
    );
    expect(sent.reduce((sum, count) => sum + count, 0)).toBeGreaterThan(0.95 * 3 * rate * (RUN_MS / 1000));
    expect(perSecond).toBeLessThanOrEqual(SPLIT.length * STORE_COMMANDS_PER_SECOND);
    expectWithinPolicy(windows, sentAt, rate, burst);
  }, 90_000);
});
