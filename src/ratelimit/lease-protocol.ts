import type { Policy } from './policies.js';

/**
 * The lease protocol between a sidecar's buckets (./bucket.ts) and the store that holds every
 * sidecar's budgets: what a bucket asks and reports, and what the store answers.
 */

/** How fast the grant counts behind each sidecar's share decay: the traffic of the last ~10 s. */
export const SHARE_DECAY_MS = 10_000;
/** How far into the rate's future one lease may reach: twice as far as a refused bucket waits before it asks again, so no permit is lost to the cap between two asks. */
export const LEASE_AHEAD_MS = 500;

/** What a sidecar's bucket reports with a lease request: what it gives back, under a number of its own. */
export interface LeaseReport {
  /** The bucket of this sidecar that reports ('' for a read that reports nothing). */
  readonly holder: string;
  /** Numbers the holder's reports; a report sent again after a lost answer keeps its number, so the store applies it once. */
  readonly report: number;
  /** Permits of an earlier lease that were not used: given back to the quotas of the windows they were granted in. */
  readonly returned: number;
  /** The UTC hour and day (numbers since the epoch, as a lease answer gives them) the returned permits were granted in. */
  readonly returnedHour: number;
  readonly returnedDay: number;
}

export interface LeaseRequest extends LeaseReport {
  /** Permits wanted now. */
  readonly want: number;
}

export interface LeaseAnswer {
  readonly granted: number;
  /** Milliseconds until the store holds one more permit (the rate, or the end of an exhausted quota window). */
  readonly nextMs: number;
  /** Requests the tightest quota still allows; -1 without a quota. */
  readonly quotaLeft: number;
  /** Milliseconds until an exhausted quota window ends; 0 when none is exhausted. */
  readonly quotaResetMs: number;
  /** Permits the rate holds now, within its burst. */
  readonly left: number;
  /** Every sidecar's grants, decayed over SHARE_DECAY_MS (one sidecar's share is its own over this). */
  readonly grantRate: number;
  /** Milliseconds from now until the first granted permit is due (negative: it already is); the next ones follow one interval apart. */
  readonly startMs: number;
  /** The UTC hour and day of the grant, numbers since the epoch (what a return of its permits names). */
  readonly hour: number;
  readonly day: number;
}

/** A request that takes nothing and gives nothing back: what the store holds now. */
export const READ_ONLY: LeaseRequest = { holder: '', report: 0, returned: 0, returnedHour: -1, returnedDay: -1, want: 0 };

/** Where the budgets of all sidecars live: the shared store (Redis), or this process alone (memory store). */
export interface LeaseSource {
  lease(key: string, policy: Policy, request: LeaseRequest): Promise<LeaseAnswer>;
}

/** Permits one lease may reach ahead of now: the burst, or a quarter second of the rate when that is more. */
export function leaseReach(policy: Policy): number {
  return Math.max(policy.burst, Math.ceil(LEASE_AHEAD_MS / policy.intervalMs));
}
