import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { Metrics } from '../observability/metrics.js';
import type { VerifiedToken } from '../store/verified-token.js';
import { Bucket, type Refusal } from './bucket.js';
import { leaseReach, READ_ONLY, type LeaseSource } from './lease-protocol.js';
import { compilePolicy, type Policy } from './policies.js';

/** How often the tiers of the applications seen lately are read again (a tier change reaches every sidecar within it). */
const TIER_REFRESH_MS = 500;
/** Store reads per second per application a sidecar served lately: its tier. */
export const TIER_READS_PER_SECOND = 1000 / TIER_REFRESH_MS;
/** Tiers and buckets unused this long are forgotten. */
const IDLE_MS = 60_000;
/** How often the buckets are swept for ended leases whose unused permits go back to the store. */
export const SWEEP_MS = 250;
/** How long a shutdown waits for the store to take back the permits in hand. */
const RELEASE_WAIT_MS = 2_000;

/** What a route that names a policy meters with: compiled with the route, read per request. */
export interface RouteRateLimit {
  readonly route: string;
  readonly policy: Policy;
  readonly limiter: RateLimiter;
}

/** Why the meter refused a request, and what the 429 tells the client to pace itself by. */
export interface RateRefusal {
  readonly refusal: Refusal;
  /** Seconds, at least 1. */
  readonly retryAfter: number;
  readonly policy: Policy;
}

/** One policy's remaining budget of an application, as the admin API shows it. */
export interface Budget {
  policy: string;
  by: 'application' | 'user';
  requests_per_second: number;
  burst: number;
  /** Requests the rate admits at once now (for `by: user`, an application token's own budget). */
  available: number;
  quota_left: number | null;
  /** Seconds until an exhausted quota's window ends; null when none is exhausted. */
  quota_resets_in_seconds: number | null;
}

/** An application's tier as this sidecar last read it: its own policy, or null for its routes' policies. */
interface Tier {
  policy: string | null;
  seenAt: number;
}

/**
 * The rate limits of one tokengate instance: the compiled policies, one Bucket per budget
 * (policy x application, or x user), and each application's tier. A request with permits in
 * hand is admitted with a Map lookup and a decrement; the store is asked for permits in leases
 * (./bucket.ts), and read for tiers on a timer, never per request.
 */
export class RateLimiter {
  private policies = new Map<string, Policy>();
  /** Per policy: client id -> its bucket (by application) or user id -> bucket maps (by user). */
  private buckets = new Map<Policy, Map<string, Bucket | Map<string, Bucket>>>();
  private readonly tiers = new Map<string, Tier>();
  private readonly loadingTiers = new Map<string, Promise<void>>();
  private readonly timer: NodeJS.Timeout;
  private readonly sweeper: NodeJS.Timeout;
  private readonly warnedPolicies = new Set<string>();
  /** Names this sidecar's buckets in the store's report fields; each bucket adds a number of its own. */
  private readonly sidecar = randomBytes(6).toString('base64url');
  private bucketsMade = 0;

  constructor(
    config: Pick<Config, 'rateLimits'>,
    private readonly source: LeaseSource,
    /** An application's tier (a policy name), or null for its routes' own policies; rejects when the store does not answer. */
    private readonly tierOf: (clientId: string) => Promise<string | null>,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.configure(config);
    this.timer = setInterval(() => void this.refreshTiers(), TIER_REFRESH_MS);
    this.timer.unref();
    this.sweeper = setInterval(() => this.sweep(), SWEEP_MS);
    this.sweeper.unref();
  }

  /** Takes the policies of a (re)loaded config; a policy whose parameters did not change keeps its buckets. */
  configure(config: Pick<Config, 'rateLimits'>): void {
    const policies = new Map<string, Policy>();
    const buckets = new Map<Policy, Map<string, Bucket | Map<string, Bucket>>>();
    for (const [name, source] of Object.entries(config.rateLimits)) {
      const running = this.policies.get(name);
      const policy = running !== undefined && isDeepStrictEqual(running.source, source) ? running : compilePolicy(name, source);
      policies.set(name, policy);
      buckets.set(policy, this.buckets.get(policy) ?? new Map());
    }
    // The buckets of a policy that changed or went: no request takes their permits any more.
    for (const [policy, byClient] of this.buckets) if (!buckets.has(policy)) for (const bucket of bucketsOf(byClient)) void bucket.release();
    this.policies = policies;
    this.buckets = buckets;
    this.warnedPolicies.clear();
  }

