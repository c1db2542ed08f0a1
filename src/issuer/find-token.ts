import type { TokengateContext } from '../context.js';
import type { AccessTokenRecord, RefreshTokenRecord } from '../store/store.js';
import { tokenDigest } from '../token/token-value.js';

export type FoundToken =
  { type: 'access_token'; digest: string; record: AccessTokenRecord } | { type: 'refresh_token'; digest: string; record: RefreshTokenRecord };

type Lookup = (context: TokengateContext, digest: string) => Promise<FoundToken | null>;

const lookUpAccessToken: Lookup = async (context, digest) => {
  const record = await context.store.tokens.getAccessToken(digest);
  return record === null || record.expiresAt <= Date.now() ? null : { type: 'access_token', digest, record };
};

const lookUpRefreshToken: Lookup = async (context, digest) => {
  const record = await context.store.tokens.getRefreshToken(digest);
  return record === null || record.expiresAt <= Date.now() ? null : { type: 'refresh_token', digest, record };
};

/**
 * A live token by value, for revocation and introspection. `token_type_hint` only decides which
 * kind is looked up first (RFC 7009 section 2.1, RFC 7662 section 2.1: the server MUST extend
 * its search to the other kinds); an unknown hint value is ignored, as both RFCs allow. Spent
 * refresh tokens are not live. A value without this deployment's tag costs no store call.
 */
export async function findToken(context: TokengateContext, value: string, hint: string | undefined): Promise<FoundToken | null> {
  if (!context.minter.hasValidTag(value)) return null;
  const digest = tokenDigest(value);
  const order = hint === 'refresh_token' ? [lookUpRefreshToken, lookUpAccessToken] : [lookUpAccessToken, lookUpRefreshToken];
  for (const lookup of order) {
    const found = await lookup(context, digest);
    if (found !== null) return found;
  }
  return null;
}

/** A live access token by value (refresh tokens are not looked up at all). */
export async function findAccessToken(context: TokengateContext, value: string): Promise<FoundToken | null> {
  return context.minter.hasValidTag(value) ? lookUpAccessToken(context, tokenDigest(value)) : null;
}
