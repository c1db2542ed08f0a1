import { routeCallers, type RouteCallers } from './callers.js';
import type { Config, RouteConfig } from '../config/schema.js';
import { decisionCacheSeconds, normalizePrefix } from '../config/routes.js';
import type { Metrics } from '../observability/metrics.js';
import { UNROUTED, type RouteRequests } from '../observability/requests.js';
import type { TokenKind } from '../token/kinds.js';
import { PATH_REFUSALS, type PathRefusal } from '../http/path.js';
import { metadataUrl } from '../resource/identifier.js';
import { routeAudience } from '../identity/index.js';
import type { RateLimiter, RouteRateLimit } from '../ratelimit/limiter.js';
import type { CounterSlot, HistogramSlot } from '../observability/slot-metrics.js';
import { compileRouteDenials, compileUnroutedDenials, UNCOUNTED, type Denial, type RouteDenialReason, type UnroutedDenials } from './denials.js';

/** One configured route, compiled at start: everything a request needs is a field read away. */
export interface GatewayRoute<Target> {
  /** The canonical prefix; also the route's metric label and log field. */
  readonly prefix: string;
  /** What a path strictly below the prefix starts with (segment-aware: `/me/`, never `/meow`). */
  readonly below: string;
  readonly methods: ReadonlySet<string>;
  readonly token: RouteConfig['token'];
  readonly scopes: readonly string[];
  /** The resource identifier tokens must have in their audience; null for a route of no resource (no audience check). */
  readonly resource: string | null;
  /** The origins and hosts the gateway answers on it (DNS rebinding). */
  readonly callers: RouteCallers;
  readonly allowQueryToken: boolean;
  readonly allowBodyToken: boolean;
  /** `dpop: required`: only DPoP-bound tokens with their proof. */
  readonly requireDpop: boolean;
  /** Where each kind of token goes; null for a kind the route refuses. */
  readonly targets: Readonly<Record<TokenKind, Target | null>>;
  /** False for a route without upstreams: only the decision listener decides it, the gateway answers 404. */
  readonly forwarded: boolean;
  readonly denials: Readonly<Record<RouteDenialReason, Denial>>;
  /** The rate limit policy that meters it (src/ratelimit/); null: not metered. */
  readonly rateLimit: RouteRateLimit | null;
  /** Its request counters and access log. */
  readonly requests: RouteRequests;
  /** Segments, below this prefix, of the more specific routes nested under it (usually none). */
  readonly nested: ReadonlyArray<readonly string[]>;
  /** The decision listener's count and time of the checks it allowed on this route. */
  readonly decisionAllowed: CounterSlot;
  readonly decisionDuration: HistogramSlot;
  /** How long an ingress may reuse an admitting decision of this route, in seconds (config decisionCacheSeconds); 0: never. */
  readonly decisionCacheSeconds: number;
  /** The signed identity the route passes on (config `signedIdentity`); null: none. */
  readonly signedIdentity: RouteSignedIdentity | null;
  /**
   * The same route as the decision listener applies it. An ingress passes no body to the check,
   * and forwards the query exactly as the client sent it, token included: a query token only
   * with allowQueryTokenThroughIngress, a body token never.
   */
  readonly throughIngress: GatewayRoute<Target>;
}

export interface RouteSignedIdentity {
  /** The assertion's `aud`. */
  readonly audience: string;
  /** `instead`: the assertion alone, without the identity headers. */
  readonly instead: boolean;
}

export interface RouteTable<Target> {
  /**
   * Longest-prefix, segment-aware, case-sensitive match of a normalized path; a refusal when
   * the path is a lookalike of a more specific route (see lookalikeOfNestedRoute).
   */
  match(path: string): GatewayRoute<Target> | PathRefusal | null;
  readonly unrouted: UnroutedDenials;
}

type Mutable<T> = { -readonly [Key in keyof T]: T[Key] };

/** Builds the forwarding target of one route and token kind (upstream origin, timeout, metrics, failure answers). */
export type TargetFactory<Target> = (spec: {
  route: RouteConfig;
  label: string;
  upstream: string;
  denials: Readonly<Record<RouteDenialReason, Denial>>;
  requests: RouteRequests;
}) => Target;

/**
 * Compiles config.routes (already checked by checkRoutes at load) into the table requests are
 * matched against. One table serves both the gateway and the decision listener; its denials
 * carry the metric children of each. `requestsOf` gives the request counters and access log of a
 * route label (a prefix, or `(none)` for requests that match no route).
 */
