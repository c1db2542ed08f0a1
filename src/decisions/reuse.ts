import { decodeJwt } from 'jose';
import type { Checked } from '../gateway/check.js';
import type { GatewayRoute } from '../gateway/route-table.js';

/**
 * Decisions an ingress may cache. The mark is a header of tokengate's own rather than
 * `Cache-Control: max-age`: a generic HTTP cache (nginx's proxy_cache, Varnish) would store a
 * max-age answer under its default key, the check request's URL, which is the same for every
 * client, and hand one client's 200 to the next. Only ingress code written for this header, which
 * keys each decision by the request and a digest of its credential, acts on it; every answer of
 * the decision listener tells a generic cache `no-store`.
 */
export const CACHE_SECONDS_HEADER = 'x-tokengate-cache-seconds';

/**
 * Beside the mark, the token's digest (SHA-256, base64url: the store's key and what the
 * revocation feed names, ./revocations.ts), never the token: an ingress that keeps the decision
 * keeps the digest with it, and drops the decision when the feed names it.
 */
export const TOKEN_DIGEST_HEADER = 'x-tokengate-token-digest';

/**
 * How many whole seconds an ingress may reuse an admitting decision: the route's bound, never
 * past the token's expiry (floored, so a reused decision never outlives the token), nor past the
 * signed identity it carries, less a second for the hop to the service that verifies it (an
 * ingress copies the kept assertion onto every request it lets through); and 0 for a decision
 * each request must get: one a rate limit metered, and any request with a `DPoP` header, which
 * every admitted DPoP request has (its proof is new each time, and marked against replay).
 */
export function reusableSeconds(route: GatewayRoute<unknown>, checked: Checked, proofHeader: string | string[] | undefined): number {
  if (route.decisionCacheSeconds === 0 || checked.admission !== null || proofHeader !== undefined) return 0;
  const now = Date.now();
  let remainingSeconds = Math.floor((checked.token.expiresAt - now) / 1000);
  if (checked.assertion !== null) remainingSeconds = Math.min(remainingSeconds, assertionRemainingSeconds(checked.assertion, now) - ASSERTION_HOP_SECONDS);
  return Math.max(0, Math.min(route.decisionCacheSeconds, remainingSeconds));
}

/** Kept for the hop from the ingress to the service and its verification: a verifier refuses an assertion from its `exp` on. */
const ASSERTION_HOP_SECONDS = 1;

/** Whole seconds until an assertion (our own, just signed or held: its `exp` is there) expires. */
function assertionRemainingSeconds(assertion: string, now: number): number {
  const { exp } = decodeJwt(assertion);
  return exp === undefined ? 0 : Math.floor((exp * 1000 - now) / 1000);
}
