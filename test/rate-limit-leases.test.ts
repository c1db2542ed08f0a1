import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../src/observability/metrics.js';
import { Bucket } from '../src/ratelimit/bucket.js';
import { leaseReach, READ_ONLY, type LeaseReport, type LeaseRequest, type LeaseSource } from '../src/ratelimit/lease-protocol.js';
import { leasesFor } from '../src/ratelimit/leases.js';
import { MemoryLeases } from '../src/ratelimit/memory-leases.js';
import { compilePolicy } from '../src/ratelimit/policies.js';
import type { RedisStore } from '../src/store/redis.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';
import { eventually } from './support/wait.js';

/**
 * One contract for both implementations of the lease protocol: the memory store's (this
 * process) and the Redis script (every sidecar). Then the lease's timeout path on a Redis that
 * hangs (DEBUG SLEEP): a lease whose script ran but whose answer came too late is given back
 * once, and what it reported is applied once.
 */

// So slow that the time a test takes never adds a permit: each grant is the burst's or the quota's.
const slow = compilePolicy('slow', { by: 'application', requestsPerSecond: 0.001, burst: 10 });
const daily = compilePolicy('daily', { by: 'application', requestsPerSecond: 0.001, burst: 100, requestsPerDay: 20 });
const hourly = compilePolicy('hourly', { by: 'application', requestsPerSecond: 0.001, burst: 100, requestsPerHour: 20 });
const fast = compilePolicy('fast', { by: 'application', requestsPerSecond: 1000, burst: 10 });

interface Implementation {
  name: string;
  open(): Promise<{ leases: LeaseSource; close(): Promise<void> }>;
}

const implementations: Implementation[] = [
  { name: 'memory', open: async () => ({ leases: new MemoryLeases(), close: async () => {} }) },
  {
    name: 'redis',
    async open() {
      const prefix = uniquePrefix('leases');
      const store = createTestRedisStore(prefix);
      return {
        leases: leasesFor(store.backend),
        async close() {
          await store.close();
          await deletePrefix(prefix);
        },
      };
    },
  },
];

const report = (holder: string, number: number, fields: Partial<LeaseReport> = {}): LeaseReport => ({ ...READ_ONLY, holder, report: number, ...fields });
const ask = (want: number, from: LeaseReport): LeaseRequest => ({ ...from, want });

