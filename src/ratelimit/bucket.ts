import type { Policy } from './policies.js';
import { SHARE_DECAY_MS, type LeaseAnswer, type LeaseReport, type LeaseSource } from './lease-protocol.js';

/** How long a lease's permits may be spent; what is left then goes back to the store. */
export const LEASE_MS = 1_000;
/** A lease is sized to this much of the sidecar's recent demand (at least 1 permit, at most what a lease may reach). */
const LEASE_DEMAND_MS = 250;
const DEMAND_FLOOR_MS = 50;
/** A bucket the store refused for the rate asks again no sooner than this: at most 4 lease requests a second, whatever the demand and the rate. */
export const REFUSED_ASK_MS = 250;
/** How long after its moment in the store's GCRA a permit may still be spent (a lease is spent at the sidecar's demand, not at the rate). */
export const LAPSE_MS = 500;
/** A bucket the store refused for a quota asks again this often, to learn that permits other sidecars held came back. */
export const QUOTA_RECHECK_MS = 1_000;
/**
 * How often one bucket of one sidecar may ask the store, whatever the demand and the policy:
 * ASKS_PER_SECOND over time, ASK_BURST at once (the first requests of a burst come before their
 * demand can be measured: leases asked in quick succession double, so a burst of a thousand
 * needs ten). A demand that outruns its leases this fast is refused until the next ask.
 */
export const ASKS_PER_SECOND = 10;
const ASK_INTERVAL_MS = 1000 / ASKS_PER_SECOND;
const ASK_BURST = 10;
/** Redis commands one lease costs, as INFO commandstats counts them: EVALSHA, and the script's TIME, HMGET, HSET and PEXPIRE. */
export const COMMANDS_PER_LEASE = 5;
/** What one bucket of one sidecar may cost the store per second, over its limit or not. */
export const STORE_COMMANDS_PER_SECOND = ASKS_PER_SECOND * COMMANDS_PER_LEASE;
/** While the store does not answer, how often a bucket asks it again (in the background). */
export const STORE_RETRY_MS = 1_000;
/** The share of a policy a sidecar keeps during an outage for a bucket it never had a lease for. */
export const UNKNOWN_SHARE = 0.1;

export type Refusal = 'rate_limited' | 'quota_exceeded';

/**
 * One budget (a policy and an application, or a user of it) as one sidecar holds it: the
 * permits of its current lease from the store, spent one per request without waiting, no
 * sooner than the store's GCRA allows each, and what the last lease answer said. At most one
 * lease request is in flight; requests that find no permit wait for it together, and the next
 * lease is asked for before the permits run out. Permits not spent when the lease ends go back
 * to the store with the next request, or on their own (`sweep`, `release`).
 */
export class Bucket {
  /** Permits of the lease in hand. */
  permits = 0;
  /** When the next permit in hand is due (the store's GCRA, on this sidecar's clock). */
  private paceAt = 0;
  /**
   * Of the permits in hand, those of the lease that came while an earlier one still had some,
   * and when the first of them is due: they are spent after the earlier ones, from then on.
   */
  private queued = 0;
  private queuedFrom = 0;
  private leaseEndsAt = 0;
  /** The UTC hour and day the permits in hand were granted in. */
  private leaseHour = -1;
  private leaseDay = -1;
  /** Permits of an ended lease, given back with the next report, and the windows they were granted in. */
  private returning = 0;
  private returningHour = -1;
  private returningDay = -1;
  /** The report sent and not answered yet, or whose answer was lost: sent again as it is, so the store applies it once. */
  private unconfirmed: LeaseReport | null = null;
  private reports = 0;
  /** Past the permits in hand, requests are refused until then (the store had none left). */
  private blockedUntil = 0;
  private blockedBy: Refusal = 'rate_limited';
  private quotaResetAt = 0;
  private pending: Promise<void> | null = null;
  /** The asks' own GCRA: when the store may be asked again without a burst. */
  private askTat = 0;
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
  /** Last request, for forgetting idle buckets. */
  usedAt = 0;

