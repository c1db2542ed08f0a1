import { hkdfSync } from 'node:crypto';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { Backend } from '../store/backend.js';
import { AssertionSigner } from './assertions.js';
import { assertionIssuer, decodeKeyEncryptionKey, keyTimeline } from './config-checks.js';
import { KeyRing } from './key-ring.js';
import { keySetStoreFor } from './key-set-store.js';

/** The signed identity of one instance (`signedIdentity`): the deployment's keys as this process holds them, and the signer. */
export interface SignedIdentity {
  readonly ring: KeyRing;
  readonly signer: AssertionSigner;
  /** The header carrying the assertion, lower case. */
  readonly header: string;
  /** How long resource services may keep the JWKS, in seconds. */
  readonly jwksMaxAgeSeconds: number;
}

/**
 * Opens the deployment's signing keys (making the first when there is none) and starts reading
 * them again on a timer. `tagKey`: the token tag key, from which the key encryption key is derived
 * when none is configured. `signs`: this process signs and publishes (it serves the public side);
 * a primary that only answers the admin API rotates, and reads no keys on a timer.
 */
export async function createSignedIdentity(config: Readonly<Config>, backend: Backend, tagKey: Buffer, log: Logger, signs: boolean): Promise<SignedIdentity> {
  const settings = config.signedIdentity;
  const configured = settings.keyEncryptionKey === '' ? null : decodeKeyEncryptionKey(settings.keyEncryptionKey);
  if (typeof configured === 'string') throw new Error(`signedIdentity.keyEncryptionKey: ${configured}`);
  const encryptionKey = configured ?? new Uint8Array(hkdfSync('sha256', tagKey, new Uint8Array(0), 'tokengate identity signing keys', 32));
  const ring = new KeyRing(keySetStoreFor(backend), keyTimeline(settings), encryptionKey, log.child({ room: 'identity' }));
  await ring.start(signs);
  const signer = new AssertionSigner(ring, { issuer: assertionIssuer(config), lifetimeSeconds: settings.lifetimeSeconds, maxBytes: settings.maxBytes });
  return { ring, signer, header: settings.header.toLowerCase(), jwksMaxAgeSeconds: settings.jwksMaxAgeSeconds };
}

export { ASSERTION_TYPE, TOO_LARGE } from './assertions.js';
export { routeAudience } from './config-checks.js';
