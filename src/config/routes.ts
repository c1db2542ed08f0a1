import type { RouteConfig } from './schema.js';
import type { ConfigProblem } from './load.js';

/**
 * Load-time checks of the route table, so that a bad route never reaches a request:
 * upstream URLs, upstream/token-kind consistency, prefixes that are not normalized, and two
 * routes claiming the same prefix.
 */
export function checkRoutes(routes: readonly RouteConfig[]): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const seen = new Map<string, number>();
  routes.forEach((route, index) => {
    const at = `routes[${index}]`;
    const prefix = normalizePrefix(route.path);
    if (prefix === null) {
      problems.push({ path: `${at}.path`, message: `"${route.path}" must start with / and contain no empty, "." or ".." segments, percent-escapes, backslashes or query` });
    } else {
      const previous = seen.get(prefix);
      if (previous !== undefined) problems.push({ path: `${at}.path`, message: `"${route.path}" is already routed by routes[${previous}]` });
      else seen.set(prefix, index);
    }
    if (route.upstream !== undefined && route.upstreams !== undefined) {
      problems.push({ path: at, message: 'give either upstream or upstreams, not both' });
    } else if (route.upstream === undefined && route.upstreams === undefined) {
      problems.push({ path: `${at}.upstream`, message: 'required key is missing (or give upstreams.user / upstreams.application)' });
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

/** The canonical form of a route prefix (no trailing slash), or null when it is not canonical. */
export function normalizePrefix(path: string): string | null {
  if (!path.startsWith('/') || /[%\\?#]/.test(path)) return null;
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
  if (trimmed === '/') return trimmed;
  const segments = trimmed.slice(1).split('/');
  if (segments.some((segment) => segment === '' || segment === '.' || segment === '..')) return null;
  return trimmed;
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
}