export function compileRouteTable<Target>(
  config: Readonly<Config>,
  metrics: Metrics,
  createTarget: TargetFactory<Target>,
  requestsOf: (label: string) => RouteRequests,
  limiter: RateLimiter,
): RouteTable<Target> {
  const counted = { metrics, decisions: config.decisions.enabled };
  const routes = config.routes.map((route): GatewayRoute<Target> => {
    const prefix = normalizePrefix(route.path);
    if (prefix === null) throw new Error(`route ${route.path} is not canonical; the config loader refuses it`);
    const requests = requestsOf(prefix);
    const resource = route.resource ?? null;
    const denials = compileRouteDenials(route, config.gateway.realm, counted, requests, resource === null ? null : metadataUrl(resource));
    const upstreamFor = (kind: TokenKind): string | undefined =>
      route.token !== 'any' && route.token !== kind ? undefined : (route.upstreams?.[kind] ?? route.upstream);
    const targetFor = (kind: TokenKind): Target | null => {
      const upstream = upstreamFor(kind);
      return upstream === undefined ? null : createTarget({ route, label: prefix, upstream, denials, requests });
    };
    const targets = { user: targetFor('user'), application: targetFor('application') };
    const nested = config.routes
      .map((other) => normalizePrefix(other.path)!)
      .filter((other) => other !== prefix && other.startsWith(prefix === '/' ? '/' : `${prefix}/`))
      .map((other) => other.slice(prefix === '/' ? 1 : prefix.length + 1).split('/'));
    const decisionAllowed = config.decisions.enabled ? metrics.decisions.labels(prefix, 'allowed', 'ok') : UNCOUNTED.count;
    const decisionDuration = config.decisions.enabled ? metrics.decisionDuration.labels(prefix) : UNCOUNTED.duration;
    const rateLimit = route.rateLimit === undefined ? null : limiter.forRoute(prefix, route.rateLimit);
    const methods = new Set(route.methods);
    const callers = routeCallers(route);
    const cacheSeconds = decisionCacheSeconds(route, config.decisions);
    const forwarded = targets.user !== null || targets.application !== null;
    const audience = routeAudience(route, config.signedIdentity);
    const signedIdentity =
      route.signedIdentity === undefined || !config.signedIdentity.enabled || audience === null
        ? null
        : { audience, instead: route.signedIdentity === 'instead' };
    // Both views have the same fields in the same order, so the check sees one object shape.
    const view = (allowQueryToken: boolean, allowBodyToken: boolean): Mutable<GatewayRoute<Target>> => ({
      prefix,
      below: prefix === '/' ? '/' : `${prefix}/`,
      methods,
      token: route.token,
      scopes: route.scopes,
      resource,
      callers,
      allowQueryToken,
      allowBodyToken,
      requireDpop: route.dpop === 'required',
      targets,
      forwarded,
      denials,
      rateLimit,
      requests,
      nested,
      decisionAllowed,
      decisionDuration,
      decisionCacheSeconds: cacheSeconds,
      signedIdentity,
      throughIngress: null as unknown as GatewayRoute<Target>, // set below, once both views exist
    });
    const throughIngress = view(route.allowQueryToken && route.allowQueryTokenThroughIngress, false);
    throughIngress.throughIngress = throughIngress;
    const gateway = view(route.allowQueryToken, route.allowBodyToken);
    gateway.throughIngress = throughIngress;
    return gateway;
  });
  // Longest prefix first, so the first match is the most specific route.
  routes.sort((a, b) => b.prefix.length - a.prefix.length);
  return {
    unrouted: compileUnroutedDenials(counted, requestsOf(UNROUTED)),
    match(path) {
      for (const route of routes) {
        if (path === route.prefix || path.startsWith(route.below)) {
          return route.nested.length > 0 && lookalikeOfNestedRoute(path.slice(route.below.length).split('/'), route.nested) ? PATH_REFUSALS.lookalike : route;
        }
      }
      return null;
    },
  };
}

/**
 * A path under a route that a lenient upstream could read as a more specific route nested
 * under it: `/events/ADMIN`, `/events/admin;x` or `/events/admin.json` beside a route
 * `/events/admin` (case-insensitive routers, servlet path parameters, format suffixes). The
 * token was checked for the outer route only, so such a path is refused as ambiguous.
 */
function lookalikeOfNestedRoute(segments: readonly string[], nested: ReadonlyArray<readonly string[]>): boolean {
  return nested.some((route) => {
    let lookalike = false;
    for (let index = 0; index < route.length; index += 1) {
      const segment = segments[index];
      const expected = route[index]!;
      if (segment === undefined) return false;
      if (segment === expected) continue;
      if (!resembles(segment, expected)) return false;
      lookalike = true;
    }
    return lookalike;
  });
}

function resembles(segment: string, expected: string): boolean {
  const lower = segment.toLowerCase();
  const target = expected.toLowerCase();
  if (lower === target) return true;
  return lower.startsWith(target) && /^(?:[;.]|%3b)/.test(lower.slice(target.length));
}
