import { MemoryApplications } from './applications.js';
import { MEMORY_BACKEND } from './backend.js';
import { MemoryAuthorizationCodes } from './codes.js';
import { MemoryCounters } from './counters.js';
import { MemoryGrants } from './grants.js';
import { MemorySecrets } from './secrets.js';
import { MemorySessions } from './sessions.js';
import type { Store } from './store.js';
import { MemoryTokens } from './tokens/memory.js';
import { MemoryUsers } from './users.js';

const SWEEP_INTERVAL_MS = 30_000;

/**
 * The embedded store for a single instance: every port in this process, records cloned in and
 * out so callers can never mutate what is stored, the same as with Redis. Not shared between
 * processes: run the `redis` driver as soon as there is more than one sidecar.
 */
export class MemoryStore implements Store {
  readonly backend = MEMORY_BACKEND;
  readonly applications = new MemoryApplications();
  readonly users = new MemoryUsers();
  readonly codes = new MemoryAuthorizationCodes();
  readonly tokens = new MemoryTokens();
  readonly sessions = new MemorySessions();
  readonly grants = new MemoryGrants();
  readonly counters = new MemoryCounters();
  readonly secrets = new MemorySecrets();
  private readonly sweeper: NodeJS.Timeout;

  constructor() {
    this.sweeper = setInterval(() => this.sweep(Date.now()), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.tokens.close();
  }

  private sweep(now: number): void {
    this.codes.sweep(now);
    this.tokens.sweep(now);
    this.counters.sweep(now);
    this.sessions.sweep(now);
  }
}
