import { serializedOrigin } from '../http/origin.js';
import type { DecisionsConfig, GatewayConfig, RouteConfig } from './schema.js';
import type { ConfigProblem } from './problem.js';
import { normalizePath } from '../http/path.js';
import { isScopeToken } from '../token/scope.js';

/** Methods a route may list: the ones the gateway forwards (TRACE and CONNECT never are). */
export const ROUTE_METHODS: readonly string[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

/** Paths the issuer serves on the same listener; a route may not claim them or a prefix of them. */
const ISSUER_PREFIXES = ['/oauth', '/.well-known'];

/**
 * Load-time checks of the route table, so that a bad route never reaches a request: prefixes
 * that are not in the canonical form the gateway matches on, two routes claiming the same
 * prefix, routes overlapping the issuer's paths, methods the gateway does not forward, scopes
 * that are not scope tokens, and upstream URLs that are not plain origins. Nested prefixes are
 * fine: the longest matching prefix wins.
 */
export function checkRoutes(routes: readonly RouteConfig[], options: { issuerEnabled: boolean; decisionsEnabled: boolean }): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const seen = new Map<string, number>();
  routes.forEach((route, index) => {
    const at = `routes[${index}]`;
    const prefix = normalizePrefix(route.path);
    if (prefix === null) {
      problems.push({
        path: `${at}.path`,
        message: `"${route.path}" must start with / and be in canonical form: no empty, "." or ".." segments, no query, no backslash, only RFC 3986 path characters, percent-escapes only where needed and upper-cased`,
      });
    } else {
      // Prefixes that differ only in letter case are one prefix to a case-insensitive upstream.
      const previous = seen.get(prefix.toLowerCase());
      if (previous !== undefined)
        problems.push({ path: `${at}.path`, message: `"${route.path}" is already routed by routes[${previous}] (prefixes are compared ignoring letter case)` });
      else seen.set(prefix.toLowerCase(), index);
      const issuerPath = options.issuerEnabled ? ISSUER_PREFIXES.find((issuer) => overlaps(prefix, issuer)) : undefined;
      if (issuerPath !== undefined)
        problems.push({
          path: `${at}.path`,
          message: `"${route.path}" overlaps the issuer's ${issuerPath} paths on the same listener (set issuer.enabled: false for a pure gateway)`,
        });
    }
    route.methods.forEach((method, methodIndex) => {
      if (!ROUTE_METHODS.includes(method))
        problems.push({ path: `${at}.methods[${methodIndex}]`, message: `"${method}" is not forwarded by the gateway; use ${ROUTE_METHODS.join(', ')}` });
    });
    route.scopes.forEach((scope, scopeIndex) => {
      if (!isScopeToken(scope))
        problems.push({
          path: `${at}.scopes[${scopeIndex}]`,
          message: `"${scope}" is not a scope token (printable ASCII without spaces, quotes or backslashes)`,
        });
    });
    const uncachable = uncachableBecause(route);
    if (uncachable !== null && route.decisionCacheSeconds !== undefined && route.decisionCacheSeconds > 0) {
      problems.push({ path: `${at}.decisionCacheSeconds`, message: `an ingress may not cache this route's decisions: ${uncachable}; remove the key or set 0` });
    }
    route.allowedOrigins?.forEach((origin, originIndex) => {
      if (origin !== '*' && serializedOrigin(origin) === null)
        problems.push({
          path: `${at}.allowedOrigins[${originIndex}]`,
          message: `"${origin}" is not an origin: give scheme and host (and a port), as https://app.example, or *`,
        });
    });
    route.allowedHosts?.forEach((host, hostIndex) => {
      if (!/^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/.test(host))
        problems.push({
          path: `${at}.allowedHosts[${hostIndex}]`,
          message: `"${host}" is not a Host value: a name or address, with its port unless it is the scheme's default`,
        });
    });
    if (route.upstream !== undefined && route.upstreams !== undefined) {
      problems.push({ path: at, message: 'give either upstream or upstreams, not both' });
    } else if (route.upstream === undefined && route.upstreams === undefined && !options.decisionsEnabled) {
      // With the decision listener on, a route may be an ingress's alone: decided there, forwarded by the ingress.
      problems.push({
        path: `${at}.upstream`,
        message: 'required key is missing (or give upstreams.user / upstreams.application; only with decisions.enabled may a route have neither)',
      });
    }
    if (route.upstream !== undefined) checkUpstreamUrl(route.upstream, `${at}.upstream`, problems);
    if (route.upstreams !== undefined) {
      for (const kind of ['user', 'application'] as const) {
        const url = route.upstreams[kind];
        if (url !== undefined) checkUpstreamUrl(url, `${at}.upstreams.${kind}`, problems);
        else if (route.token === kind || route.token === 'any') {
          problems.push({ path: `${at}.upstreams.${kind}`, message: `route accepts ${kind} tokens (token: ${route.token}) but names no upstream for them` });
        }
      }
    }
  });
  return problems;
}

