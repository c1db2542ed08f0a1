import { compactVerify, createLocalJWKSet, decodeJwt, decodeProtectedHeader, SignJWT, type JWTPayload } from 'jose';
import type { Logger } from 'pino';
import type { OpenIdConnectConfig } from '../config/schema.js';
import { KeyRing } from '../identity/key-ring.js';
import type { KeySetStore } from '../identity/key-set-store.js';
import type { OpenIdAlgorithm } from '../identity/signing-keys.js';
import { openIdKeyTimeline } from './config-checks.js';

/** The store key of each algorithm's ID token key set: none shared with the signed identity's (`identity-keys`), so neither verifier accepts the other's tokens. */
export function openIdKeySetName(algorithm: OpenIdAlgorithm): string {
  return `openid-keys-${algorithm.toLowerCase()}`;
}

/**
 * The deployment's ID token keys: one key ring per configured algorithm (each rotating on the
 * signed identity's timeline, `openidConnect`'s numbers), published together as one JWKS.
 */
export class OpenIdKeys {
  readonly rings: ReadonlyMap<OpenIdAlgorithm, KeyRing>;
  private published: { body: string; keys: ReturnType<typeof createLocalJWKSet> } | null = null;

  constructor(settings: OpenIdConnectConfig, storeFor: (name: string) => KeySetStore, encryptionKey: Uint8Array, log: Logger) {
    this.rings = new Map(
      settings.algorithms.map((algorithm) => [
        algorithm,
        new KeyRing(storeFor(openIdKeySetName(algorithm)), openIdKeyTimeline(settings, algorithm), encryptionKey, log, {
          key: `ID token signing key (${algorithm})`,
          encryptionKeySetting: 'openidConnect.keyEncryptionKey',
        }),
      ]),
    );
  }

  async start(onTimer: boolean): Promise<void> {
    await Promise.all([...this.rings.values()].map((ring) => ring.start(onTimer)));
  }

  stop(): void {
    for (const ring of this.rings.values()) ring.stop();
  }

  /** The JWKS body: every algorithm's keys published now. */
  jwksBody(): string {
    return JSON.stringify({ keys: [...this.rings.values()].flatMap((ring) => (JSON.parse(ring.jwksBody()) as { keys: unknown[] }).keys) });
  }

  /** Signs `payload` as it is with the key of `algorithm` signing now. */
  async sign(payload: Record<string, unknown>, algorithm: OpenIdAlgorithm, typ: string): Promise<string> {
    const ring = this.rings.get(algorithm);
    if (ring === undefined) throw new Error(`ID tokens are not signed with ${algorithm} here (openidConnect.algorithms)`);
    const key = ring.signingKey(Date.now());
    return new SignJWT(payload as JWTPayload).setProtectedHeader({ alg: key.alg, kid: key.kid, typ }).sign(key.privateKey);
  }

  /**
   * The claims of a JWT of type `typ` signed by a key published now, its expiry not checked (an
   * `id_token_hint` names a sign-in that may be over); null when it does not verify.
   */
  async verifiedClaims(token: string, typ: string): Promise<JWTPayload | null> {
    try {
      if (decodeProtectedHeader(token).typ !== typ) return null;
      await compactVerify(token, this.publishedKeys(), { algorithms: [...this.rings.keys()] });
      return decodeJwt(token);
    } catch {
      return null;
    }
  }

  private publishedKeys(): ReturnType<typeof createLocalJWKSet> {
    const body = this.jwksBody();
    if (this.published?.body !== body) this.published = { body, keys: createLocalJWKSet(JSON.parse(body) as Parameters<typeof createLocalJWKSet>[0]) };
    return this.published.keys;
  }
}
