import type { Policy } from './policies.js';
import { SHARE_DECAY_MS, type LeaseAnswer, type LeaseSource } from './leases.js';

/** How long a lease's permits may be spent; unused ones go back with the next lease. */
export const LEASE_MS = 1_000;
/** A lease is sized to this much of the sidecar's recent demand (at least 1 permit, at most the burst). */
const LEASE_DEMAND_MS = 250;
/** While the store does not answer, how often a bucket asks it again (in the background). */
export const STORE_RETRY_MS = 1_000;
/** The share of a policy a sidecar keeps during an outage for a bucket it never had a lease for. */
export const UNKNOWN_SHARE = 0.1;

export type Refusal = 'rate_limited' | 'quota_exceeded';

/**
 * One budget (a policy and an application, or a user of it) as one sidecar holds it: the
 * permits of its current lease from the store, spent one per request without waiting, and what
 * the last lease answer said. At most one lease request is in flight; requests that find no
 * permit wait for it together, and the next lease is asked for before the permits run out.
 */
export class Bucket {
  /** Permits of the lease in hand. */
  permits = 0;
  private leaseEndsAt = 0;
  /** Permits of an expired lease, given back with the next one. */
  private returning = 0;
  /** Past the permits in hand, requests are refused until then (the store had none left). */
  private blockedUntil = 0;
  private blockedBy: Refusal = 'rate_limited';
  private pending: Promise<void> | null = null;
  private waiting = 0;
  /** Requests asked of this bucket since the last lease, and when that lease was asked for. */
  private asked = 0;
  private askedSince = 0;
  private batch = 1;
  /** After the last answer: what the store's rate still held, and the tightest quota's remaining requests (-1: none). */
  private storeLeft = 0;
  quotaLeft = -1;
  /** This sidecar's grants and every sidecar's, decayed alike: its share of the traffic. */
  private ownGrants = 0;
  private ownGrantsAt = 0;
  private allGrants = 0;
  /** The store did not answer: until it does, a local GCRA at this sidecar's share. */
  private outage = false;
  private retryStoreAt = 0;
  private localTat = 0;
  /** Admitted during the outage, charged to the quota once the store answers. */
  private admittedAlone = 0;
  /** What the lease in flight charges: still spent against this outage's share until it answers. */
  private charging = 0;
  private quotaAlone = 0;
  /** Last request, for forgetting idle buckets. */
  usedAt = 0;

  constructor(
    readonly key: string,
    readonly policy: Policy,
    private readonly source: LeaseSource,
    private readonly onLease: (result: 'granted' | 'exhausted' | 'failed') => void,
  ) {}

  /**
   * Spends one permit: true when admitted, the refusal otherwise, or null when a lease must be
   * awaited first (`lease()`). No store call and no allocation while the lease holds permits.
   */
  take(now: number): true | Refusal | null {
    this.asked += 1;
    this.usedAt = now;
    return this.retake(now);
  }

  /** take() for a request already counted, after it waited for a lease. */
  retake(now: number): true | Refusal | null {
    if (this.permits > 0) {
      if (now < this.leaseEndsAt) {
        this.permits -= 1;
        // Ask for the next lease before this one runs out, so no request waits for it.
        if (this.permits * 4 <= this.batch && this.pending === null && !this.outage && now >= this.blockedUntil) void this.lease(now);
        return true;
      }
      this.returning += this.permits;
      this.permits = 0;
    }
    if (now < this.blockedUntil) return this.blockedBy;
    if (this.outage) {
      if (now >= this.retryStoreAt && this.pending === null) void this.lease(now);
      return this.takeAlone(now);
    }
    return null;
  }

  /** Seconds until a request would be admitted (Retry-After), at least 1. */
  retryAfter(now: number): number {
    const until = this.outage
      ? Math.max(this.blockedUntil, this.localTat - this.localBurst() * this.localInterval() + this.localInterval())
      : this.blockedUntil;
    return Math.max(1, Math.ceil((until - now) / 1000));
  }

  /** Requests this sidecar could admit now, for the RateLimit field. */
  remaining(): number {
    return this.permits + Math.max(0, this.storeLeft);
  }

  /** Appends an admitted answer's RateLimit-Policy and RateLimit fields to a flat header list (name, value, ...). */
  appendFields(headers: string[]): void {
    headers.push('ratelimit-policy', this.policy.policyHeader, 'ratelimit', this.policy.remainingHeader(this.remaining()));
  }

