import { TokengateError } from '../errors.js';
import type { Applications } from './applications.js';
import type { Backend } from './backend.js';
import type { AuthorizationCodes } from './codes.js';
import type { Counters } from './counters.js';
import type { Grants } from './grants.js';
import type { Secrets } from './secrets.js';
import type { Sessions } from './sessions.js';
import type { Tokens } from './tokens/port.js';
import type { Users } from './users.js';

export type { ApplicationRecord, Applications } from './applications.js';
export type { AuthorizationCodeRecord, AuthorizationCodes, OpenIdSignIn } from './codes.js';
export type { Counters } from './counters.js';
export type { Approval, GrantRecord, Grants } from './grants.js';
export type { Secrets } from './secrets.js';
export type { SessionRecord, Sessions } from './sessions.js';
export type { Consumed } from './single-use.js';
export type {
  AccessTokenRecord,
  ActingParty,
  IdentityOrigin,
  IndexRevocation,
  RefreshTokenRecord,
  RevocationEvent,
  RevocationFeed,
  Tokens,
} from './tokens/port.js';
export { REVOKED_MARK_MS } from './tokens/port.js';
export type { UserRecord, Users } from './users.js';

/**
 * The shared store: one port per capability, each with a memory implementation (single
 * instance, the embedded default) and a Redis one (shared by every sidecar), both passing the
 * port's part of test/store-contract.test.ts, plus the store's lifecycle.
 *
 * Token and code values never reach the store: their ports take the SHA-256 digest from
 * `tokenDigest()`. Times are Unix epoch milliseconds. Records past `expiresAt` are gone: the
 * store expires them itself (Redis TTLs, the memory store's sweep), not only on read.
 */
export interface Store {
  /** Where the data lives: the rooms that keep keys of their own build on it (./backend.ts). */
  readonly backend: Backend;
  readonly applications: Applications;
  readonly users: Users;
  readonly codes: AuthorizationCodes;
  /** Access and refresh tokens, their revocation and the revocation feed; the one port the cache wraps. */
  readonly tokens: Tokens;
  readonly sessions: Sessions;
  /** What each user approved for each application (remembered consent). */
  readonly grants: Grants;
  /** The login throttle's counters. */
  readonly counters: Counters;
  readonly secrets: Secrets;

  /** Resolves when the store answers; rejects with StoreUnavailableError otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** `store` with its tokens read through `tokens` (the token cache in front of them); lifecycle stays the store's. */
export function withTokens(store: Store, tokens: Tokens): Store {
  return {
    backend: store.backend,
    applications: store.applications,
    users: store.users,
    codes: store.codes,
    tokens,
    sessions: store.sessions,
    grants: store.grants,
    counters: store.counters,
    secrets: store.secrets,
    ping: () => store.ping(),
    close: () => store.close(),
  };
}

/** The store could not be reached or did not answer in time: callers answer 503, never 401. `detail` says what failed, for the log. */
export class StoreUnavailableError extends TokengateError {
  constructor(detail: string, options: { cause?: unknown } = {}) {
    super('STORE_UNAVAILABLE', { detail, cause: options.cause });
    this.name = 'StoreUnavailableError';
  }
}