describe.each(implementations)('the lease protocol ($name)', (implementation) => {
  let leases: LeaseSource;
  let close: () => Promise<void>;
  beforeAll(async () => {
    ({ leases, close } = await implementation.open());
  });
  afterAll(() => close());
  const key = () => `ratelimit:test:${randomUUID()}`;

  it('grants the burst at once, due now, then nothing until the next permit', async () => {
    const bucket = key();
    const first = await leases.lease(bucket, slow, ask(4, report('a', 1)));
    expect(first).toMatchObject({ granted: 4, quotaLeft: -1, quotaResetMs: 0, left: 6 });
    expect(first.startMs).toBeLessThanOrEqual(0);
    const second = await leases.lease(bucket, slow, ask(20, report('a', 2)));
    expect(second).toMatchObject({ granted: 6, left: 0 });
    const third = await leases.lease(bucket, slow, ask(1, report('b', 1)));
    expect(third.granted).toBe(0);
    // One permit every 1,000 s.
    expect(third.nextMs).toBeGreaterThan(990_000);
    expect(third.nextMs).toBeLessThanOrEqual(1_000_000);
  });

  it('reaches half a second into a fast rate, and says when the first permit past the burst is due', async () => {
    expect(leaseReach(fast)).toBe(500);
    const bucket = key();
    const first = await leases.lease(bucket, fast, ask(1000, report('a', 1)));
    expect(first.granted).toBeGreaterThanOrEqual(500);
    expect(first.granted).toBeLessThanOrEqual(520);
    expect(first.startMs).toBeLessThanOrEqual(0);
    // Right after, the next permit is about the lease's reach away, and the first one granted then is due past the burst.
    const second = await leases.lease(bucket, fast, ask(1000, report('a', 2)));
    const third = second.granted > 0 ? second : await leases.lease(bucket, fast, ask(1000, report('a', 3)));
    expect(third.startMs).toBeGreaterThan(450);
  });

  it('never grants past a quota, says how much is left and when the window ends', async () => {
    for (const policy of [daily, hourly]) {
      const bucket = key();
      const window = policy === daily ? 86_400_000 : 3_600_000;
      const first = await leases.lease(bucket, policy, ask(15, report('a', 1)));
      expect(first).toMatchObject({ granted: 15, quotaLeft: 5, quotaResetMs: 0 });
      const second = await leases.lease(bucket, policy, ask(15, report('b', 1)));
      expect(second).toMatchObject({ granted: 5, quotaLeft: 0 });
      const untilWindowEnd = window - (Date.now() % window);
      expect(Math.abs(second.quotaResetMs - untilWindowEnd)).toBeLessThan(2_000);
      expect(second.nextMs).toBe(second.quotaResetMs);
      expect((await leases.lease(bucket, policy, READ_ONLY)).quotaLeft).toBe(0);
    }
  });

  it('takes back unused permits into the windows they were granted in, and no other', async () => {
    const bucket = key();
    const first = await leases.lease(bucket, daily, ask(20, report('a', 1)));
    expect(first.quotaLeft).toBe(0);
    // Given back from an earlier day: that day's count is gone, today's keeps its 20.
    const stale = await leases.lease(bucket, daily, ask(0, report('a', 2, { returned: 8, returnedHour: first.hour, returnedDay: first.day - 1 })));
    expect(stale.quotaLeft).toBe(0);
    const back = await leases.lease(bucket, daily, ask(0, report('a', 3, { returned: 8, returnedHour: first.hour, returnedDay: first.day })));
    expect(back.quotaLeft).toBe(8);
    expect((await leases.lease(bucket, daily, ask(20, report('b', 1)))).granted).toBe(8);
  });

  it('applies a report sent again under its number once, and gives back the grant whose answer was lost', async () => {
    const bucket = key();
    const first = await leases.lease(bucket, daily, ask(8, report('a', 1)));
    const giving = report('a', 2, { returned: 3, returnedHour: first.hour, returnedDay: first.day });
    const lost = await leases.lease(bucket, daily, ask(6, giving));
    // 8 - 3 given back + 6 granted = 11.
    expect(lost).toMatchObject({ granted: 6, quotaLeft: 9 });
    // The same report again: the 3 are not given back twice, and the 6 it was granted went nowhere, so they come back.
    const again = await leases.lease(bucket, daily, ask(2, giving));
    expect(again).toMatchObject({ granted: 2, quotaLeft: 13 });
    // Another holder's report of the same number is its own.
    const other = report('b', 2, { returned: 1, returnedHour: first.hour, returnedDay: first.day });
    expect(await leases.lease(bucket, daily, ask(0, other))).toMatchObject({ granted: 0, quotaLeft: 14 });
  });

  it('keeps a decayed count of every grant, and a bucket no emptier than a reloaded policy allows', async () => {
    const bucket = key();
    const first = await leases.lease(bucket, slow, ask(10, report('a', 1)));
    expect(first.grantRate).toBeCloseTo(10, 0);
    const reloaded = compilePolicy('slow', { by: 'application', requestsPerSecond: 0.001, burst: 20 });
    const after = await leases.lease(bucket, reloaded, ask(30, report('a', 2)));
    // The old burst's 10 taken stay taken: the new burst adds 10.
    expect(after.granted).toBe(10);
    expect(after.grantRate).toBeCloseTo(20, 0);
  });

  it('answers a read of what the store holds without taking anything', async () => {
    const bucket = key();
    await leases.lease(bucket, daily, ask(4, report('a', 1)));
    const read = await leases.lease(bucket, daily, READ_ONLY);
    expect(read).toMatchObject({ granted: 0, quotaLeft: 16 });
    expect((await leases.lease(bucket, daily, READ_ONLY)).quotaLeft).toBe(16);
  });
});

