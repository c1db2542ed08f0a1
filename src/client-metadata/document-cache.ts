import { randomBytes } from 'node:crypto';
import type { Backend, RedisDoor } from '../store/backend.js';

/**
 * Where fetched documents are kept, shared by every sidecar, with the fetch lock that lets one of
 * them fetch a document while the others wait for it: three keys per document URL (by digest),
 * each touched alone, so any Redis topology serves them (a Cluster puts each where it likes).
 *
 *   client-metadata:document:<digest>  the checked document (JSON), expiring with its cache life
 *   client-metadata:failure:<digest>   why the last fetch failed (JSON), for the few seconds the
 *                                      requests that waited for it need to read it
 *   client-metadata:lock:<digest>      a random value while one process fetches, expiring by itself
 *                                      should that process die
 */
export interface DocumentCache {
  document(key: string): Promise<string | null>;
  failure(key: string): Promise<string | null>;
  /** Takes the fetch lock for `ttlMs`: the lock's value when taken, null when another holds it. */
  lock(key: string, ttlMs: number): Promise<string | null>;
  /** Gives the lock back, when it is still the one taken (a lock that expired and was taken again stays). */
  unlock(key: string, value: string): Promise<void>;
  keepDocument(key: string, document: string, ttlMs: number): Promise<void>;
  keepFailure(key: string, failure: string, ttlMs: number): Promise<void>;
}

/** The cache of a backend: Redis, shared by every sidecar, or this process's own. */
export function documentCacheFor(backend: Backend): DocumentCache {
  return backend.driver === 'redis' ? redisDocumentCache(backend) : memoryDocumentCache();
}

const UNLOCK_SCRIPT = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

export function redisDocumentCache(door: RedisDoor): DocumentCache {
  door.defineScript('clientMetadataUnlock', { numberOfKeys: 1, lua: UNLOCK_SCRIPT });
  const key = (kind: string, digest: string) => door.key(`client-metadata:${kind}:${digest}`);
  return {
    document: (digest) => door.read<string | null>('get', key('document', digest)),
    failure: (digest) => door.read<string | null>('get', key('failure', digest)),
    async lock(digest, ttlMs) {
      const value = randomBytes(16).toString('base64url');
      return (await door.write<string | null>('set', key('lock', digest), value, 'PX', ttlMs, 'NX')) === 'OK' ? value : null;
    },
    async unlock(digest, value) {
      await door.write('clientMetadataUnlock', key('lock', digest), value);
    },
    async keepDocument(digest, document, ttlMs) {
      await door.write('set', key('document', digest), document, 'PX', ttlMs);
    },
    async keepFailure(digest, failure, ttlMs) {
      await door.write('set', key('failure', digest), failure, 'PX', ttlMs);
    },
  };
}

/** One process (the memory store of a single instance): the same keys in a map, expired entries swept as it grows. */
export function memoryDocumentCache(): DocumentCache {
  const entries = new Map<string, { value: string; expiresAt: number }>();
  const get = (name: string) => {
    const entry = entries.get(name);
    if (entry === undefined) return null;
    if (entry.expiresAt > Date.now()) return entry.value;
    entries.delete(name);
    return null;
  };
  const set = (name: string, value: string, ttlMs: number) => {
    const now = Date.now();
    if (entries.size >= 10_000) for (const [other, entry] of entries) if (entry.expiresAt <= now) entries.delete(other);
    entries.set(name, { value, expiresAt: now + ttlMs });
  };
  return {
    document: (digest) => Promise.resolve(get(`document:${digest}`)),
    failure: (digest) => Promise.resolve(get(`failure:${digest}`)),
    lock(digest, ttlMs) {
      if (get(`lock:${digest}`) !== null) return Promise.resolve(null);
      const value = randomBytes(16).toString('base64url');
      set(`lock:${digest}`, value, ttlMs);
      return Promise.resolve(value);
    },
    unlock(digest, value) {
      if (get(`lock:${digest}`) === value) entries.delete(`lock:${digest}`);
      return Promise.resolve();
    },
    keepDocument(digest, document, ttlMs) {
      set(`document:${digest}`, document, ttlMs);
      return Promise.resolve();
    },
    keepFailure(digest, failure, ttlMs) {
      set(`failure:${digest}`, failure, ttlMs);
      return Promise.resolve();
    },
  };
}
