import type { IssuerConfig } from '../config/schema.js';
import { TokengateError } from '../errors.js';
import type { Store } from '../store/store.js';
import { decoyPasswordHash, hashPassword, needsRehash, verifyPassword } from './passwords.js';

/**
 * Where the authorization page checks e-mail and password. A real deployment has its users
 * already (the ticketing service's own database, reached over HTTP); operator-created users in
 * the store serve a stand-alone issuer.
 */
export interface UserSource {
  /**
   * The user id when the credentials are valid, null when they are not. Throws
   * UserSourceUnavailableError when the answer is unknown: a broken user service must never
   * look like a wrong password to the person typing it.
   */
  verify(email: string, password: string): Promise<string | null>;
}

export class UserSourceUnavailableError extends TokengateError {
  constructor(detail: string, options: { cause?: unknown } = {}) {
    super('USER_SOURCE_UNAVAILABLE', { detail, cause: options.cause });
    this.name = 'UserSourceUnavailableError';
  }
}

export function createUserSource(config: Readonly<IssuerConfig['users']>, store: Store): UserSource {
  return config.source === 'http' ? httpUserSource(config.url, config.timeoutMs) : storeUserSource(store);
}

function storeUserSource(store: Store): UserSource {
  return {
    async verify(email, password) {
      const user = await store.users.findByEmail(email.toLowerCase());
      // An unknown e-mail still costs one scrypt run, so response time does not tell which
      // e-mail addresses have accounts.
      const valid = await verifyPassword(password, user?.passwordHash ?? (await decoyPasswordHash()));
      if (!valid || user === null) return null;
      // The one moment the password is known: a hash made at a lower cost is replaced by one at today's.
      if (needsRehash(user.passwordHash)) await store.users.replacePasswordHash(user.id, user.passwordHash, await hashPassword(password));
      return user.id;
    },
  };
}

/** Statuses by which the user service says "these credentials are wrong"; anything else but 200 is a failure of the service. */
const REJECTED = new Set([401, 403, 404]);

function httpUserSource(url: string, timeoutMs: number): UserSource {
  return {
    async verify(email, password) {
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json' },
          body: JSON.stringify({ email, password }),
          redirect: 'error',
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (error) {
        throw new UserSourceUnavailableError(`user service unreachable: ${(error as Error).name}`, { cause: error });
      }
      if (REJECTED.has(response.status)) {
        await response.body?.cancel();
        return null;
      }
      if (response.status !== 200) {
        await response.body?.cancel();
        throw new UserSourceUnavailableError(`user service answered ${response.status}`);
      }
      const id = await readUserId(response);
      if (id === null) throw new UserSourceUnavailableError('user service answered 200 without a usable "id"');
      return id;
    },
  };
}

async function readUserId(response: Response): Promise<string | null> {
  let body: unknown;
  try {
    body = await response.json();
  } catch {
    return null;
  }
  const id = typeof body === 'object' && body !== null ? (body as { id?: unknown }).id : undefined;
  if (typeof id === 'string' && id.length > 0) return id;
  if (typeof id === 'number' && Number.isSafeInteger(id)) return String(id);
  return null;
}
