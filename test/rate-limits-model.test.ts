import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Bucket, LAPSE_MS, LEASE_MS, QUOTA_RECHECK_MS, STORE_RETRY_MS } from '../src/ratelimit/bucket.js';
import { leaseReach, READ_ONLY, type LeaseAnswer, type LeaseRequest, type LeaseSource } from '../src/ratelimit/lease-protocol.js';
import { SWEEP_MS } from '../src/ratelimit/limiter.js';
import { MemoryLeases } from '../src/ratelimit/memory-leases.js';
import { compilePolicy, type Policy } from '../src/ratelimit/policies.js';
import { holds, PROPERTY_TIMEOUT } from './support/properties.js';

/**
 * The rate limiter's model, driven by random schedules: several sidecars' buckets of one budget
 * on one store (the lease protocol of the memory store, on a simulated clock), requests at
 * random moments, a store that goes away, or runs a lease and loses its answer (a command
 * timeout), sidecars restarted or killed. Whatever the schedule:
 * - a quota is never exceeded;
 * - in any second in which no sidecar admitted alone (the store away), the admitted requests
 *   are at most the policy's rate over a second and LAPSE_MS, plus its burst, plus one;
 * - once every sidecar is quiet and the store answers, every permit not admitted is back in the
 *   store within LEASE_MS + SWEEP_MS of its lease, but those a sidecar held when it was killed
 *   (or stopped while the store was away); and a sidecar
 *   refused for the quota is admitted again within QUOTA_RECHECK_MS of their return.
 */

const KEY = 'ratelimit:model:app';
/** The simulated clock starts 10 s into a UTC hour, so a schedule (at most a minute) stays in one hour and one day. */
const START = Date.UTC(2026, 10, 26, 3, 0, 10);

type StoreMode = 'up' | 'down' | 'loses answers';

/** The store as the sidecars reach it: the memory store's leases, or no answer, or the lease applied and its answer lost. */
class SimulatedStore implements LeaseSource {
  mode: StoreMode = 'up';
  /** Per holder, a grant the store made whose answer was lost and not yet given back by a report sent again. */
  readonly lostGrants = new Map<string, number>();
  constructor(public leases: MemoryLeases) {}

  async lease(key: string, policy: Policy, request: LeaseRequest): Promise<LeaseAnswer> {
    if (this.mode === 'down') throw new Error('the store does not answer');
    const answer = await this.leases.lease(key, policy, request);
    if (this.mode === 'loses answers') {
      this.lostGrants.set(request.holder, answer.granted);
      throw new Error('the answer came after the command timeout');
    }
    this.lostGrants.delete(request.holder);
    return answer;
  }
}

type Event =
  | { kind: 'requests'; sidecar: number; count: number }
  | { kind: 'wait'; ms: number }
  | { kind: 'store'; mode: StoreMode }
  | { kind: 'restart'; sidecar: number; graceful: boolean };

const eventArbitrary: fc.Arbitrary<Event> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('requests' as const),
      sidecar: fc.nat(3),
      count: fc.oneof(fc.integer({ min: 1, max: 10 }), fc.integer({ min: 1, max: 400 })),
    }),
  },
  {
    weight: 5,
    arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.oneof(fc.integer({ min: 1, max: 100 }), fc.integer({ min: 1, max: 1_500 })) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('store' as const), mode: fc.constantFrom<StoreMode>('up', 'down', 'loses answers') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('restart' as const), sidecar: fc.nat(3), graceful: fc.boolean() }) },
);

const policyArbitrary = fc
  .record({
    requestsPerSecond: fc.constantFrom(0.5, 2, 10, 50, 400),
    burst: fc.integer({ min: 1, max: 40 }),
    quota: fc.oneof(fc.constant(null), fc.record({ window: fc.constantFrom('hour', 'day'), count: fc.integer({ min: 1, max: 300 }) })),
  })
  .map(({ requestsPerSecond, burst, quota }) =>
    compilePolicy('model', {
      by: 'application',
      requestsPerSecond,
      burst,
      ...(quota === null ? {} : quota.window === 'hour' ? { requestsPerHour: quota.count } : { requestsPerDay: quota.count }),
    }),
  );