/**
 * How long an ingress may reuse an admitting decision of a route: its own decisionCacheSeconds,
 * else the decision listener's default; always 0 for a route whose every request must be
 * checked (see uncachableBecause).
 */
export function decisionCacheSeconds(route: RouteConfig, decisions: Pick<DecisionsConfig, 'cacheSeconds'>): number {
  if (uncachableBecause(route) !== null) return 0;
  return route.decisionCacheSeconds ?? decisions.cacheSeconds;
}

/** Why every request of a route must reach the decision listener, or null when a decision may be reused. */
function uncachableBecause(route: RouteConfig): string | null {
  if (route.rateLimit !== undefined) return `its rate limit (rateLimit: ${route.rateLimit}) must meter every request`;
  if (route.dpop === 'required') return 'with dpop: required every request carries a proof of its own, checked per request';
  return null;
}

/** The canonical form of a route prefix (no trailing slash), or null when it is not canonical. */
export function normalizePrefix(path: string): string | null {
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
  return normalizePath(trimmed) === trimmed ? trimmed : null;
}

/** One prefix equals the other or lies below it. */
function overlaps(prefix: string, other: string): boolean {
  const below = (path: string, parent: string) => parent === '/' || path === parent || path.startsWith(`${parent}/`);
  return below(prefix, other) || below(other, prefix);
}

function checkUpstreamUrl(value: string, path: string, problems: ConfigProblem[]): void {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    problems.push({ path, message: `"${value}" is not an absolute URL` });
    return;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') problems.push({ path, message: `"${value}" must be http or https` });
  if (url.search !== '' || url.hash !== '') problems.push({ path, message: `"${value}" must not have a query or fragment` });
  if (url.username !== '' || url.password !== '') problems.push({ path, message: 'must not embed credentials' });
  if (url.pathname !== '/')
    problems.push({
      path,
      message: `"${value}" must be an origin such as http://10.0.0.5:3001 without a path: the upstream receives the request path unchanged`,
    });
}

/** Names hop-by-hop or owned by HTTP itself, or by the gateway's credential and forwarding headers. */
const RESERVED_HEADERS = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'host',
  'content-length',
  'content-type',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
]);

/**
 * The header names the gateway writes (identity headers, request id): letters, digits and "-"
 * only (an "_" spelling is how clients smuggle identity headers past proxies to CGI-style
 * servers, so the gateway strips every "_" variant of these names and they cannot contain one),
 * distinct, and not a reserved name.
 */
export function checkGatewayHeaders(gateway: GatewayConfig): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const names: Array<[string, string]> = [
    ...Object.entries(gateway.identityHeaders).map(([key, name]): [string, string] => [`gateway.identityHeaders.${key}`, name]),
    ['gateway.requestIdHeader', gateway.requestIdHeader],
  ];
  const seen = new Map<string, string>();
  for (const [path, name] of names) {
    const lower = name.toLowerCase();
    if (!/^[a-z0-9]+(?:-[a-z0-9]+)*$/.test(lower)) problems.push({ path, message: `"${name}" must be letters, digits and single "-" between them` });
    else if (RESERVED_HEADERS.has(lower)) problems.push({ path, message: `"${name}" is a reserved header name` });
    const previous = seen.get(lower);
    if (previous !== undefined) problems.push({ path, message: `"${name}" is already used by ${previous}` });
    else seen.set(lower, path);
  }
  return problems;
}
