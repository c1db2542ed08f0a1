import { RedisApplications } from './applications.js';
import type { RedisDoor } from './backend.js';
import { RedisAuthorizationCodes } from './codes.js';
import { RedisCounters } from './counters.js';
import { RedisGrants } from './grants.js';
import { IoredisDoor, type RedisDoorOptions } from './redis-door.js';
import { RedisSecrets } from './secrets.js';
import { RedisSessions } from './sessions.js';
import type { Store } from './store.js';
import { RedisTokens } from './tokens/redis.js';
import { RedisUsers } from './users.js';

/**
 * Key layout (every key under `keyPrefix`, the same on one server, Sentinel and Cluster; each
 * port's file names its own):
 *   app:<client_id>, apps                       ./applications.ts
 *   user:<id>, user-email:<email>, users        ./users.ts
 *   code:<digest>                               ./codes.ts
 *   at:<digest>, rt:<digest>, idx:user|client|family:<id>, idx:grant:<digest>, channel revocations   ./tokens/redis.ts
 *   session:<digest>                            ./sessions.ts
 *   grants:<user_id>, grant-users:<client_id>   ./grants.ts
 *   counter:<name>                              ./counters.ts
 *   secret:<name>                               ./secrets.ts
 *
 * No key carries a hash tag, so on a Cluster every key lands on the slot of its own name and
 * the keyspace spreads over every master. That works because on a Cluster every atomic step
 * touches one key.
 */

export type RedisStoreOptions = RedisDoorOptions;

/** Every port's records in Redis, through the door (./redis-door.ts) every room shares. */
export class RedisStore implements Store {
  readonly backend: RedisDoor;
  readonly applications: RedisApplications;
  readonly users: RedisUsers;
  readonly codes: RedisAuthorizationCodes;
  readonly tokens: RedisTokens;
  readonly sessions: RedisSessions;
  readonly grants: RedisGrants;
  readonly counters: RedisCounters;
  readonly secrets: RedisSecrets;

  constructor(options: RedisStoreOptions) {
    const door = (this.backend = new IoredisDoor(options));
    this.applications = new RedisApplications(door);
    this.users = new RedisUsers(door);
    this.codes = new RedisAuthorizationCodes(door);
    this.tokens = new RedisTokens(door);
    this.sessions = new RedisSessions(door);
    this.grants = new RedisGrants(door);
    this.counters = new RedisCounters(door);
    this.secrets = new RedisSecrets(door);
  }

  /** The last connection error Redis reported, for the message when the store cannot be reached at start. */
  get lastConnectionError(): Error | null {
    return this.backend.lastConnectionError;
  }

  ping(): Promise<void> {
    return this.backend.ping();
  }

  close(): Promise<void> {
    return this.backend.close();
  }
}
