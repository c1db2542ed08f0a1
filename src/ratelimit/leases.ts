import type { Backend } from '../store/backend.js';
import type { LeaseSource } from './lease-protocol.js';
import { MemoryLeases } from './memory-leases.js';
import { RedisLeases } from './redis-leases.js';

/** The leases of a backend: from Redis, shared by every sidecar, or this process's own. */
export function leasesFor(backend: Backend): LeaseSource {
  return backend.driver === 'redis' ? new RedisLeases(backend) : new MemoryLeases();
}
