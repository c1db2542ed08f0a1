import type { VerifiedToken } from '../store/verified-token.js';
import { hasScopes } from '../token/scope.js';
import type { RouteDenialReason } from './denials.js';

interface AuthorizationRoute {
  readonly methods: ReadonlySet<string>;
  readonly token: 'user' | 'application' | 'any';
  readonly scopes: readonly string[];
}

/** The route accepts this method (otherwise 405 with Allow; checked before any token work). */
export function isMethodAllowed(route: AuthorizationRoute, method: string): boolean {
  return route.methods.has(method);
}

/**
 * Whether a verified token may use the route: the route's token kind (user APIs take user
 * tokens, organizer APIs application tokens) and every scope the route requires. Both refusals
 * are 403 insufficient_scope (RFC 6750 3.1) naming the route's scopes.
 */
export function authorizeRoute(route: AuthorizationRoute, token: VerifiedToken): Extract<RouteDenialReason, 'wrong_token_kind' | 'insufficient_scope'> | null {
  if (route.token !== 'any' && route.token !== token.kind) return 'wrong_token_kind';
  if (!hasScopes(token.scopes, route.scopes)) return 'insufficient_scope';
  return null;
}