  constructor(
    readonly key: string,
    readonly policy: Policy,
    private readonly source: LeaseSource,
    private readonly onLease: (result: 'granted' | 'exhausted' | 'failed') => void,
    /** Names this bucket's reports in the store, unique to it (a sidecar's id and a number). */
    private readonly holder: string,
    private readonly reach: number,
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
      // While the store is away the permits in hand stay spendable: they were granted, and it could not take them back.
      if (now >= this.leaseEndsAt && !this.outage) this.endLease();
      else if (now < this.paceAt) return 'rate_limited';
      // Lapsed permits may leave only those of the queued lease, due from their own moment.
      else if (this.lapse(now) === 0 || now < this.paceAt) return this.retake(now);
      else {
        this.spend(1);
        // Ask for the next lease before this one runs out, so no request waits for it.
        if (this.permits * 4 <= this.batch && this.pending === null && !this.outage && now >= this.blockedUntil && this.mayAsk(now)) void this.lease(now);
        return true;
      }
    }
    if (now < this.blockedUntil) return this.blockedBy;
    if (this.outage) {
      if (now >= this.retryStoreAt && this.pending === null && this.mayAsk(now)) void this.lease(now);
      return this.takeAlone(now);
    }
    // Asked as often as a bucket may: the demand outran its leases; refused until the next ask.
    return this.pending === null && !this.mayAsk(now) ? 'rate_limited' : null;
  }

  /** Seconds until a request would be admitted (Retry-After), at least 1. */
  retryAfter(now: number, refusal: Refusal): number {
    let until = this.blockedUntil;
    if (refusal === 'quota_exceeded') until = Math.max(until, this.quotaResetAt);
    else if (this.permits > 0) until = this.paceAt;
    else if (this.outage) until = Math.max(this.blockedUntil, this.localTat - this.localBurst() * this.localInterval() + this.localInterval());
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

  /** Waits for the lease in flight, or asks for one sized by the demand; never rejects (a failed lease starts an outage). */
  lease(now: number): Promise<void> {
    if (this.pending !== null) return this.pending;
    // Measured over at least DEMAND_FLOOR_MS: a few requests a moment apart are no rate of thousands.
    const elapsed = Math.max(DEMAND_FLOOR_MS, now - this.askedSince);
    const demand = Math.ceil((this.asked * LEASE_DEMAND_MS) / elapsed);
    // The last lease, asked for moments ago, is spent already (not merely low, as when the next is asked ahead): the
    // demand is rising faster than it can be measured.
    const rising = this.permits === 0 && now - this.askedSince < LEASE_DEMAND_MS ? 2 * this.batch : 0;
    this.batch = Math.max(1, Math.min(this.reach, Math.max(demand, this.waiting, rising)));
    this.asked = 0;
    this.askedSince = now;
    return this.ask(this.batch);
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

  /**
   * Gives back the permits of a lease that has ended, when no request will carry them soon:
   * what the limiter's sweep calls, so unused permits return within a sweep of the lease's end.
   */
  sweep(now: number): void {
    if (this.permits > 0 && now >= this.leaseEndsAt && !this.outage) this.endLease();
    if ((this.returning > 0 || this.unconfirmed !== null) && this.pending === null && now >= this.retryStoreAt && this.mayAsk(now)) void this.ask(0);
  }

  /** Gives back every permit in hand now (a reload that replaced the policy, a shutdown); resolves once the store has them, or failed to. */
  async release(): Promise<void> {
    // A lease in flight is waited for: what it grants goes back too.
    if (this.pending !== null) await this.pending;
    if (this.permits > 0) this.endLease();
    if (this.returning > 0 || this.unconfirmed !== null) await this.ask(0);
  }

  /**
   * Lets go of the permits whose moment passed long enough ago: the store's GCRA placed each at
   * a moment (a burst's time after it is due), and a permit spent later comes on top of what the
   * store gives for the time since. A sidecar spends its lease at its own demand, often slower
   * than the policy's rate, so each permit may still be spent LAPSE_MS after its moment: in any
   * window the sidecars together admit at most the policy's rate over the window and LAPSE_MS
   * more, plus its burst, plus one. Lapsed permits go back to the quota like any unused one.
   * The permits left.
   */
  private lapse(now: number): number {
    const late = now - this.paceAt - this.policy.burst * this.policy.intervalMs - LAPSE_MS;
    if (late <= 0) return this.permits;
    const lapsed = Math.min(this.permits - this.queued, Math.ceil(late / this.policy.intervalMs));
    this.spend(lapsed);
    this.returning += lapsed;
    this.returningHour = this.leaseHour;
    this.returningDay = this.leaseDay;
    return this.permits;
  }

  /** Takes `count` permits of the earlier lease; once it has none left, the queued lease's are next, from when they are due. */
  private spend(count: number): void {
    this.permits -= count;
    this.paceAt += count * this.policy.intervalMs;
    if (this.queued > 0 && this.permits === this.queued) {
      this.paceAt = Math.max(this.paceAt, this.queuedFrom);
      this.queued = 0;
    }
  }

  private endLease(): void {
    this.returning += this.permits;
    this.returningHour = this.leaseHour;
    this.returningDay = this.leaseDay;
    this.permits = 0;
    this.queued = 0;
  }

  /** Whether the store may be asked now: at most ASK_BURST at once, ASKS_PER_SECOND over time. */
  private mayAsk(now: number): boolean {
    return this.askTat - now <= (ASK_BURST - 1) * ASK_INTERVAL_MS;
  }

  private ask(want: number): Promise<void> {
    if (this.pending !== null) return this.pending;
    const now = Date.now();
    this.askTat = Math.max(this.askTat, now) + ASK_INTERVAL_MS;
    const report = this.unconfirmed ?? this.nextReport();
    this.unconfirmed = report;
    const pending = this.source.lease(this.key, this.policy, { ...report, want }).then(
      (answer) => {
        this.unconfirmed = null;
        this.granted(answer, want);
      },
      // Kept in `unconfirmed`: sent again as it is, whether or not the store applied it.
      () => this.storeDown(),
    );
    this.pending = pending.finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  private nextReport(): LeaseReport {
    this.reports += 1;
    const report = {
      holder: this.holder,
      report: this.reports,
      returned: this.returning,
      returnedHour: this.returningHour,
      returnedDay: this.returningDay,
    };
    this.returning = 0;
    return report;
  }

  private granted(answer: LeaseAnswer, wanted: number): void {
    const now = Date.now();
    const interval = this.policy.intervalMs;
    this.onLease(answer.granted > 0 || wanted === 0 ? 'granted' : 'exhausted');
    this.outage = false;
    // Permits of a window that has ended are not spent in the next one, which did not count them.
    if (this.permits > 0 && (answer.hour !== this.leaseHour || answer.day !== this.leaseDay) && this.hasQuota()) {
      this.permits = 0;
      this.queued = 0;
    }
    if (answer.granted > 0) {
      // When the first is due, on this clock: later than on the store's by the answer's way back, which only delays it.
      const start = now + answer.startMs;
      if (this.permits === 0) this.paceAt = start;
      else if (this.queued === 0) {
        // Kept apart: the permits still in hand keep their moments, and these come after them.
        this.queued = answer.granted;
        this.queuedFrom = start;
      } else {
        // A third lease: after the queued one, as though they were one run (never sooner than either allows).
        this.queuedFrom = Math.max(this.queuedFrom, start - this.queued * interval);
        this.queued += answer.granted;
      }
      this.permits += answer.granted;
      this.leaseEndsAt = now + LEASE_MS;
      this.leaseHour = answer.hour;
      this.leaseDay = answer.day;
    }
    this.storeLeft = answer.left;
    this.quotaLeft = answer.quotaLeft;
    this.ownGrants = this.ownGrants * Math.exp(-(now - this.ownGrantsAt) / SHARE_DECAY_MS) + answer.granted;
    this.ownGrantsAt = now;
    this.allGrants = answer.grantRate;
    if (answer.granted >= wanted) return;
    if (answer.quotaLeft === 0) {
      // Other sidecars' unused permits may come back before the window ends: ask again now and then.
      this.blockedBy = 'quota_exceeded';
      this.quotaResetAt = now + answer.quotaResetMs;
      this.blockedUntil = now + Math.min(answer.quotaResetMs || answer.nextMs, QUOTA_RECHECK_MS);
    } else {
      // A lease may reach a quarter second ahead, so asking no sooner loses no permit to the burst's cap.
      this.blockedBy = 'rate_limited';
      this.blockedUntil = now + Math.max(REFUSED_ASK_MS, answer.nextMs);
    }
  }

  private hasQuota(): boolean {
    return this.policy.perHour > 0 || this.policy.perDay > 0;
  }

  private storeDown(): void {
    const now = Date.now();
    this.onLease('failed');
    this.retryStoreAt = now + STORE_RETRY_MS;
    if (this.outage) return;
    this.outage = true;
    this.localTat = now;
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

  /**
   * The outage's local GCRA, at this sidecar's share of the rate and burst. Not for a quota: a
   * share of what another sidecar last saw left could add up to more than is left, so a quota
   * admits alone only the permits in hand.
   */
  private takeAlone(now: number): true | Refusal {
    if (this.hasQuota()) {
      this.blockedBy = 'quota_exceeded';
      this.blockedUntil = this.retryStoreAt;
      return 'quota_exceeded';
    }
    const interval = this.localInterval();
    const tat = Math.max(this.localTat, now);
    if (tat - now > (this.localBurst() - 1) * interval) return 'rate_limited';
    this.localTat = tat + interval;
    return true;
  }
}
