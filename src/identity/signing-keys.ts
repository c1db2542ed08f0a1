import { calculateJwkThumbprint, compactDecrypt, CompactEncrypt, exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';

/** The algorithms an identity assertion may be signed with (`signedIdentity.algorithm`). */
export const IDENTITY_ALGORITHMS = ['ES256', 'EdDSA'] as const;
export type IdentityAlgorithm = (typeof IDENTITY_ALGORITHMS)[number];
/** The algorithms an ID token may be signed with (`openidConnect.algorithms`): RS256 is OpenID Connect's mandatory one. */
export const OPENID_ALGORITHMS = ['RS256', 'ES256'] as const;
export type OpenIdAlgorithm = (typeof OPENID_ALGORITHMS)[number];
/** Every algorithm a key of a key set may have. */
export const SIGNING_ALGORITHMS = ['ES256', 'EdDSA', 'RS256'] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

/**
 * One signing key as the store keeps it: the public half as a JWK, the private half as a JWE
 * (`dir`, A256GCM) under the key encryption key, never in the clear. `activatesAt`: from then
 * on sidecars sign with it; it is published from `createdAt`.
 */
export interface StoredKey {
  readonly kid: string;
  readonly alg: SigningAlgorithm;
  readonly publicJwk: JWK;
  readonly privateJwe: string;
  /** Epoch ms. */
  readonly createdAt: number;
  /** Epoch ms. */
  readonly activatesAt: number;
}

/** A stored key opened in this process: its private half imported for signing. */
export interface OpenKey extends StoredKey {
  readonly privateKey: CryptoKey;
}

/** A new key pair; `kid` is the RFC 7638 thumbprint of its public half. RSA keys are 2048 bits (RFC 7518 3.3's minimum, what OpenID providers publish). */
export async function createKey(alg: SigningAlgorithm, encryptionKey: Uint8Array, createdAt: number, activatesAt: number): Promise<StoredKey> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true, ...(alg === 'RS256' ? { modulusLength: 2048 } : {}) });
  const publicJwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(publicJwk);
  const privateJwk = await exportJWK(privateKey);
  const privateJwe = await new CompactEncrypt(new TextEncoder().encode(JSON.stringify(privateJwk)))
    .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid })
    .encrypt(encryptionKey);
  return { kid, alg, publicJwk: { ...publicJwk, kid, alg, use: 'sig' }, privateJwe, createdAt, activatesAt };
}

/** Thrown when a stored key cannot be opened: another key encryption key wrote it, or the value is not a key set. */
export class UnreadableKeyError extends Error {
  override name = 'UnreadableKeyError';
}

/** `encryptionKeySetting`: the config key of the key encryption key, named when the key cannot be opened. */
export async function openKey(stored: StoredKey, encryptionKey: Uint8Array, encryptionKeySetting: string): Promise<OpenKey> {
  let privateJwk: JWK;
  try {
    const { plaintext } = await compactDecrypt(stored.privateJwe, encryptionKey);
    privateJwk = JSON.parse(new TextDecoder().decode(plaintext)) as JWK;
  } catch {
    throw new UnreadableKeyError(
      `the stored signing key ${stored.kid} cannot be decrypted: every sidecar of a deployment needs the same ${encryptionKeySetting} (or, unset, the same token tag key)`,
    );
  }
  const privateKey = (await importJWK(privateJwk, stored.alg)) as CryptoKey;
  return { ...stored, privateKey };
}

/** The stored key set, oldest activation first; a value that is not one is an error, never an empty set (that would make a new key beside keys in use). */
export function parseKeySet(serialized: string): StoredKey[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(serialized);
  } catch {
    throw new UnreadableKeyError('the stored signing key set is not JSON');
  }
  const keys = (parsed as { keys?: unknown }).keys;
  if (!Array.isArray(keys) || keys.length === 0 || !keys.every(isStoredKey)) throw new UnreadableKeyError('the stored signing key set has no valid keys');
  return [...keys].sort((a, b) => a.activatesAt - b.activatesAt);
}

export function serializeKeySet(keys: readonly StoredKey[]): string {
  return JSON.stringify({ keys });
}

function isStoredKey(value: unknown): value is StoredKey {
  const key = value as StoredKey;
  return (
    typeof key === 'object' &&
    key !== null &&
    typeof key.kid === 'string' &&
    (SIGNING_ALGORITHMS as readonly string[]).includes(key.alg) &&
    typeof key.publicJwk === 'object' &&
    typeof key.privateJwe === 'string' &&
    Number.isFinite(key.createdAt) &&
    Number.isFinite(key.activatesAt)
  );
}
