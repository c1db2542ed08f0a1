import type { RouteConfig } from '../config/schema.js';
import { serializedOrigin } from '../http/origin.js';

/**
 * Who a route answers, against DNS rebinding (docs/gateway.md#origins-and-hosts): a page of
 * another site whose name the attacker pointed at this address sends the browser's requests
 * with its own `Origin` and `Host`, and the upstream behind tokengate sees only its own host.
 * Null: any. A route that names a resource answers browsers of that resource's origin alone
 * unless it lists others (`allowedOrigins`, `*` for any); hosts are checked only where listed.
 */
export interface RouteCallers {
  readonly origins: ReadonlySet<string> | null;
  readonly hosts: ReadonlySet<string> | null;
}

export function routeCallers(route: RouteConfig): RouteCallers {
  const listed = route.allowedOrigins;
  const origins =
    listed !== undefined
      ? listed.includes('*')
        ? null
        : new Set(listed.map((origin) => serializedOrigin(origin)!))
      : route.resource !== undefined
        ? new Set([serializedOrigin(new URL(route.resource).origin)!])
        : null;
  const hosts = route.allowedHosts === undefined ? null : new Set(route.allowedHosts.map((host) => host.toLowerCase()));
  return { origins, hosts };
}

/** Why a request's `Origin` or `Host` is not one the route answers, or null. `host`: as the client wrote it (or a trusted proxy passed it on). */
export function foreignCaller(callers: RouteCallers, origin: string | undefined, host: string): 'foreign_origin' | 'foreign_host' | null {
  if (callers.origins !== null && origin !== undefined && !callers.origins.has(serializedOrigin(origin) ?? origin)) return 'foreign_origin';
  if (callers.hosts !== null && !callers.hosts.has(host.toLowerCase())) return 'foreign_host';
  return null;
}