interface Admission {
  at: number;
  /** Admitted by a bucket on its own, the store away. */
  alone: boolean;
}

class Simulation {
  now = START;
  private sweptAt = START;
  private made = 0;
  readonly store: SimulatedStore;
  readonly sidecars: Bucket[] = [];
  readonly admissions: Admission[] = [];
  /** Permits sidecars took with them: what a killed one held, or a stopped one could not give back (the store away). */
  lostWithSidecars = 0;

  constructor(
    readonly policy: Policy,
    count: number,
  ) {
    this.store = new SimulatedStore(new MemoryLeases(() => this.now));
    for (let index = 0; index < count; index += 1) this.sidecars.push(this.bucket());
    vi.setSystemTime(this.now);
  }

  private bucket(): Bucket {
    this.made += 1;
    return new Bucket(KEY, this.policy, this.store, () => {}, `sidecar.${this.made}`, leaseReach(this.policy));
  }

  /** Moves the clock, with the limiter's sweep every SWEEP_MS. */
  async advance(ms: number): Promise<void> {
    const until = this.now + ms;
    while (this.sweptAt + SWEEP_MS <= until) {
      this.sweptAt += SWEEP_MS;
      this.now = this.sweptAt;
      vi.setSystemTime(this.now);
      for (const bucket of this.sidecars) bucket.sweep(this.now);
      await settle();
    }
    this.now = until;
    vi.setSystemTime(this.now);
  }

  /** One request, as RateLimiter.admit meters it: true when admitted. */
  async request(bucket: Bucket): Promise<boolean> {
    const alone = (bucket as unknown as { outage: boolean }).outage;
    let taken = bucket.take(this.now);
    for (let waits = 0; taken === null && waits < 20; waits += 1) {
      await bucket.waitForLease(this.now);
      taken = bucket.retake(this.now);
    }
    if (taken !== true) return false;
    this.admissions.push({ at: this.now, alone: alone || (bucket as unknown as { outage: boolean }).outage });
    return true;
  }

  async run(event: Event): Promise<void> {
    switch (event.kind) {
      case 'requests': {
        const bucket = this.sidecars[event.sidecar % this.sidecars.length]!;
        for (let index = 0; index < event.count; index += 1) await this.request(bucket);
        return;
      }
      case 'wait':
        return this.advance(event.ms);
      case 'store':
        this.store.mode = event.mode;
        return;
      case 'restart': {
        const index = event.sidecar % this.sidecars.length;
        const bucket = this.sidecars[index]!;
        // Stopped, it gives back what it holds if the store answers; killed, or the store away, what it held is lost.
        if (event.graceful) await bucket.release();
        this.lostWithSidecars += held(bucket) + (this.store.lostGrants.get(holderOf(bucket)) ?? 0);
        this.sidecars[index] = this.bucket();
      }
    }
  }

  async quotaLeft(): Promise<number> {
    return (await this.store.leases.lease(KEY, this.policy, READ_ONLY)).quotaLeft;
  }
}

/** What a bucket holds that the store counts as spent: its permits, those it has to give back, and a report not confirmed. */
function held(bucket: Bucket): number {
  const inside = bucket as unknown as { permits: number; returning: number; unconfirmed: { returned: number } | null };
  return inside.permits + inside.returning + (inside.unconfirmed?.returned ?? 0);
}

function holderOf(bucket: Bucket): string {
  return (bucket as unknown as { holder: string }).holder;
}

/** Lets the promise chains of leases answered at once run to their end. */
async function settle(): Promise<void> {
  for (let index = 0; index < 10; index += 1) await Promise.resolve();
}

function quotaOf(policy: Policy): number {
  return policy.perHour > 0 ? policy.perHour : policy.perDay;
}