  policy(name: string): Policy | undefined {
    return this.policies.get(name);
  }

  forRoute(route: string, policyName: string): RouteRateLimit {
    const policy = this.policies.get(policyName);
    if (policy === undefined) throw new Error(`rate limit policy ${policyName} is not configured; the config loader refuses it`);
    return { route, policy, limiter: this };
  }

  /**
   * Meters one request of a verified token: its bucket when admitted, the refusal (its reason,
   * Retry-After and policy) when not, or a promise of either when the tier or a lease must be
   * awaited first.
   */
  admit(limit: RouteRateLimit, token: VerifiedToken): Bucket | RateRefusal | Promise<Bucket | RateRefusal> {
    const tier = this.tiers.get(token.clientId);
    if (tier === undefined) return this.loadTier(token.clientId).then(() => this.admit(limit, token));
    const now = Date.now();
    tier.seenAt = now;
    const bucket = this.bucketOf(tier.policy === null ? limit.policy : this.tierPolicy(tier.policy, limit.policy), token);
    const taken = bucket.take(now);
    if (taken === true) return bucket;
    if (taken !== null) return this.refuse(limit, bucket, taken, now);
    return this.awaitPermit(limit, bucket, now);
  }

  /**
   * Waits for the bucket's lease, then takes a permit. The requests waiting with this one may
   * have taken the whole lease while the store had more: then the next lease, sized for the
   * requests still waiting. It ends: a store with no permit left blocks the bucket (a refusal),
   * a store that does not answer puts it on its own (an answer either way).
   */
  private async awaitPermit(limit: RouteRateLimit, bucket: Bucket, now: number): Promise<Bucket | RateRefusal> {
    let at = now;
    for (;;) {
      await bucket.waitForLease(at);
      at = Date.now();
      const taken = bucket.retake(at);
      if (taken === true) return bucket;
      if (taken !== null) return this.refuse(limit, bucket, taken, at);
    }
  }

  private tierPolicy(name: string, routePolicy: Policy): Policy {
    const policy = this.policies.get(name);
    if (policy !== undefined) return policy;
    // A reload removed the policy a tier names: the route's own applies until it is back or the tier changes.
    if (!this.warnedPolicies.has(name)) {
      this.warnedPolicies.add(name);
      this.log.warn({ policy: name }, 'an application tier names a rate limit policy the config no longer has; its routes use their own policies');
    }
    return routePolicy;
  }

  private bucketOf(policy: Policy, token: VerifiedToken): Bucket {
    const byClient = this.buckets.get(policy)!;
    const entry = byClient.get(token.clientId);
    if (policy.by === 'application' || token.userId === null) {
      if (entry instanceof Bucket) return entry;
      const bucket = this.createBucket(policy, `ratelimit:${policy.name}:${encodeURIComponent(token.clientId)}`);
      byClient.set(token.clientId, bucket);
      return bucket;
    }
    let byUser = entry instanceof Map ? entry : undefined;
    if (byUser === undefined) {
      byUser = new Map();
      byClient.set(token.clientId, byUser);
    }
    let bucket = byUser.get(token.userId);
    if (bucket === undefined) {
      bucket = this.createBucket(policy, `ratelimit:${policy.name}:${encodeURIComponent(token.clientId)}:${encodeURIComponent(token.userId)}`);
      byUser.set(token.userId, bucket);
    }
    return bucket;
  }

  private createBucket(policy: Policy, key: string): Bucket {
    this.bucketsMade += 1;
    const holder = `${this.sidecar}.${this.bucketsMade}`;
    return new Bucket(key, policy, this.source, (result) => this.metrics.rateLimitLeases.inc({ policy: policy.name, result }), holder, leaseReach(policy));
  }

  private refuse(limit: RouteRateLimit, bucket: Bucket, refusal: Refusal, now: number): RateRefusal {
    this.metrics.rateLimited.inc({ route: limit.route, policy: bucket.policy.name, reason: refusal });
    return { refusal, retryAfter: bucket.retryAfter(now, refusal), policy: bucket.policy };
  }

