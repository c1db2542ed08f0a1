import type { AccessTokenRecord, Store } from '../../src/store/store.js';
import { tokenDigest, type TokenMinter } from '../../src/token/token-value.js';

/**
 * Tokens the rows present, minted with the run's tag key so the gateway's tag check accepts
 * them; stored straight into the run's Redis through the project's own store (the same keys and
 * records the issuer writes), or, for the unknown-token flood, never stored at all.
 */

const HOUR_MS = 3_600_000;
export const USER_CLIENT_ID = 'bench-web';

function userTokenRecord(clientId: string, index: number, now = Date.now()): AccessTokenRecord {
  return {
    kind: 'user',
    clientId,
    userId: `user-${index % 1000}`,
    scopes: ['public'],
    familyId: `family-${index}`,
    issuedAt: now,
    expiresAt: now + 2 * HOUR_MS,
  };
}

/** Mints `count` user tokens and saves them. */
export async function seedUserTokens(store: Store, minter: TokenMinter, count: number, clientId = USER_CLIENT_ID): Promise<string[]> {
  const tokens = Array.from({ length: count }, () => minter.mint());
  await saveUserTokens(store, tokens, clientId);
  return tokens;
}

/** Saves `tokens` as user tokens, a chunk of concurrent (auto-pipelined) writes at a time. */
export async function saveUserTokens(store: Store, tokens: readonly string[], clientId = USER_CLIENT_ID): Promise<void> {
  // Small enough that the writes in flight die young (larger chunks spent half the time in GC).
  const CHUNK = 500;
  for (let start = 0; start < tokens.length; start += CHUNK) {
    const writes: Promise<void>[] = [];
    for (let index = start; index < Math.min(tokens.length, start + CHUNK); index++) {
      writes.push(store.tokens.saveAccessToken(tokenDigest(tokens[index]!), userTokenRecord(clientId, index)));
    }
    await Promise.all(writes);
  }
}

/** Well-tagged tokens that no store holds: each costs the gateway a store read that finds nothing. */
export function unknownTokens(minter: TokenMinter, count: number): string[] {
  return Array.from({ length: count }, () => minter.mint());
}

/** Hands out the values in order, one per request (autocannon asks once per request sent); a row sends each at most once. */
export function rotation(values: readonly string[]): () => string {
  let next = 0;
  return () => {
    const value = values[next]!;
    next = next + 1 === values.length ? 0 : next + 1;
    return value;
  };
}
