import type { RedisDoor } from './backend.js';

/** Secrets every sidecar must share, created by whichever asks first (the token tag key). */
export interface Secrets {
  /** Returns the secret stored under `name`, storing `candidate` first if there is none. */
  getOrCreate(name: string, candidate: string): Promise<string>;
}

export class MemorySecrets implements Secrets {
  private readonly secrets = new Map<string, string>();

  async getOrCreate(name: string, candidate: string): Promise<string> {
    const existing = this.secrets.get(name);
    if (existing !== undefined) return existing;
    this.secrets.set(name, candidate);
    return candidate;
  }
}

/** Keys: `secret:<name>`. */
export class RedisSecrets implements Secrets {
  constructor(private readonly door: RedisDoor) {}

  async getOrCreate(name: string, candidate: string): Promise<string> {
    const existing = await this.door.write<string | null>('set', this.door.key(`secret:${name}`), candidate, 'NX', 'GET');
    return existing ?? candidate;
  }
}
