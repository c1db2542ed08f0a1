import type { AccessTokenRecord, TokenStore } from '../../src/store/store.js';

/** The real store, with a count of the calls each of its methods received. */
export function counting(store: TokenStore): { store: TokenStore; calls(method: keyof TokenStore): number } {
  const counts = new Map<PropertyKey, number>();
  const proxy = new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        counts.set(property, (counts.get(property) ?? 0) + 1);
        return (value as (...args: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: proxy, calls: (method) => counts.get(method) ?? 0 };
}

/**
 * The real store, whose getAccessToken reads at once but hands its answer back only on
 * release(): a lookup frozen in flight, so a test can revoke or save while it is.
 */
export function holdingReads(store: TokenStore): { store: TokenStore; read: Promise<void>; release(): void } {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let markRead!: () => void;
  const read = new Promise<void>((resolve) => (markRead = resolve));
  const proxy = new Proxy(store, {
    get(target, property) {
      if (property === 'getAccessToken') {
        return async (digest: string): Promise<AccessTokenRecord | null> => {
          const record = await target.getAccessToken(digest);
          markRead();
          await released;
          return record;
        };
      }
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: proxy, read, release };
}
