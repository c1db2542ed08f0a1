import type { Logger } from 'pino';
import type { StoreConfig } from '../config/schema.js';
import { MemoryStore } from './memory.js';
import { RedisStore } from './redis.js';
import { describeTopology, plainCause, redisConnection, replicasToWaitFor, whatToCheck } from './redis-topology.js';
import type { Store } from './store.js';

/** While waiting for the store at start, how often the wait is logged again. */
const WAIT_LOG_INTERVAL_MS = 5_000;

/**
 * Opens the configured store and waits until it answers, up to `store.startupTimeoutMs`: a
 * container often starts before its Redis. A store that never answers fails the start with one
 * line naming the config key, the address (no password) and what to check.
 */
export async function openStore(config: StoreConfig, log?: Pick<Logger, 'info' | 'warn'>): Promise<Store> {
  if (config.driver === 'memory') return new MemoryStore();
  const connection = redisConnection(config);
  const store = new RedisStore({
    connection,
    keyPrefix: config.keyPrefix,
    commandTimeoutMs: config.commandTimeoutMs,
    connectTimeoutMs: config.connectTimeoutMs,
    waitForReplicas: replicasToWaitFor(config, connection.topology),
    lostReplicaWaitMs: config.lostReplicaWaitMs,
  });
  const what = describeTopology(connection.topology);
  const started = Date.now();
  const deadline = started + config.startupTimeoutMs;
  let loggedAt = 0;
  let failure: unknown = null;
  for (;;) {
    try {
      await store.ping();
      if (failure !== null) log?.info({ waitedMs: Date.now() - started }, `the store answers: ${what}`);
      return store;
    } catch (error) {
      failure = error;
    }
    const now = Date.now();
    if (now >= deadline) break;
    if (now - loggedAt >= WAIT_LOG_INTERVAL_MS) {
      loggedAt = now;
      const cause = plainCause(store.lastConnectionError ?? failure);
      log?.warn(
        { waitedMs: now - started, startupTimeoutMs: config.startupTimeoutMs },
        `waiting for the store: ${what} does not answer yet (${cause}); retrying until store.startupTimeoutMs (${config.startupTimeoutMs} ms) have passed`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(250, deadline - now)));
  }
  const cause = plainCause(store.lastConnectionError ?? failure);
  await store.close().catch(() => {});
  throw new StartupError(
    `${what} did not answer within ${config.startupTimeoutMs} ms (store.startupTimeoutMs): ${cause}. ${whatToCheck(connection.topology)} For a single instance, store.driver: memory needs no Redis.`,
  );
}

/** A condition that keeps the process from starting: printed as one paragraph, without a stack. */
export class StartupError extends Error {
  override name = 'StartupError';
}
