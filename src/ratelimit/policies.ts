import type { RateLimitPolicyConfig } from '../config/schema.js';

/**
 * A policy of `rateLimits`, compiled once per config: a GCRA (the sustained rate as the interval
 * between two requests, the burst as how many may come at once) and calendar quotas (UTC hour,
 * UTC day), plus the response header values clients pace themselves by.
 */
export interface Policy {
  readonly name: string;
  readonly by: 'application' | 'user';
  readonly requestsPerSecond: number;
  /** Milliseconds between two requests at the sustained rate. */
  readonly intervalMs: number;
  readonly burst: number;
  /** 0: no hourly quota. */
  readonly perHour: number;
  /** 0: no daily quota. */
  readonly perDay: number;
  /** RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers): the rate, and each quota. */
  readonly policyHeader: string;
  /** The parameters as given, to keep a policy's buckets across a reload that did not change it. */
  readonly source: RateLimitPolicyConfig;
  /**
   * The RateLimit field for `remaining` requests admissible now. Past 1,000 the count is rounded
   * down to two significant digits (a client told "at least" paces itself the same), so the
   * strings, built once each, stay a few thousand at most.
   */
  remainingHeader(remaining: number): string;
}

export function compilePolicy(name: string, source: RateLimitPolicyConfig): Policy {
  const intervalMs = 1000 / source.requestsPerSecond;
  const burst = source.burst;
  // The rate as a window of whole seconds: 5/s is q=5;w=1, 0.5/s is q=1;w=2.
  const window = source.requestsPerSecond >= 1 ? 1 : Math.ceil(1 / source.requestsPerSecond);
  const items = [`"${name}";q=${Math.floor(source.requestsPerSecond * window)};w=${window}`];
  if (source.requestsPerHour !== undefined) items.push(`"${name}-hour";q=${source.requestsPerHour};w=3600`);
  if (source.requestsPerDay !== undefined) items.push(`"${name}-day";q=${source.requestsPerDay};w=86400`);
  const remaining = new Map<number, string>();
  return {
    name,
    by: source.by ?? 'application',
    requestsPerSecond: source.requestsPerSecond,
    intervalMs,
    burst,
    perHour: source.requestsPerHour ?? 0,
    perDay: source.requestsPerDay ?? 0,
    policyHeader: items.join(', '),
    source,
    remainingHeader(count) {
      const r = roughly(Math.max(0, Math.min(burst, Math.floor(count))));
      let field = remaining.get(r);
      if (field === undefined) {
        // t: seconds until the burst is whole again at the sustained rate.
        field = `"${name}";r=${r};t=${Math.ceil(((burst - r) * intervalMs) / 1000)}`;
        remaining.set(r, field);
      }
      return field;
    },
  };
}

/** A count as the RateLimit field gives it: exact up to 1,000, two significant digits (rounded down) above. */
function roughly(count: number): number {
  if (count < 1000) return count;
  const unit = 10 ** (Math.floor(Math.log10(count)) - 1);
  return Math.floor(count / unit) * unit;
}