/** The most admitted in any 1 s window that holds no admission made alone. */
function busiestSecond(admissions: readonly Admission[]): number {
  let most = 0;
  for (let first = 0; first < admissions.length; first += 1) {
    let count = 0;
    let alone = false;
    for (let index = first; index < admissions.length && admissions[index]!.at < admissions[first]!.at + 1_000; index += 1) {
      count += 1;
      alone ||= admissions[index]!.alone;
    }
    if (!alone) most = Math.max(most, count);
  }
  return most;
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

const schedule = fc.record({
  policy: policyArbitrary,
  sidecars: fc.integer({ min: 1, max: 4 }),
  events: fc.array(eventArbitrary, { minLength: 1, maxLength: 150, size: 'max' }),
});

describe('the rate limiter model', () => {
  it('holds an application over its limit to its policy, neither more nor much less, when every lease answer takes 80 ms to come back', async () => {
    const policy = compilePolicy('model', { by: 'application', requestsPerSecond: 100, burst: 10 });
    const simulation = new Simulation(policy, 1);
    const leases = simulation.store.leases;
    // The store runs the lease at once; its answer reaches the sidecar 80 ms later.
    simulation.store.leases = {
      lease: async (key: string, leased: Policy, request: LeaseRequest) => {
        const answer = await leases.lease(key, leased, request);
        await simulation.advance(80);
        return answer;
      },
    } as MemoryLeases;
    // 3x the policy for 10 s: a request every 3.33 ms.
    for (let index = 0; index < 3_000; index += 1) {
      await simulation.request(simulation.sidecars[0]!);
      await simulation.advance(10 / 3);
    }
    // The answers' way back took the clock further: the policy over all the time that passed.
    const policySince = (simulation.now - START) / policy.intervalMs;
    expect(simulation.admissions.length).toBeGreaterThanOrEqual(0.9 * policySince);
    expect(busiestSecond(simulation.admissions)).toBeLessThanOrEqual(Math.floor((1_000 + LAPSE_MS) / policy.intervalMs) + policy.burst + 1);
  });

  it(
    'never exceeds a quota nor, without an outage, the rate over 1.5 s plus its burst in any second; gives back unused permits within the bound',
    async () => {
      await holds(
        'rate limiter model',
        fc.asyncProperty(schedule, async ({ policy, sidecars, events }) => {
          const simulation = new Simulation(policy, sidecars);
          for (const event of events) await simulation.run(event);
          const quota = quotaOf(policy);
          const admitted = simulation.admissions.length;
          if (quota > 0 && admitted > quota) throw new Error(`admitted ${admitted} of a quota of ${quota}`);
          const most = busiestSecond(simulation.admissions);
          // Each permit is spent between a burst before its moment in the store's GCRA and LAPSE_MS after it.
          const allowed = Math.floor((1_000 + LAPSE_MS) / policy.intervalMs) + policy.burst + 1;
          if (most > allowed) throw new Error(`admitted ${most} in one second; the policy allows ${allowed}`);
          if (quota === 0) return true;
          // Quiet, the store back: every lease ends and is swept (after the store's retry, for a bucket that found it away).
          simulation.store.mode = 'up';
          await simulation.advance(LEASE_MS + STORE_RETRY_MS + SWEEP_MS);
          await settle();
          const left = await simulation.quotaLeft();
          const unused = quota - admitted;
          if (left > unused || left < unused - simulation.lostWithSidecars) {
            throw new Error(`the store has ${left} left of ${unused} not admitted (${simulation.lostWithSidecars} taken by sidecars stopped or killed)`);
          }
          // A sidecar refused for the quota learns that permits came back.
          await simulation.advance(QUOTA_RECHECK_MS);
          if (left > 0 && !(await simulation.request(simulation.sidecars[0]!))) throw new Error(`refused with ${left} of the quota left`);
          return true;
        }),
        150,
      );
    },
    PROPERTY_TIMEOUT,
  );
});
