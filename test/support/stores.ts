import { withTokens, type AccessTokenRecord, type Store } from '../../src/store/store.js';

/**
 * The real store, whose getAccessToken reads at once but hands its answer back only on
 * release(): a lookup frozen in flight, so a test can revoke or save while it is.
 */
export function holdingReads(store: Store): { store: Store; read: Promise<void>; release(): void } {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let markRead!: () => void;
  const read = new Promise<void>((resolve) => (markRead = resolve));
  const proxy = new Proxy(store.tokens, {
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
  return { store: withTokens(store, proxy), read, release };
}
