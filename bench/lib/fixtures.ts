import { randomBytes } from 'node:crypto';
import type { AccessTokenRecord, Store } from '../../src/store/store.js';
import type { TokenKind } from '../../src/token/kinds.js';
import { tokenDigest, type TokenMinter } from '../../src/token/token-value.js';

/**
 * Tokens the scenarios present, written straight into the run's Redis through the project's
 * own store (same keys and records the issuer writes), minted with the run's tag key so the
 * gateway's tag check accepts them.
 */

const HOUR_MS = 3_600_000;
export const USER_CLIENT_ID = 'bench-web';

export function accessTokenRecord(kind: TokenKind, clientId: string, index: number, now = Date.now()): AccessTokenRecord {
  return {
    kind,
    clientId,
    userId: kind === 'user' ? `user-${index % 1000}` : null,
    scopes: ['public'],
    familyId: kind === 'user' ? `family-${index}` : null,
    issuedAt: now,
    expiresAt: now + 2 * HOUR_MS,
  };
}

/** Mints `count` tokens of one kind and saves them, a chunk of concurrent (auto-pipelined) writes at a time. */
export async function seedAccessTokens(store: Store, minter: TokenMinter, count: number, kind: TokenKind, clientId: string): Promise<string[]> {
  const tokens: string[] = [];
  // Small enough that the writes in flight die young (larger chunks spent half the time in GC).
  const CHUNK = 500;
  for (let start = 0; start < count; start += CHUNK) {
    const writes: Promise<void>[] = [];
    for (let index = start; index < Math.min(count, start + CHUNK); index++) {
      const token = minter.mint();
      tokens.push(token);
      writes.push(store.saveAccessToken(tokenDigest(token), accessTokenRecord(kind, clientId, index)));
    }
    await Promise.all(writes);
  }
  return tokens;
}

/** Random 43-character base64url values, the shape of a real token, none carrying the tag. */
export function forgedTokens(minter: TokenMinter, count: number): string[] {
  const tokens: string[] = [];
  while (tokens.length < count) {
    const candidate = randomBytes(32).toString('base64url');
    // A 2^-64 chance, but a flood that counts store calls must not contain a single real tag.
    if (!minter.hasValidTag(candidate)) tokens.push(candidate);
  }
  return tokens;
}

/** Cycles through a list: the load generator asks for the next value on every request. */
export function rotation<T>(values: readonly T[]): () => T {
  if (values.length === 0) throw new Error('nothing to rotate through');
  let next = 0;
  return () => {
    const value = values[next]!;
    next = next + 1 === values.length ? 0 : next + 1;
    return value;
  };
}
