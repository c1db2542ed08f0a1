import { createHmac, hkdfSync } from 'node:crypto';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { decodeKeyEncryptionKey } from '../identity/config-checks.js';
import { keySetStoreFor } from '../identity/key-set-store.js';
import type { OpenIdAlgorithm } from '../identity/signing-keys.js';
import type { Backend } from '../store/backend.js';
import { OpenIdKeys } from './keys.js';

/** The JOSE `typ` of an ID token. */
export const ID_TOKEN_TYPE = 'JWT';

/** OpenID Connect's signing and verifying, as the issuer's endpoints use it. */
export interface OpenIdConnect {
  /** Signs a JWT (header typ as given: 'JWT' for ID tokens, 'logout+jwt' for logout tokens) with the current OpenID key of `alg`. */
  sign(payload: Record<string, unknown>, alg: OpenIdAlgorithm, typ: string): Promise<string>;
  /** An ID token this deployment issued, as an id_token_hint: signature by any published OpenID key, our iss; expiry NOT checked. Null when it does not verify. */
  verifyIdTokenHint(token: string): Promise<{ sub: string; aud: string[]; sid?: string } | null>;
  /** The `sid` claim for a tokengate sign-in session, from the session's store key (not reversible to the cookie). */
  sessionId(sessionKey: string): string;
  /** The keys, for the JWKS endpoint and the admin API. */
  readonly keys: OpenIdKeys;
  /** The `iss` of ID tokens: the issuer identifier. */
  readonly issuer: string;
  /** How long resource services may keep the JWKS, in seconds. */
  readonly jwksMaxAgeSeconds: number;
}

/**
 * Opens the deployment's ID token keys (making the first of each algorithm when there is none)
 * and starts reading them again on a timer, as the signed identity's. `tagKey`: the token tag
 * key, from which the key encryption key is derived when none is configured, and the key of the
 * session ids. `signs`: this process serves the public side (signs, publishes, rotates when due).
 */
export async function createOpenIdConnect(config: Readonly<Config>, backend: Backend, tagKey: Buffer, log: Logger, signs: boolean): Promise<OpenIdConnect> {
  const settings = config.openidConnect;
  const configured = settings.keyEncryptionKey === '' ? null : decodeKeyEncryptionKey(settings.keyEncryptionKey);
  if (typeof configured === 'string') throw new Error(`openidConnect.keyEncryptionKey: ${configured}`);
  const encryptionKey = configured ?? new Uint8Array(hkdfSync('sha256', tagKey, new Uint8Array(0), 'tokengate openid signing keys', 32));
  const sessionIdKey = Buffer.from(hkdfSync('sha256', tagKey, new Uint8Array(0), 'tokengate openid session ids', 32));
  const keys = new OpenIdKeys(settings, (name) => keySetStoreFor(backend, name), encryptionKey, log.child({ room: 'openid' }));
  await keys.start(signs);
  const issuer = config.issuer.issuerUrl.replace(/\/+$/, '');
  return {
    keys,
    issuer,
    jwksMaxAgeSeconds: settings.jwksMaxAgeSeconds,
    sign: (payload, alg, typ) => keys.sign(payload, alg, typ),
    async verifyIdTokenHint(token) {
      const claims = await keys.verifiedClaims(token, ID_TOKEN_TYPE);
      if (claims === null || claims.iss !== issuer || typeof claims.sub !== 'string') return null;
      const aud = typeof claims.aud === 'string' ? [claims.aud] : Array.isArray(claims.aud) ? claims.aud : [];
      if (aud.length === 0) return null;
      return { sub: claims.sub, aud, ...(typeof claims.sid === 'string' ? { sid: claims.sid } : {}) };
    },
    sessionId: (sessionKey) => createHmac('sha256', sessionIdKey).update(sessionKey).digest('base64url'),
  };
}

export { openIdKeySetName } from './keys.js';
export { OPENID_ALGORITHMS, type OpenIdAlgorithm } from '../identity/signing-keys.js';
