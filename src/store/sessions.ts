import type { RedisDoor } from './backend.js';
import { cloneOrNull, ExpiringMap } from './expiring-map.js';
import { parse } from './redis-records.js';

export interface SessionRecord {
  userId: string | null;
  createdAt: number;
  [key: string]: unknown;
}

/** Server-side sessions of the authorization page, keyed by a digest of the session cookie. */
export interface Sessions {
  save(digest: string, data: SessionRecord, ttlMs: number): Promise<void>;
  get(digest: string): Promise<SessionRecord | null>;
  delete(digest: string): Promise<void>;
}

export class MemorySessions implements Sessions {
  private readonly sessions = new ExpiringMap<SessionRecord>();

  async save(digest: string, data: SessionRecord, ttlMs: number): Promise<void> {
    this.sessions.set(digest, structuredClone(data), Date.now() + ttlMs);
  }

  async get(digest: string): Promise<SessionRecord | null> {
    return cloneOrNull(this.sessions.get(digest));
  }

  async delete(digest: string): Promise<void> {
    this.sessions.delete(digest);
  }

  sweep(now: number): void {
    this.sessions.sweep(now);
  }
}

/** Keys: `session:<digest>` JSON SessionRecord, TTL. */
export class RedisSessions implements Sessions {
  constructor(private readonly door: RedisDoor) {}

  async save(digest: string, data: SessionRecord, ttlMs: number): Promise<void> {
    await this.door.write('set', this.key(digest), JSON.stringify(data), 'PX', ttlMs);
  }

  async get(digest: string): Promise<SessionRecord | null> {
    return parse<SessionRecord>(await this.door.read<string | null>('get', this.key(digest)));
  }

  async delete(digest: string): Promise<void> {
    await this.door.write('del', this.key(digest));
  }

  private key(digest: string): string {
    return this.door.key(`session:${digest}`);
  }
}