  /** Waits for the lease in flight, or asks for one; never rejects (a failed lease starts an outage). */
  lease(now: number): Promise<void> {
    if (this.pending !== null) return this.pending;
    const elapsed = Math.max(1, now - this.askedSince);
    const demand = Math.ceil((this.asked * LEASE_DEMAND_MS) / elapsed);
    this.batch = Math.max(1, Math.min(this.policy.burst, Math.max(demand, this.waiting)));
    const request = { want: this.batch, returned: this.returning, charged: this.admittedAlone };
    this.returning = 0;
    this.admittedAlone = 0;
    this.charging = request.charged;
    this.asked = 0;
    this.askedSince = now;
    const pending = this.source.lease(this.key, this.policy, request).then(
      (answer) => this.granted(answer, request.want),
      () => {
        // Nothing was taken or given back: it all goes with the next lease.
        this.returning += request.returned;
        this.admittedAlone += request.charged;
        this.storeDown();
      },
    );
    this.pending = pending.finally(() => {
      this.pending = null;
      this.charging = 0;
    });
    return this.pending;
  }

  /** A request waits for the lease in flight: the next lease is sized for the requests waiting too. */
  async waitForLease(now: number): Promise<void> {
    this.waiting += 1;
    try {
      await this.lease(now);
    } finally {
      this.waiting -= 1;
    }
  }

  private granted(answer: LeaseAnswer, wanted: number): void {
    const now = Date.now();
    this.onLease(answer.granted > 0 ? 'granted' : 'exhausted');
    this.outage = false;
    this.permits += answer.granted;
    this.leaseEndsAt = now + LEASE_MS;
    this.storeLeft = answer.left;
    this.quotaLeft = answer.quotaLeft;
    this.ownGrants = this.ownGrants * Math.exp(-(now - this.ownGrantsAt) / SHARE_DECAY_MS) + answer.granted;
    this.ownGrantsAt = now;
    this.allGrants = answer.grantRate;
    if (answer.granted < wanted) {
      // The store is out: ask again once it holds about a lease's worth, but well before its
      // burst would be whole again (permits no sidecar asks for in time are lost to everyone),
      // and never much later than the next permit (what Retry-After tells the client).
      const batchWait = Math.min((wanted - 1) * this.policy.intervalMs, (this.policy.burst * this.policy.intervalMs) / 2, LEASE_DEMAND_MS);
      const wait = answer.nextMs + Math.max(0, batchWait);
      this.blockedUntil = now + (answer.quotaLeft === 0 ? answer.quotaResetMs || answer.nextMs : wait);
      this.blockedBy = answer.quotaLeft === 0 ? 'quota_exceeded' : 'rate_limited';
    }
  }

  private storeDown(): void {
    const now = Date.now();
    this.onLease('failed');
    this.retryStoreAt = now + STORE_RETRY_MS;
    if (this.outage) return;
    this.outage = true;
    this.localTat = now;
    // The quota: this sidecar's share of what was left, no more, until the store answers again.
    this.quotaAlone = this.quotaLeft < 0 ? -1 : Math.floor(this.quotaLeft * this.share());
  }

  /** This sidecar's share of the policy: of every grant lately, the part it took. */
  share(): number {
    if (this.allGrants <= 0 || this.ownGrants <= 0) return UNKNOWN_SHARE;
    return Math.min(1, this.ownGrants / this.allGrants);
  }

  private localInterval(): number {
    return this.policy.intervalMs / this.share();
  }

  private localBurst(): number {
    return Math.max(1, Math.floor(this.policy.burst * this.share()));
  }

  /** The outage's local GCRA, at this sidecar's share of the rate and burst, and of the quota. */
  private takeAlone(now: number): true | Refusal {
    if (this.quotaAlone >= 0 && this.admittedAlone + this.charging >= this.quotaAlone) {
      this.blockedBy = 'quota_exceeded';
      this.blockedUntil = this.retryStoreAt;
      return 'quota_exceeded';
    }
    const interval = this.localInterval();
    const tat = Math.max(this.localTat, now);
    if (tat - now > (this.localBurst() - 1) * interval) return 'rate_limited';
    this.localTat = tat + interval;
    this.admittedAlone += 1;
    return true;
  }
}
