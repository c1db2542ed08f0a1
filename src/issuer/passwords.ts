import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';

/**
 * Password hashes: scrypt, stored as `scrypt$N$r$p$salt$hash` (salt and hash base64url), so each
 * hash says what it was made with and is checked with its own parameters.
 *
 * New hashes use N=2^17, r=8, p=1, the first of the settings OWASP's Password Storage Cheat
 * Sheet recommends for scrypt. A stored hash made with less is replaced at the user's next
 * successful sign-in (`needsRehash`), the only moment the password is known.
 *
 * One run at N=2^17, r=8 needs 128 MiB (128 * N * r bytes), allocated by OpenSSL outside the V8
 * heap, so the image's heap limit does not bound it: at most MAX_CONCURRENT_RUNS run at once in
 * a process, the others wait their turn. Peak memory for sign-ins is then 256 MiB per process
 * (each of `server.workers`), whatever the number of people signing in at once.
 */

export interface ScryptParameters {
  readonly N: number;
  readonly r: number;
  readonly p: number;
}

export const SCRYPT_PARAMETERS: ScryptParameters = { N: 2 ** 17, r: 8, p: 1 };
const KEY_LENGTH = 64;
/** scrypt runs at once in one process: each holds 128 * N * r bytes (128 MiB at the current setting). */
const MAX_CONCURRENT_RUNS = 2;
/** Stored parameters beyond these are not ours: refused rather than run (N=2^20, r=8 would need 1 GiB). */
const MAX_N = 2 ** 18;
const MAX_R = 16;
const MAX_P = 4;

let running = 0;
const waiting: Array<() => void> = [];

async function withRunSlot<T>(run: () => Promise<T>): Promise<T> {
  if (running >= MAX_CONCURRENT_RUNS) await new Promise<void>((resolve) => waiting.push(resolve));
  else running += 1;
  try {
    return await run();
  } finally {
    // The slot passes straight to the next in line, or is freed.
    const next = waiting.shift();
    if (next === undefined) running -= 1;
    else next();
  }
}

/** Memory OpenSSL's scrypt needs for these parameters (V: 128 * r * (N + 2), B: 128 * r * p), with room to spare. */
function memoryFor({ N, r, p }: ScryptParameters): number {
  return 128 * r * (N + 2 + p) + 1024 * 1024;
}

function derive(password: string, salt: Buffer, parameters: ScryptParameters): Promise<Buffer> {
  return withRunSlot(
    () =>
      new Promise((resolve, reject) => {
        scrypt(password.normalize('NFKC'), salt, KEY_LENGTH, { ...parameters, maxmem: memoryFor(parameters) }, (error, key) =>
          error ? reject(error) : resolve(key),
        );
      }),
  );
}

export async function hashPassword(password: string, parameters: ScryptParameters = SCRYPT_PARAMETERS): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, parameters);
  return ['scrypt', parameters.N, parameters.r, parameters.p, salt.toString('base64url'), key.toString('base64url')].join('$');
}

interface StoredHash {
  parameters: ScryptParameters;
  salt: Buffer;
  hash: Buffer;
}

function parseHash(encoded: string): StoredHash | null {
  const [scheme, n, r, p, salt, hash] = encoded.split('$');
  if (scheme !== 'scrypt' || salt === undefined || hash === undefined) return null;
  const parameters = { N: Number(n), r: Number(r), p: Number(p) };
  const { N } = parameters;
  if (!Number.isSafeInteger(N) || N < 2 || N > MAX_N || (N & (N - 1)) !== 0) return null;
  if (!Number.isSafeInteger(parameters.r) || parameters.r < 1 || parameters.r > MAX_R) return null;
  if (!Number.isSafeInteger(parameters.p) || parameters.p < 1 || parameters.p > MAX_P) return null;
  return { parameters, salt: Buffer.from(salt, 'base64url'), hash: Buffer.from(hash, 'base64url') };
}

export async function verifyPassword(password: string, encoded: string): Promise<boolean> {
  const stored = parseHash(encoded);
  if (stored === null) return false;
  const actual = await derive(password, stored.salt, stored.parameters);
  return actual.length === stored.hash.length && timingSafeEqual(actual, stored.hash);
}

/** Whether a stored hash was made with less than the current cost (in memory-hard work, N * r, or in p). */
export function needsRehash(encoded: string): boolean {
  const stored = parseHash(encoded);
  if (stored === null) return false;
  const { N, r, p } = stored.parameters;
  return N * r < SCRYPT_PARAMETERS.N * SCRYPT_PARAMETERS.r || (N * r === SCRYPT_PARAMETERS.N * SCRYPT_PARAMETERS.r && p < SCRYPT_PARAMETERS.p);
}

let decoy: Promise<string> | undefined;

/**
 * A hash of a random password, verified against when the e-mail is unknown so that a login
 * for a missing account takes as long as one for an existing account. Made on first use, not
 * at import: a scrypt run costs every process that never serves a login (CLI, gateway-only).
 */
export function decoyPasswordHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(16).toString('base64url'));
  return decoy;
}
