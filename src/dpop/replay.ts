import { hash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { RedisStore } from '../store/redis.js';
import { StoreUnavailableError, type Store } from '../store/store.js';

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
 * Cluster). Not followed by WAIT even when store.waitForReplicas is set: a failover within a
 * window could forget the marks of the last moments, which a proof's short life bounds, and
 * waiting for replicas on every DPoP request would cost a second round trip.
 */
export function redisProofMarks(store: RedisStore): ProofMarks {
  const prefix = `${store.keyPrefix}dpop-jti:`;
  return {
    async markFirstUse(key, ttlMs) {
      try {
        return (await store.client.set(`${prefix}${key}`, '1', 'PX', ttlMs, 'NX')) === 'OK';
      } catch (error) {
        throw new StoreUnavailableError(`redis: ${(error as Error).message}`, { cause: error });
      }
    },
  };
}

/** Any other store (the memory store of a single instance): its own atomic counter, first increment = first use. */
export function counterProofMarks(store: Store): ProofMarks {
  return {
    async markFirstUse(key, ttlMs) {
      return (await store.incrementCounter(`dpop-jti:${key}`, ttlMs)) === 1;
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

/** The replay marks of `store`: Redis commands of their own for a Redis store, its counters otherwise. */
export function proofMarksFor(store: Store): ProofMarks {
  return store instanceof RedisStore ? redisProofMarks(store) : counterProofMarks(store);
}
