import type { RedisDoor } from './backend.js';
import { ExpiringMap } from './expiring-map.js';

/** Counters that live a window from their first increment (the login throttle's attempts). */
export interface Counters {
  /** Increments a counter that lives `windowMs` from its first increment; returns the new value. */
  increment(key: string, windowMs: number): Promise<number>;
  /**
   * Takes back one increment of a live counter (an attempt counted up front that turned out not
   * to count); a counter already gone stays gone. The window's end does not move.
   */
  decrement(key: string): Promise<void>;
  reset(key: string): Promise<void>;
}

export class MemoryCounters implements Counters {
  private readonly counters = new ExpiringMap<number>();

  async increment(key: string, windowMs: number): Promise<number> {
    const now = Date.now();
    return this.counters.increment(key, now + windowMs, now);
  }

  async decrement(key: string): Promise<void> {
    this.counters.decrement(key, Date.now());
  }

  async reset(key: string): Promise<void> {
    this.counters.delete(key);
  }

  sweep(now: number): void {
    this.counters.sweep(now);
  }
}

const INCREMENT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] counter; ARGV[1] window (ms), set on the first increment only
local count = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1], 'NX')
return count
`,
} as const;

const DECREMENT_LIVE = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] counter; a plain DECR would recreate an expired counter without a TTL
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECR', KEYS[1]) end
return 0
`,
} as const;

/** Keys: `counter:<name>` integer, TTL = the window. */
export class RedisCounters implements Counters {
  constructor(private readonly door: RedisDoor) {
    door.defineScript('increment', INCREMENT);
    door.defineScript('decrementLive', DECREMENT_LIVE);
  }

  increment(key: string, windowMs: number): Promise<number> {
    return this.door.write<number>('increment', this.key(key), windowMs);
  }

  async decrement(key: string): Promise<void> {
    await this.door.write('decrementLive', this.key(key));
  }

  async reset(key: string): Promise<void> {
    await this.door.write('del', this.key(key));
  }

  private key(name: string): string {
    return this.door.key(`counter:${name}`);
  }
}
