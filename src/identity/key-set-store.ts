import type { Backend, RedisDoor } from '../store/backend.js';

/**
 * Where the deployment's signing keys live, shared by every sidecar: one value, the whole key
 * set as JSON, replaced only by a compare-and-set, so two sidecars rotating at once make one
 * new key and never lose each other's.
 */
export interface KeySetStore {
  /** The stored key set, or null when none was ever stored. Rejects with StoreUnavailableError. */
  read(): Promise<string | null>;
  /** Stores `next` if the stored value is still `expected` (null: none); false when another sidecar changed it first. */
  replace(expected: string | null, next: string): Promise<boolean>;
}

/** `GET` and a one-key compare-and-set script: one key, so any slot of a Cluster. */
const REPLACE_SCRIPT = {
  numberOfKeys: 1,
  lua: `
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
`,
};

/** The store key of the signed identity's key set; each kind of signing key has one of its own, so no verifier of one kind accepts another's tokens. */
export const IDENTITY_KEY_SET = 'identity-keys';

/** Redis: the key `name` under the deployment's prefix. */
export function redisKeySetStore(door: RedisDoor, name: string = IDENTITY_KEY_SET): KeySetStore {
  door.defineScript('tokengateReplaceIdentityKeys', REPLACE_SCRIPT);
  const key = door.key(name);
  return {
    read: () => door.read<string | null>('get', key),
    async replace(expected, next) {
      return (await door.write<number>('tokengateReplaceIdentityKeys', key, expected ?? '', next)) === 1;
    },
  };
}

/** One process (the memory store of a single instance). */
export function memoryKeySetStore(): KeySetStore {
  let stored: string | null = null;
  return {
    read: () => Promise.resolve(stored),
    replace(expected, next) {
      if (stored !== expected) return Promise.resolve(false);
      stored = next;
      return Promise.resolve(true);
    },
  };
}

export function keySetStoreFor(backend: Backend, name: string = IDENTITY_KEY_SET): KeySetStore {
  return backend.driver === 'redis' ? redisKeySetStore(backend, name) : memoryKeySetStore();
}
