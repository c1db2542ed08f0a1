import { foreignCaller } from './callers.js';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ROUTE_METHODS } from '../config/routes.js';
import type { Config } from '../config/schema.js';
import type { TokengateContext } from '../context.js';
import { proxyTrust } from '../http/trusted-proxies.js';
import { RouteRequests } from '../observability/requests.js';
import { check, isDenial, locate, type Checked, type Located } from './check.js';
import { deny, type Denial } from './denials.js';
import { awaitContinue, createForwarder, isAwaitingContinue, type Forwarder, type ForwardTarget } from './forward.js';
import { compileRouteTable, type RouteTable } from './route-table.js';
import { compileHeaderRules, type HeaderRules } from './upstream-headers.js';
import { handleUpgrades, isUpgrade, isWebSocketUpgrade, type UpgradeForwarder } from './upgrade.js';

/**
 * The gateway as the rest of tokengate uses it: its route table and header rules (the decision
 * listener checks requests against the same ones), and the config reload's way to replace them.
 */
export interface GatewayRoutes {
  /** The routes in effect: read it for each request, a reload replaces it. */
  readonly table: RouteTable<ForwardTarget>;
  readonly rules: HeaderRules;
  /**
   * Compiles the routes of `config` and puts them in place of the running ones, whole, in one
   * assignment: requests from then on are matched against them, and requests already matched
   * keep the route (and upstream pool) they matched. The pools of upstreams no route names any
   * more close once their requests are done.
   */
  replace(config: Readonly<Config>): void;
}

/**
 * The gateway: every request to a configured route prefix is checked, then forwarded.
 * Registered as its own encapsulated plugin: its catch-all route and its pass-through body
 * parser stay inside it. The issuer's routes are more specific and win in the router.
 */
export async function registerGateway(app: FastifyInstance, context: TokengateContext): Promise<GatewayRoutes> {
  let routes: GatewayRoutes | undefined;
  await app.register(async function gateway(scope) {
    const { server, gateway } = context.config;
    const requestIdHeader = gateway.requestIdHeader.toLowerCase();
    const rules = compileHeaderRules(gateway, proxyTrust(server.trustProxy), context.config.signedIdentity.header);
    const forwarder = createForwarder(rules, requestIdHeader, context.metrics);
    routes = compiledRoutes(context, rules, forwarder);
    const forwardUpgrade = handleUpgrades(scope, rules, requestIdHeader);
    scope.addHook('onClose', () => forwarder.close());

    // Node stops storing header fields past this count; one more than allowed is enough to refuse.
    scope.server.maxHeadersCount = server.maxHeaders + 1;

    // Bodies are not parsed: they stream to the upstream. The few that may carry a token
    // (form or JSON POSTs on routes that accept body tokens) are read by extractCredential.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, body, done) => done(null, body));

    // Every method fastify parses reaches the handler, so a method a route does not list is a
    // 405 from the route table, not a 404. The raw URL is matched, not the router's view of it.
    const handler = gatewayHandler(context, routes, forwarder, forwardUpgrade, requestIdHeader);
    scope.route({ method: [...ROUTE_METHODS, 'TRACE'], url: '/*', handler });
    continueOnceChecked(scope, routes, server.maxHeaders);
  });
  return routes!;
}

/** The route table compiled from the config, and its replacement by a reload. */
function compiledRoutes(context: TokengateContext, rules: HeaderRules, forwarder: Forwarder): GatewayRoutes {
  const compile = (config: Readonly<Config>) =>
    compileRouteTable(
      config,
      context.metrics,
      forwarder.createTarget,
      (label) => new RouteRequests(context.metrics.requests, context.requestLog, 'public', label),
      context.rateLimiter,
    );
  let table = compile(context.config);
  return {
    get table() {
      return table;
    },
    rules,
    replace(config) {
      table = compile(config);
      forwarder.retainOnly(config.routes);
    },
  };
}

/**
 * A client that sends `Expect: 100-continue` waits for permission before sending its body. A
 * gateway request gets it only once its token is checked (a refused upload is never sent);
 * every other request, at once.
 */
function continueOnceChecked(scope: FastifyInstance, routes: GatewayRoutes, maxHeaders: number): void {
  scope.server.on('checkContinue', (request, response) => {
    if (isDenial(locate(routes.table, request.method ?? '', request.url ?? '', 0, maxHeaders))) response.writeContinue();
    else awaitContinue(request);
    scope.server.emit('request', request, response);
  });
}

/**
 * The request path (docs/gateway.md#the-request-path): the checks of ./check.ts, shared with the
 * decision listener, then forward. The handler returns undefined when
 * it has answered (or handed the reply to the forwarder), and a promise of the reply when a step
 * had to wait.
 */
function gatewayHandler(
  context: TokengateContext,
  routes: GatewayRoutes,
  forwarder: Forwarder,
  forwardUpgrade: UpgradeForwarder,
  requestIdHeader: string,
): (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply> | undefined {
  const { server } = context.config;
  const tracing = context.tracing;

  function refuse(request: FastifyRequest, reply: FastifyReply, denial: Denial): undefined {
    // The client still holds its body back: the connection cannot be reused after this answer.
    if (isAwaitingContinue(request.raw)) reply.header('connection', 'close');
    deny(request, reply, denial, requestIdHeader);
    return undefined;
  }

  // 7. forward: to the upstream of the token's kind, with identity headers and without the credential.
  function forward(request: FastifyRequest, reply: FastifyReply, located: Located<ForwardTarget>, checked: Checked | Denial): undefined {
    if (isDenial(checked)) return refuse(request, reply, checked);
    const { route } = located;
    const target = route.targets[checked.token.kind]!;
    const identityHeaders = route.signedIdentity === null || !route.signedIdentity.instead;
    if (isUpgrade(request)) forwardUpgrade(request, reply, target, located.path, checked.credential, checked.token, checked.assertion, identityHeaders);
    else forwarder.forward(request, reply, target, located.path, checked.credential, checked.token, checked.admission, checked.assertion, identityHeaders);
    return undefined;
  }

  return function handleGatewayRequest(request, reply) {
    const raw = request.raw;
    // The server span, kept on the request: every way the request ends ends it (RouteRequests).
    const trace = tracing === null ? null : tracing.startRequest('public', raw.method!, raw.headers);
    if (trace !== null) request.trace = trace;
    // 0. where: the normalized path picks the route and is exactly what the upstream receives.
    const located = locate(routes.table, raw.method!, raw.url!, raw.rawHeaders.length / 2, server.maxHeaders);
    if (isDenial(located)) return refuse(request, reply, located);
    if (!located.route.forwarded) return refuse(request, reply, located.route.denials.not_forwarded);
    if (isUpgrade(request) && !isWebSocketUpgrade(request)) return refuse(request, reply, located.route.denials.unsupported_upgrade);
    // A page of another site, or a name the route does not answer to (DNS rebinding): the upstream sees only its own host.
    const foreign = foreignCaller(located.route.callers, raw.headers.origin, request.host);
    if (foreign !== null) return refuse(request, reply, located.route.denials[foreign]);

    // 1-6. The checks: one credential, a valid token, its DPoP proof where one is due, the
    // route's resource, kind and scopes, a rate limit permit, the signed identity where the route asks.
    // The fastify request is the DPoP subject: its protocol and host follow server.trustProxy, read only for DPoP.
    const checked = check(context, located, raw, (request.body as Readable | undefined) ?? null, server.bodyLimit, request, trace);
    if (checked instanceof Promise) return checked.then((outcome) => forward(request, reply, located, outcome) ?? reply);
    return forward(request, reply, located, checked);
  };
}
