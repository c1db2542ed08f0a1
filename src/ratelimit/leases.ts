import type { Backend, RedisDoor } from '../store/backend.js';
import type { Policy } from './policies.js';
import { LEASE_SCRIPT } from './lease-script.js';

/** How fast the grant counts behind each sidecar's share decay: the traffic of the last ~10 s. */
export const SHARE_DECAY_MS = 10_000;

export interface LeaseRequest {
  /** Permits wanted now. */
  readonly want: number;
  /** Permits of an earlier lease that were not used: given back to the rate and the quota. */
  readonly returned: number;
  /** Requests admitted while the store was away: charged to the quota. */
  readonly charged: number;
}

export interface LeaseAnswer {
  readonly granted: number;
  /** Milliseconds until the store holds one more permit (the rate, or the end of an exhausted quota window). */
  readonly nextMs: number;
  /** Requests the tightest quota still allows; -1 without a quota. */
  readonly quotaLeft: number;
  /** Milliseconds until an exhausted quota window ends; 0 when none is exhausted. */
  readonly quotaResetMs: number;
  /** Permits the rate still holds after this grant. */
  readonly left: number;
  /** Every sidecar's grants, decayed over SHARE_DECAY_MS (one sidecar's share is its own over this). */
  readonly grantRate: number;
}

/** Where the budgets of all sidecars live: the shared store (Redis), or this process alone (memory store). */
export interface LeaseSource {
  lease(key: string, policy: Policy, request: LeaseRequest): Promise<LeaseAnswer>;
}

/** The leases of a backend: from Redis, shared by every sidecar, or this process's own. */
export function leasesFor(backend: Backend): LeaseSource {
  return backend.driver === 'redis' ? new RedisLeases(backend) : new MemoryLeases();
}

/** Leases from Redis: one script call per lease, on the bucket's one key. */
export class RedisLeases implements LeaseSource {
  constructor(private readonly door: RedisDoor) {
    door.defineScript('rateLimitLease', { numberOfKeys: 1, lua: LEASE_SCRIPT });
  }

  async lease(key: string, policy: Policy, request: LeaseRequest): Promise<LeaseAnswer> {
    const reply = await this.door.write<number[]>(
      'rateLimitLease',
      this.door.key(key),
      policy.intervalMs,
      policy.burst,
      request.want,
      request.returned,
      request.charged,
      policy.perHour,
      policy.perDay,
      SHARE_DECAY_MS,
    );
    return answerOf(reply);
  }
}

function answerOf([granted, nextMs, quotaLeft, quotaResetMs, left, grantRate]: number[]): LeaseAnswer {
  return { granted: granted!, nextMs: nextMs!, quotaLeft: quotaLeft!, quotaResetMs: quotaResetMs!, left: left!, grantRate: grantRate! / 1000 };
}

interface MemoryBucket {
  tat: number;
  hour: number;
  hourCount: number;
  day: number;
  dayCount: number;
  granted: number;
  grantedAt: number;
  expiresAt: number;
}

/** The same protocol in this process, for the memory store (one instance: its budget is all of it). */
export class MemoryLeases implements LeaseSource {
  private readonly buckets = new Map<string, MemoryBucket>();

  lease(key: string, policy: Policy, request: LeaseRequest): Promise<LeaseAnswer> {
    const now = Date.now();
    if (this.buckets.size > 10_000) for (const [name, bucket] of this.buckets) if (bucket.expiresAt <= now) this.buckets.delete(name);
    const { intervalMs: interval, burst, perHour, perDay } = policy;
    const state = this.buckets.get(key);
    const hour = Math.floor(now / 3_600_000);
    const day = Math.floor(now / 86_400_000);
    // At most empty under the policy as it is now (a reload may have changed its rate).
    const tat = Math.min(now + burst * interval, Math.max(now, (state?.tat ?? now) - request.returned * interval));
    const hourCount = Math.max(0, (state?.hour === hour ? state.hourCount : 0) - request.returned + request.charged);
    const dayCount = Math.max(0, (state?.day === day ? state.dayCount : 0) - request.returned + request.charged);
    let quotaLeft = -1;
    if (perHour > 0) quotaLeft = Math.max(0, perHour - hourCount);
    if (perDay > 0 && (quotaLeft < 0 || perDay - dayCount < quotaLeft)) quotaLeft = Math.max(0, perDay - dayCount);
    let grant = Math.max(0, Math.min(request.want, Math.floor((now + burst * interval - tat) / interval)));
    if (quotaLeft >= 0 && grant > quotaLeft) grant = quotaLeft;
    const next: MemoryBucket = {
      tat: tat + grant * interval,
      hour,
      hourCount: hourCount + grant,
      day,
      dayCount: dayCount + grant,
      granted: (state === undefined ? 0 : state.granted * Math.exp(-(now - state.grantedAt) / SHARE_DECAY_MS)) + grant,
      grantedAt: now,
      expiresAt:
        now + Math.max(burst * interval + 3 * SHARE_DECAY_MS, perHour > 0 ? (hour + 1) * 3_600_000 - now : 0, perDay > 0 ? (day + 1) * 86_400_000 - now : 0),
    };
    this.buckets.set(key, next);
    if (quotaLeft >= 0) quotaLeft -= grant;
    let quotaResetMs = 0;
    if (perHour > 0 && next.hourCount >= perHour) quotaResetMs = (hour + 1) * 3_600_000 - now;
    if (perDay > 0 && next.dayCount >= perDay) quotaResetMs = (day + 1) * 86_400_000 - now;
    let nextMs = Math.max(0, Math.ceil(next.tat + interval - burst * interval - now));
    if (quotaLeft === 0) nextMs = Math.max(nextMs, quotaResetMs);
    const left = Math.floor((now + burst * interval - next.tat) / interval);
    return Promise.resolve({ granted: grant, nextMs, quotaLeft, quotaResetMs, left, grantRate: next.granted });
  }
}
