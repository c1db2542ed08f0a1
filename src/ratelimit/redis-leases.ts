import type { RedisDoor } from '../store/backend.js';
import { leaseReach, SHARE_DECAY_MS, type LeaseAnswer, type LeaseRequest, type LeaseSource } from './lease-protocol.js';
import { LEASE_SCRIPT } from './lease-script.js';
import type { Policy } from './policies.js';

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
      policy.perHour,
      policy.perDay,
      SHARE_DECAY_MS,
      leaseReach(policy),
      request.holder,
      request.report,
      request.returnedHour,
      request.returnedDay,
    );
    const [granted, nextMs, quotaLeft, quotaResetMs, left, grantRate, startMs, hour, day] = reply;
    return {
      granted: granted!,
      nextMs: nextMs!,
      quotaLeft: quotaLeft!,
      quotaResetMs: quotaResetMs!,
      left: left!,
      grantRate: grantRate! / 1000,
      startMs: startMs!,
      hour: hour!,
      day: day!,
    };
  }
}