describe('a bucket released (a shutdown, or a reload that replaced its policy)', () => {
  it('gives back every permit it holds, those of a lease still in flight too', async () => {
    const leases = new MemoryLeases();
    const key = `ratelimit:daily:${randomUUID()}`;
    const bucket = new Bucket(key, daily, leases, () => {}, 'sidecar.1', leaseReach(daily));
    expect(bucket.take(Date.now())).toBeNull();
    await bucket.waitForLease(Date.now());
    expect(bucket.retake(Date.now())).toBe(true);
    expect(bucket.take(Date.now())).toBeNull();
    void bucket.lease(Date.now());
    await bucket.release();
    expect((await leases.lease(key, daily, READ_ONLY)).quotaLeft).toBe(19);
  });
});

describe('a lease whose answer arrives after the command timeout (Redis hung by DEBUG SLEEP)', () => {
  let redis: ThrowawayRedis;
  let store: RedisStore;
  const prefix = uniquePrefix('leases-timeout');
  beforeAll(async () => {
    redis = await ThrowawayRedis.notStarted();
    await redis.restart(['--enable-debug-command', 'yes']);
    store = createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: 200 });
  });
  afterAll(async () => {
    await store?.close();
    await redis?.kill();
  });

  /** Hangs Redis for `seconds` (the lease sent meanwhile runs once it wakes, after its caller gave up). */
  function hang(seconds: number): Promise<unknown> {
    const client = redis.client();
    return client.call('DEBUG', 'SLEEP', String(seconds)).finally(() => client.disconnect());
  }

  async function dayCount(key: string): Promise<number> {
    const client = redis.client();
    try {
      return Number(await client.hget(`${prefix}${key}`, 'dayCount'));
    } finally {
      client.disconnect();
    }
  }

  it('gives back once when sent again under its number, and the grant the sidecar never saw goes back', async () => {
    const leases = leasesFor(store.backend);
    const key = `ratelimit:daily:${randomUUID()}`;
    const first = await leases.lease(key, daily, ask(9, report('a', 1)));
    const hung = hang(0.6);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const late = report('a', 2, { returned: 4, returnedHour: first.hour, returnedDay: first.day });
    await expect(leases.lease(key, daily, ask(7, late))).rejects.toThrow();
    await hung;
    // The script did run: 9 - 4 given back + 7 granted.
    await eventually(async () => (await dayCount(key)) === 12, 2_000);
    const again = await leases.lease(key, daily, ask(3, late));
    // 12 - 7 never received + 3 granted; the 4 are not given back twice.
    expect(again).toMatchObject({ granted: 3, quotaLeft: 12 });
    expect(await dayCount(key)).toBe(8);
  });

  it('through a bucket: a quota of 20 admits exactly 20 with a hang in the middle', async () => {
    const leases = leasesFor(store.backend);
    const key = `ratelimit:daily:${randomUUID()}`;
    const metrics = createMetrics();
    const bucket = new Bucket(key, daily, leases, (result) => metrics.rateLimitLeases.inc({ policy: 'daily', result }), 'sidecar.1', leaseReach(daily));
    let admitted = 0;
    const takeOne = async () => {
      let taken = bucket.take(Date.now());
      if (taken === null) {
        await bucket.waitForLease(Date.now());
        taken = bucket.retake(Date.now());
      }
      if (taken === true) admitted += 1;
    };
    for (let index = 0; index < 6; index += 1) await takeOne();
    const hung = hang(0.6);
    await new Promise((resolve) => setTimeout(resolve, 50));
    for (let index = 0; index < 30; index += 1) await takeOne();
    await hung;
    // Past the outage and past the lease's end: the bucket reports again, then spends what is left.
    const deadline = Date.now() + 8_000;
    while (admitted < 20 && Date.now() < deadline) {
      await takeOne();
      bucket.sweep(Date.now());
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(admitted).toBe(20);
    await bucket.release();
    expect(await dayCount(key)).toBe(20);
  }, 20_000);
});
