import type { AccessTokenRecord } from './store.js';

/**
 * An access token the gateway has verified, as every request that presents it shares it: the
 * store's record, frozen, with its scopes also as the one space-separated string the scope
 * identity header carries (built once per token, not once per request).
 */
export interface VerifiedToken extends Readonly<Omit<AccessTokenRecord, 'audience'>> {
  readonly scope: string;
  /** The record's audience; empty when it has none. */
  readonly audience: string[];
}

export function verifiedToken(record: AccessTokenRecord): VerifiedToken {
  return Object.freeze({
    ...record,
    scopes: Object.freeze([...record.scopes]) as string[],
    scope: record.scopes.join(' '),
    audience: Object.freeze([...(record.audience ?? [])]) as string[],
  });
}
