import { withoutPassword } from '../config/redact.js';
import type { StoreConfig } from '../config/schema.js';
import { MemoryStore } from './memory.js';
import { RedisStore } from './redis.js';
import type { Store } from './store.js';

/** Opens the configured store and proves it answers, so a bad Redis URL fails at start, not on the first request. */
export async function openStore(config: StoreConfig): Promise<Store> {
  if (config.driver === 'memory') return new MemoryStore();
  const store = new RedisStore({
    url: config.url,
    keyPrefix: config.keyPrefix,
    commandTimeoutMs: config.commandTimeoutMs,
    connectTimeoutMs: config.connectTimeoutMs,
  });
  try {
    await store.ping();
  } catch (error) {
    await store.close().catch(() => {});
    throw new StartupError(
      `Redis at ${withoutPassword(config.url)} does not answer (${(error as Error).message}). Start Redis, or fix store.url, or set store.driver: memory for a single instance.`,
    );
  }
  return store;
}

/** A condition that keeps the process from starting: printed as one paragraph, without a stack. */
export class StartupError extends Error {
  override name = 'StartupError';
}