  /** The tier of an application seen for the first time (its first request waits for this one read). */
  private loadTier(clientId: string): Promise<void> {
    let loading = this.loadingTiers.get(clientId);
    if (loading === undefined) {
      loading = this.readTier(clientId).finally(() => this.loadingTiers.delete(clientId));
      this.loadingTiers.set(clientId, loading);
    }
    return loading;
  }

  private async readTier(clientId: string): Promise<void> {
    let policy: string | null;
    try {
      policy = await this.tierOf(clientId);
    } catch {
      // The store is away: a tier read before stays; a new application has its routes' policies until the next refresh.
      if (!this.tiers.has(clientId)) this.tiers.set(clientId, { policy: null, seenAt: Date.now() });
      return;
    }
    const tier = this.tiers.get(clientId);
    if (tier === undefined) this.tiers.set(clientId, { policy, seenAt: Date.now() });
    else tier.policy = policy;
  }

  private async refreshTiers(): Promise<void> {
    const now = Date.now();
    const reads: Array<Promise<void>> = [];
    for (const [clientId, tier] of this.tiers) {
      if (now - tier.seenAt > IDLE_MS) this.tiers.delete(clientId);
      else if (!this.loadingTiers.has(clientId)) reads.push(this.loadTier(clientId));
    }
    await Promise.all(reads);
    this.forgetIdleBuckets(now);
  }

  private *everyBucket(): Generator<Bucket> {
    for (const byClient of this.buckets.values()) yield* bucketsOf(byClient);
  }

  private sweep(): void {
    const now = Date.now();
    for (const bucket of this.everyBucket()) bucket.sweep(now);
  }

  private forgetIdleBuckets(now: number): void {
    for (const byClient of this.buckets.values()) {
      for (const [clientId, entry] of byClient) {
        if (entry instanceof Bucket) {
          if (now - entry.usedAt > IDLE_MS) forget(byClient, clientId, entry);
          continue;
        }
        for (const [userId, bucket] of entry) if (now - bucket.usedAt > IDLE_MS) forget(entry, userId, bucket);
        if (entry.size === 0) byClient.delete(clientId);
      }
    }
  }

  /**
   * What an application may still send now, as the store holds it for every sidecar together
   * (permits leased to sidecars and not yet used count as spent): a lease of nothing.
   * `policies`: the names to read (the application's tier, or the routes' policies).
   */
  async budget(clientId: string, policies: readonly string[]): Promise<Budget[]> {
    const budgets: Budget[] = [];
    for (const name of policies) {
      const policy = this.policies.get(name);
      if (policy === undefined) continue;
      const answer = await this.source.lease(`ratelimit:${policy.name}:${encodeURIComponent(clientId)}`, policy, READ_ONLY);
      budgets.push({
        policy: name,
        by: policy.by,
        requests_per_second: policy.requestsPerSecond,
        burst: policy.burst,
        available: answer.left,
        quota_left: answer.quotaLeft < 0 ? null : answer.quotaLeft,
        quota_resets_in_seconds: answer.quotaResetMs > 0 ? Math.ceil(answer.quotaResetMs / 1000) : null,
      });
    }
    return budgets;
  }

  /** Stops the timers and gives the permits in hand back to the store (waiting for it at most RELEASE_WAIT_MS). */
  async close(): Promise<void> {
    clearInterval(this.timer);
    clearInterval(this.sweeper);
    const released = Promise.all(Array.from(this.everyBucket(), (bucket) => bucket.release()));
    let timeout: NodeJS.Timeout | undefined;
    await Promise.race([released, new Promise((resolve) => (timeout = setTimeout(resolve, RELEASE_WAIT_MS)))]);
    clearTimeout(timeout);
  }
}

function bucketsOf(byClient: Map<string, Bucket | Map<string, Bucket>>): Bucket[] {
  const buckets: Bucket[] = [];
  for (const entry of byClient.values()) {
    if (entry instanceof Bucket) buckets.push(entry);
    else buckets.push(...entry.values());
  }
  return buckets;
}

/** Forgets an idle bucket, giving back what it still holds (a lease ends within a second, so it holds nothing unless the store was away). */
function forget(map: Map<string, unknown>, name: string, bucket: Bucket): void {
  map.delete(name);
  void bucket.release();
}
