import type { Policy } from './policies.js';
import { leaseReach, SHARE_DECAY_MS, type LeaseAnswer, type LeaseRequest, type LeaseSource } from './lease-protocol.js';

interface MemoryBucket {
  tat: number;
  hour: number;
  hourCount: number;
  day: number;
  dayCount: number;
  granted: number;
  grantedAt: number;
  expiresAt: number;
  /** Per holder: its last report's number, the grant it got and that grant's hour and day. */
  reports: Map<string, { report: number; grant: number; hour: number; day: number }>;
}

/**
 * The lease protocol in this process, for the memory store (one instance: its budget is all of
 * it): ./lease-script.ts step for step, with the process's clock for the server's.
 */
export class MemoryLeases implements LeaseSource {
  private readonly buckets = new Map<string, MemoryBucket>();

  constructor(private readonly clock: () => number = Date.now) {}

  lease(key: string, policy: Policy, request: LeaseRequest): Promise<LeaseAnswer> {
    const now = this.clock();
    if (this.buckets.size > 10_000) for (const [name, bucket] of this.buckets) if (bucket.expiresAt <= now) this.buckets.delete(name);
    const { intervalMs: interval, burst, perHour, perDay } = policy;
    const state = this.buckets.get(key);
    const hour = Math.floor(now / 3_600_000);
    const day = Math.floor(now / 86_400_000);
    let hourCount = state?.hour === hour ? state.hourCount : 0;
    let dayCount = state?.day === day ? state.dayCount : 0;
    const giveBack = (count: number, ofHour: number, ofDay: number) => {
      if (ofHour === hour) hourCount = Math.max(0, hourCount - count);
      if (ofDay === day) dayCount = Math.max(0, dayCount - count);
    };
    let { returned } = request;
    const last = request.holder === '' ? undefined : state?.reports.get(request.holder);
    if (last !== undefined && last.report === request.report) {
      // Applied already, its answer lost: not again, and its grant never reached the sidecar.
      returned = 0;
      giveBack(last.grant, last.hour, last.day);
    }
    giveBack(returned, request.returnedHour, request.returnedDay);
    const reach = leaseReach(policy);
    // At most empty under the policy as it is now (a reload may have changed its rate).
    let tat = Math.min(now + reach * interval, Math.max(now, state?.tat ?? now));
    let grant = Math.max(0, Math.min(request.want, Math.floor((now + reach * interval - tat) / interval)));
    let quotaLeft = -1;
    if (perHour > 0) quotaLeft = Math.max(0, perHour - hourCount);
    if (perDay > 0 && (quotaLeft < 0 || perDay - dayCount < quotaLeft)) quotaLeft = Math.max(0, perDay - dayCount);
    if (quotaLeft >= 0 && grant > quotaLeft) grant = quotaLeft;
    const startMs = Math.floor(tat + interval - burst * interval - now);
    tat += grant * interval;
    hourCount += grant;
    dayCount += grant;
    if (quotaLeft >= 0) quotaLeft -= grant;
    let quotaResetMs = 0;
    if (perHour > 0 && hourCount >= perHour) quotaResetMs = (hour + 1) * 3_600_000 - now;
    if (perDay > 0 && dayCount >= perDay) quotaResetMs = (day + 1) * 86_400_000 - now;
    let nextMs = Math.max(0, Math.ceil(tat + interval - reach * interval - now));
    if (quotaLeft === 0) nextMs = Math.max(nextMs, quotaResetMs);
    const granted = (state === undefined ? 0 : state.granted * Math.exp(-(now - state.grantedAt) / SHARE_DECAY_MS)) + grant;
    const reports = state?.reports ?? new Map();
    if (request.holder !== '') reports.set(request.holder, { report: request.report, grant, hour, day });
    this.buckets.set(key, {
      tat,
      hour,
      hourCount,
      day,
      dayCount,
      granted,
      grantedAt: now,
      reports,
      expiresAt:
        now + Math.max(reach * interval + 3 * SHARE_DECAY_MS, perHour > 0 ? (hour + 1) * 3_600_000 - now : 0, perDay > 0 ? (day + 1) * 86_400_000 - now : 0),
    });
    const left = Math.max(0, Math.floor((now + burst * interval - tat) / interval));
    return Promise.resolve({ granted: grant, nextMs, quotaLeft, quotaResetMs, left, grantRate: Math.floor(granted * 1000) / 1000, startMs, hour, day });
  }
}
