import type { ClientMetadataAllowConfig } from '../config/schema.js';
import type { Backend, RedisDoor } from '../store/backend.js';
import { allows, canonicalAllowEntry } from './client-id.js';

/**
 * The operator's list of the documents tokengate accepts: the entries of the config file, and
 * those added through the admin API (`tokengate client-metadata allow`), kept in the store so
 * every sidecar reads the same list, at once. Each entry says, for the clients it allows, what
 * an application's registration would: scopes, resources, DPoP and rate limit tier. A client id
 * no entry allows is never fetched.
 */

export interface AllowEntry {
  /** An origin, a prefix ending in `/`, or one client id (./client-id.ts). */
  readonly url: string;
  /** Unset: the issuer's default scopes. */
  readonly scopes?: string[];
  /** Unset or empty: every configured resource. */
  readonly resources?: string[];
  readonly dpop?: 'required' | 'allowed';
  /** Its clients' tier: a policy of `rateLimits`; unset or null: their routes' own policies. */
  readonly rateLimit?: string | null;
}

export interface ListedEntry extends AllowEntry {
  /** `config`: from the config file (changed there); `admin`: added through the admin API. */
  readonly source: 'config' | 'admin';
}

/** The entries added through the admin API, as the store keeps them: one hash, `client-metadata:allowed`, entry by URL. */
export interface AllowedEntries {
  all(): Promise<AllowEntry[]>;
  put(entry: AllowEntry): Promise<void>;
  /** False when there was no such entry. */
  remove(url: string): Promise<boolean>;
}

export function allowedEntriesFor(backend: Backend): AllowedEntries {
  return backend.driver === 'redis' ? redisAllowedEntries(backend) : memoryAllowedEntries();
}

export function redisAllowedEntries(door: RedisDoor): AllowedEntries {
  const key = door.key('client-metadata:allowed');
  return {
    async all() {
      const entries = await door.read<Record<string, string>>('hgetall', key);
      return Object.values(entries).map((entry) => JSON.parse(entry) as AllowEntry);
    },
    async put(entry) {
      await door.write('hset', key, entry.url, JSON.stringify(entry));
    },
    async remove(url) {
      return (await door.write<number>('hdel', key, url)) === 1;
    },
  };
}

export function memoryAllowedEntries(): AllowedEntries {
  const entries = new Map<string, AllowEntry>();
  return {
    all: () => Promise.resolve([...entries.values()]),
    put(entry) {
      entries.set(entry.url, entry);
      return Promise.resolve();
    },
    remove: (url) => Promise.resolve(entries.delete(url)),
  };
}

export class AllowList {
  private readonly configured: readonly ListedEntry[];

  constructor(
    configured: readonly ClientMetadataAllowConfig[],
    readonly added: AllowedEntries,
  ) {
    this.configured = configured.map((entry) => ({ ...entry, url: canonicalAllowEntry(entry.url), source: 'config' as const }));
  }

  /** Every entry, the config file's first. */
  async entries(): Promise<ListedEntry[]> {
    const added = await this.added.all();
    return [...this.configured, ...added.map((entry) => ({ ...entry, source: 'admin' as const })).sort((a, b) => a.url.localeCompare(b.url))];
  }

  isConfigured(url: string): boolean {
    return this.configured.some((entry) => entry.url === url);
  }

  /** The entry that allows `clientId`, the most specific (longest) one when several do; null when none does. */
  async find(clientId: string): Promise<ListedEntry | null> {
    let found: ListedEntry | null = null;
    for (const entry of await this.entries()) if (allows(entry.url, clientId) && (found === null || entry.url.length > found.url.length)) found = entry;
    return found;
  }
}
