import type { TokengateContext } from '../context.js';
import { hasTokenShape, tokenDigest } from '../token/token-value.js';
import type { CachedTokens } from '../store/cached.js';
import { StoreUnavailableError, type AccessTokenRecord } from '../store/store.js';

import { verifiedToken, type VerifiedToken } from '../store/verified-token.js';
import type { ChildSpan, RequestTrace } from '../tracing/index.js';
import type { RouteDenialReason } from './denials.js';

export type VerificationFailure = Extract<RouteDenialReason, 'malformed_token' | 'forged_token' | 'unknown_token' | 'expired_token' | 'store_unavailable'>;

/**
 * The token of a well-shaped credential (`digest`: its digest, see tokenDigestOf), or why it is
 * refused. A token the cache answers for is taken from it first, with
 * no promise and no I/O: the cache only holds tokens whose tag was checked when they were first
 * read, so a hit skips the tag check, whose HMAC is the costliest step of a cached request.
 * Other values that cannot be this deployment's (wrong shape, or a tag another key made) are
 * refused without a store call, so a flood of made-up tokens never reaches Redis. Everything
 * else is one store read (through the cache when it is on). An unreachable store is a 503,
 * never a 401: the token may well be valid.
 */
export function verifyToken(
  context: TokengateContext,
  token: string,
  digest: string,
  trace: RequestTrace | null = null,
): VerifiedToken | VerificationFailure | Promise<VerifiedToken | VerificationFailure> {
  const cache = context.cache;
  // Fresh entries never outlive their token, so a hit needs no expiry check either.
  const cached = cache?.peek(digest);
  if (cached !== undefined && cache!.answers(cached)) {
    trace?.set('tokengate.cache', 'hit');
    return cached;
  }
  if (!context.minter.hasValidTag(token)) {
    context.metrics.forgedTokens.inc();
    return 'forged_token';
  }
  const read = trace !== null && trace.recording ? storeReadSpan(trace, cache, digest, cached) : null;
  return readToken(cache === null ? context.store.tokens.getAccessToken(digest).then(verifiedOrNull) : cache.miss(digest, cached), read);
}

/** The cache's answer on the request's span, and a child span for the store read when there is one (before the cache forgets what it knew). */
function storeReadSpan(trace: RequestTrace, cache: CachedTokens | null, digest: string, cached: VerifiedToken | undefined): ChildSpan | null {
  const outcome =
    cache === null
      ? 'off'
      : cached !== undefined && cached.expiresAt <= Date.now()
        ? 'expired'
        : cached === undefined && cache.knowsUnknown(digest)
          ? 'negative'
          : 'miss';
  trace.set('tokengate.cache', outcome);
  return outcome === 'off' || outcome === 'miss' ? trace.child('tokengate.store.read_token') : null;
}

async function readToken(lookup: Promise<VerifiedToken | null>, read: ChildSpan | null): Promise<VerifiedToken | VerificationFailure> {
  let token: VerifiedToken | null;
  try {
    token = await lookup;
    read?.end();
  } catch (error) {
    read?.end(error instanceof StoreUnavailableError ? 'store_unavailable' : 'error');
    if (error instanceof StoreUnavailableError) return 'store_unavailable';
    throw error;
  }
  if (token === null) return 'unknown_token';
  // Stores drop expired records themselves; a record read a moment ago may still outlive its token by a moment.
  if (token.expiresAt <= Date.now()) return 'expired_token';
  return token;
}

function verifiedOrNull(record: AccessTokenRecord | null): VerifiedToken | null {
  return record === null ? null : verifiedToken(record);
}

/** The digest of a credential's token, computed once for the steps that key on it; null for a value of the wrong shape (refused without a store call). */
export function tokenDigestOf(token: string): string | null {
  return hasTokenShape(token) ? tokenDigest(token) : null;
}
