import type { TokengateContext } from '../context.js';
import { StoreUnavailableError, type AccessTokenRecord } from '../store/store.js';
import { hasTokenShape, tokenDigest } from '../token/token-value.js';
import type { RouteDenialReason } from './denials.js';

export type VerificationFailure = Extract<RouteDenialReason, 'malformed_token' | 'forged_token' | 'unknown_token' | 'expired_token' | 'store_unavailable'>;

/**
 * The token's record, or why it is refused. A token the cache answers for is taken from it
 * first: the cache only holds tokens whose tag was checked when they were first read, so a hit
 * skips the tag check, whose HMAC is the costliest step of a cached request. Other values
 * that cannot be this deployment's (wrong shape, or a tag another key made) are refused
 * without a store call, so a flood of made-up tokens never reaches Redis. Everything else is
 * one `context.store.getAccessToken(digest)` (through the cache when it is on). An unreachable
 * store is a 503, never a 401: the token may well be valid.
 */
export async function verifyToken(context: TokengateContext, token: string): Promise<AccessTokenRecord | VerificationFailure> {
  if (!hasTokenShape(token)) return 'malformed_token';
  const digest = tokenDigest(token);
  // Fresh entries never outlive their token, so a hit needs no expiry check either.
  const cached = context.cache?.freshAccessToken(digest);
  if (cached !== undefined) return cached;
  if (!context.minter.hasValidTag(token)) {
    context.metrics.forgedTokens.inc();
    return 'forged_token';
  }
  let record: AccessTokenRecord | null;
  try {
    record = await context.store.getAccessToken(digest);
  } catch (error) {
    if (error instanceof StoreUnavailableError) return 'store_unavailable';
    throw error;
  }
  if (record === null) return 'unknown_token';
  // Stores drop expired records themselves; a cached record may still outlive its token by a moment.
  if (record.expiresAt <= Date.now()) return 'expired_token';
  return record;
}
