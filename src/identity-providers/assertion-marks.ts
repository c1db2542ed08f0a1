import { hash } from 'node:crypto';
import type { Backend, RedisDoor } from '../store/backend.js';

/**
 * Where an identity assertion's `jti` is marked as used, shared by every sidecar, until the
 * assertion expires: one presented again, here or at another sidecar, finds the mark.
 */
export interface AssertionMarks {
  /** True when this call made the mark (first use); false when it was there (a replay). Rejects with StoreUnavailableError. */
  markFirstUse(issuer: string, jti: string, ttlMs: number): Promise<boolean>;
}

/** The key of one assertion: its `jti` under its issuer (two providers may pick the same `jti`), hashed to a fixed length. */
function markKey(issuer: string, jti: string): string {
  return hash('sha256', `${issuer}\n${jti}`, 'base64url');
}

/**
 * Redis: `SET <prefix>id-jag-jti:<digest> 1 PX <ttl> NX`, one command on one key (any slot of a
 * Cluster), a write confirmed by the replicas a failover could promote, so a promotion cannot
 * forget a mark and let its assertion be used twice.
 */
function redisAssertionMarks(door: RedisDoor): AssertionMarks {
  return {
    async markFirstUse(issuer, jti, ttlMs) {
      return (await door.write<string | null>('set', door.key(`id-jag-jti:${markKey(issuer, jti)}`), '1', 'PX', ttlMs, 'NX')) === 'OK';
    },
  };
}

/** One process (the memory store of a single instance): every mark until its assertion expires. */
function memoryAssertionMarks(): AssertionMarks {
  const expiries = new Map<string, number>();
  return {
    markFirstUse(issuer, jti, ttlMs) {
      const now = Date.now();
      for (const [mark, expiresAt] of expiries) if (expiresAt <= now) expiries.delete(mark);
      const key = markKey(issuer, jti);
      if ((expiries.get(key) ?? 0) > now) return Promise.resolve(false);
      expiries.set(key, now + ttlMs);
      return Promise.resolve(true);
    },
  };
}

export function assertionMarksFor(backend: Backend): AssertionMarks {
  return backend.driver === 'redis' ? redisAssertionMarks(backend) : memoryAssertionMarks();
}
