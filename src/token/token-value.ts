import { createHmac, hash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Token values: 32 bytes encoded as 43 characters of base64url, the same shape as the
 * ticketing service's tokens. The first 24 bytes are CSPRNG output; the last 8 are an
 * HMAC-SHA256 tag of those 24 bytes under the deployment's tag key. A value this deployment
 * did not mint fails the tag check and is refused without a store call (forged-token floods
 * never reach Redis). 192 random bits keep guessing hopeless; the 64-bit tag makes a forged
 * value that passes the tag check a 1 in 2^64 event, and even that one is then unknown to the
 * store.
 */
export const TOKEN_LENGTH = 43;
const RANDOM_BYTES = 24;
const TAG_BYTES = 8;
const BASE64URL_43 = /^[A-Za-z0-9_-]{43}$/;

export interface TokenMinter {
  /** A fresh token value carrying this deployment's tag. */
  mint(): string;
  /** True when `value` has the right shape and this deployment's tag. No I/O. */
  hasValidTag(value: string): boolean;
}

export function createTokenMinter(tagKey: Buffer): TokenMinter {
  if (tagKey.length < 32) throw new Error('the token tag key must be at least 32 bytes');
  const tagOf = (random: Buffer): Buffer => createHmac('sha256', tagKey).update(random).digest().subarray(0, TAG_BYTES);
  return {
    mint() {
      const random = randomBytes(RANDOM_BYTES);
      return Buffer.concat([random, tagOf(random)]).toString('base64url');
    },
    hasValidTag(value) {
      if (!hasTokenShape(value)) return false;
      const raw = Buffer.from(value, 'base64url');
      // 43 base64url characters hold 258 bits: a value whose spare 2 bits are set decodes to the
      // same bytes as another value, so re-encode to refuse non-canonical spellings.
      if (raw.length !== RANDOM_BYTES + TAG_BYTES || raw.toString('base64url') !== value) return false;
      return timingSafeEqual(raw.subarray(RANDOM_BYTES), tagOf(raw.subarray(0, RANDOM_BYTES)));
    },
  };
}

/** 43 characters of base64url: the only shape a token value of this deployment can have. No I/O. */
export function hasTokenShape(value: string): boolean {
  return value.length === TOKEN_LENGTH && BASE64URL_43.test(value);
}

/**
 * Store keys hold this digest, never the token value itself. `crypto.hash` (one call, no Hash
 * object) because this runs on every gateway request, before the cache lookup.
 */
export function tokenDigest(value: string): string {
  return hash('sha256', value, 'base64url');
}

/** A new random tag key, base64url encoded (used when the config gives none). */
export function generateTagKey(): string {
  return randomBytes(32).toString('base64url');
}

/** Decodes a configured or shared tag key; accepts base64url/base64 of at least 32 bytes. */
export function decodeTagKey(encoded: string): Buffer {
  const key = Buffer.from(encoded, 'base64url');
  if (key.length < 32) throw new Error('must be at least 32 bytes, base64url encoded (43+ characters)');
  return key;
}
