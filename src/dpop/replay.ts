import { hash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Backend, RedisDoor } from '../store/backend.js';

/**
 * Where a proof's `jti` is marked as used, shared by every sidecar: a proof replayed on another
 * one must find the mark. One key per proof, set only if absent and expiring with the window.
 */
export interface ProofMarks {
  /** True when this call made the mark (first use); false when it was there (a replay). Rejects with StoreUnavailableError. */
  markFirstUse(key: string, ttlMs: number): Promise<boolean>;
}

/**
 * Redis: `SET <prefix>dpop-jti:<digest> 1 PX <window> NX`, one command on one key (any slot of a
 * Cluster), a write like any other: confirmed by the replicas a failover could promote, so a
 * promotion cannot forget a mark and let its proof be used again within its window.
 */
export function redisProofMarks(door: RedisDoor): ProofMarks {
  return {
    async markFirstUse(key, ttlMs) {
      return (await door.write<string | null>('set', door.key(`dpop-jti:${key}`), '1', 'PX', ttlMs, 'NX')) === 'OK';
    },
  };
}

/** One process (the memory store of a single instance): every mark until its window ends. */
export function memoryProofMarks(): ProofMarks {
  const expiries = new Map<string, number>();
  let sweepAt = 0;
  return {
    markFirstUse(key, ttlMs) {
      const now = Date.now();
      // Expired marks go at most once per window: the map holds one window's proofs, as Redis does.
      if (now >= sweepAt) {
        for (const [mark, expiresAt] of expiries) if (expiresAt <= now) expiries.delete(mark);
        sweepAt = now + ttlMs;
      }
      const expiresAt = expiries.get(key);
      if (expiresAt !== undefined && expiresAt > now) return Promise.resolve(false);
      expiries.set(key, now + ttlMs);
      return Promise.resolve(true);
    },
  };
}

/**
 * Refuses a proof seen before within its window, on any sidecar. Every proof seen the first time
 * here costs one store round trip: only the shared store knows whether another sidecar saw it,
 * so the request waits for the mark (writing it in the background would let a copy sent to two
 * sidecars at once pass both). A small LRU in front remembers the proofs this process marked,
 * so a replay it saw itself is refused without asking the store; it never accepts a proof.
 */
export class ReplayGuard {
  private readonly seen: LRUCache<string, true> | null;

  constructor(
    private readonly marks: ProofMarks,
    private readonly ttlMs: number,
    localEntries: number,
  ) {
    this.seen = localEntries > 0 ? new LRUCache<string, true>({ max: localEntries, ttl: ttlMs }) : null;
  }

  /** True for the first use of this proof (by `jti`, per key); false for a replay. */
  async firstUse(jkt: string, jti: string): Promise<boolean> {
    const key = hash('sha256', `${jkt}.${jti}`, 'base64url');
    if (this.seen?.has(key) === true) return false;
    const first = await this.marks.markFirstUse(key, this.ttlMs);
    this.seen?.set(key, true);
    return first;
  }
}

/** The replay marks of a backend: in Redis, shared by every sidecar, or in this process. */
export function proofMarksFor(backend: Backend): ProofMarks {
  return backend.driver === 'redis' ? redisProofMarks(backend) : memoryProofMarks();
}
