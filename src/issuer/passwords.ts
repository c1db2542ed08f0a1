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

/** What every production hash is made with, and the least a stored hash may have to skip its rehash. */
export const PRODUCTION_SCRYPT_PARAMETERS: ScryptParameters = { N: 2 ** 17, r: 8, p: 1 };

/**
 * The explicit test mode and its one setting, as Django's test hashers and Devise's `stretches`:
 * a test suite signs in hundreds of times, and at N=2^17 each sign-in costs about a second of
 * CPU. `TOKENGATE_TEST_SCRYPT_N` (a power of two below 2^17) is honoured only beside
 * `TOKENGATE_TEST_MODE=1`; without it the variable is ignored here and refused at start
 * (`checkPasswordHashing`), so no production setting can lower the cost.
 */
export const TEST_MODE_VARIABLE = 'TOKENGATE_TEST_MODE';
export const TEST_SCRYPT_N_VARIABLE = 'TOKENGATE_TEST_SCRYPT_N';

type Environment = Readonly<Record<string, string | undefined>>;

function testScryptN(env: Environment): number | null {
  const value = env[TEST_SCRYPT_N_VARIABLE];
  if (value === undefined || value === '') return null;
  const N = Number(value);
  return Number.isSafeInteger(N) && N >= 2 && N < PRODUCTION_SCRYPT_PARAMETERS.N && (N & (N - 1)) === 0 ? N : null;
}

/** The parameters new hashes are made with in a process of this environment. */
export function scryptParametersFor(env: Environment): ScryptParameters {
  const N = env[TEST_MODE_VARIABLE] === '1' ? testScryptN(env) : null;
  return N === null ? PRODUCTION_SCRYPT_PARAMETERS : { ...PRODUCTION_SCRYPT_PARAMETERS, N };
}

/**
 * Why this environment may not start: the test setting outside test mode, or a value that is not
 * a power of two below the production N. `tokengate check` and `serve` refuse with it.
 */
export function passwordHashingProblem(env: Environment): string | null {
  const value = env[TEST_SCRYPT_N_VARIABLE];
  if (value === undefined || value === '') return null;
  if (env[TEST_MODE_VARIABLE] !== '1')
    return `${TEST_SCRYPT_N_VARIABLE} lowers the password hash's cost and is honoured only in the test mode (${TEST_MODE_VARIABLE}=1); production hashes use scrypt N=2^17: unset it`;
  if (testScryptN(env) === null) return `${TEST_SCRYPT_N_VARIABLE} must be a power of two from 2 to 2^16 (got "${value}")`;
  return null;
}

/** Read once at start: the process's own environment decides, for the server, the CLI and a test's own process alike. */
export const SCRYPT_PARAMETERS: ScryptParameters = scryptParametersFor(process.env);
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

/** The start-up check of the environment's password setting: `tokengate check` and `serve` refuse to run with a problem. */
export function checkPasswordHashing(_config: unknown, env: Environment): Array<{ path: string; message: string }> {
  const problem = passwordHashingProblem(env);
  return problem === null ? [] : [{ path: 'issuer', message: `(environment) ${problem}` }];
}
