import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Server nonces of the token endpoint (RFC 9449 section 8), without state: a nonce is an HMAC
 * of the current time slot under a key every sidecar derives from the shared token tag key, so
 * any sidecar accepts what another handed out, and no store call is made. A nonce is accepted
 * in its own slot and the next one: for between one and two `lifetimeMs`.
 */
export class NonceIssuer {
  private readonly key: Buffer;

  constructor(
    tagKey: Buffer,
    private readonly lifetimeMs: number,
  ) {
    this.key = createHmac('sha256', tagKey).update('tokengate dpop nonce key').digest();
  }

  /** The nonce to hand out now (`DPoP-Nonce`). */
  current(now = Date.now()): string {
    return this.nonceOf(Math.floor(now / this.lifetimeMs));
  }

  accepts(nonce: string | undefined, now = Date.now()): boolean {
    if (nonce === undefined) return false;
    const slot = Math.floor(now / this.lifetimeMs);
    return this.matches(nonce, slot) || this.matches(nonce, slot - 1);
  }

  private matches(nonce: string, slot: number): boolean {
    const expected = Buffer.from(this.nonceOf(slot));
    const given = Buffer.from(nonce);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  private nonceOf(slot: number): string {
    return createHmac('sha256', this.key).update(`slot:${slot}`).digest('base64url');
  }
}
