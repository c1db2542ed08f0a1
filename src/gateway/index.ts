import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ROUTE_METHODS } from '../config/routes.js';
import type { TokengateContext } from '../context.js';
import { normalizePath, PathRefusal } from '../http/path.js';
import type { VerifiedToken } from '../token/verified-token.js';
import { authorizeRoute, isMethodAllowed } from './authorize-route.js';
import { deny, type Denial } from './denials.js';
import { extractCredential, type Credential, type ExtractionFailure } from './extract-credential.js';
import { awaitContinue, createForwarder, isAwaitingContinue, type ForwardTarget } from './forward.js';
import { compileRouteTable, type GatewayRoute } from './route-table.js';
import { compileHeaderRules } from './upstream-headers.js';
import { handleUpgrades, isUpgrade, isWebSocketUpgrade } from './upgrade.js';
import { verifyToken, type VerificationFailure } from './verify-token.js';

type Route = GatewayRoute<ForwardTarget>;

/**
 * The gateway: every request to a configured route prefix is checked, then forwarded.
 * Registered as its own encapsulated plugin: its catch-all route and its pass-through body
 * parser stay inside it. The issuer's routes are more specific and win in the router.
 */
export async function registerGateway(app: FastifyInstance, context: TokengateContext): Promise<void> {
  await app.register(async function gateway(scope) {
    const { server, gateway } = context.config;
    const requestIdHeader = gateway.requestIdHeader.toLowerCase();
    const rules = compileHeaderRules(gateway, server.trustProxy);
    const forwarder = createForwarder(rules, requestIdHeader, context.metrics);
    const table = compileRouteTable(context.config, context.metrics, forwarder.createTarget);
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
    scope.route({ method: [...ROUTE_METHODS, 'TRACE'], url: '/*', handler: handleGatewayRequest });

    // A client that sends `Expect: 100-continue` waits for permission before sending its body.
    // A gateway request gets it only once its token is checked (a refused upload is never
    // sent); every other request, at once.
    scope.server.on('checkContinue', (request, response) => {
      const url = request.url ?? '';
      const queryStart = url.indexOf('?');
      const path = normalizePath(queryStart === -1 ? url : url.slice(0, queryStart));
      const route = typeof path === 'string' ? table.match(path) : null;
      if (route !== null && !(route instanceof PathRefusal)) awaitContinue(request);
      else response.writeContinue();
      scope.server.emit('request', request, response);
    });

    function refuse(request: FastifyRequest, reply: FastifyReply, denial: Denial): undefined {
      // The client still holds its body back: the connection cannot be reused after this answer.
      if (isAwaitingContinue(request.raw)) reply.header('connection', 'close');
      deny(request, reply, denial, requestIdHeader);
      return undefined;
    }

    /**
     * The request path, in order: where (normalize, match, method) -> extract -> verify ->
     * authorize -> forward. Each step returns a result or a stable denial reason; the reason
     * picks a denial compiled at start (the whole response and its metric children).
     *
     * Only two steps may have to wait: reading a body that can carry the token, and reading the
     * store on a cache miss. A step that waits hands its result to the next with .then; one that
     * does not calls it directly, so a cached token in a header goes through without a single
     * promise. The handler returns undefined when it has answered (or handed the reply to the
     * forwarder), and a promise of the reply otherwise.
     */
    function handleGatewayRequest(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> | undefined {
      const raw = request.raw;
      // 0. where: the normalized path picks the route and is exactly what the upstream receives.
      if (raw.rawHeaders.length > server.maxHeaders * 2) return refuse(request, reply, table.unrouted.tooManyHeaders);
      const url = raw.url!;
      const queryStart = url.indexOf('?');
      const path = normalizePath(queryStart === -1 ? url : url.slice(0, queryStart));
      if (path instanceof PathRefusal) return refuse(request, reply, table.unrouted.invalidPath.get(path)!);
      const route = table.match(path);
      if (route === null) return refuse(request, reply, table.unrouted.notFound);
      if (route instanceof PathRefusal) return refuse(request, reply, table.unrouted.invalidPath.get(route)!);
      if (!isMethodAllowed(route, raw.method!)) return refuse(request, reply, route.denials.method_not_allowed);
      if (isUpgrade(request) && !isWebSocketUpgrade(request)) return refuse(request, reply, route.denials.unsupported_upgrade);

      // 1. extract: exactly one RFC 6750 credential, removed from what will be forwarded.
      const query = queryStart === -1 ? '' : url.slice(queryStart + 1);
      const credential = extractCredential(route, raw, query, (request.body as Readable | undefined) ?? null, server.bodyLimit);
      if (credential instanceof Promise) return credential.then((read) => verify(request, reply, route, path, read) ?? reply);
      return verify(request, reply, route, path, credential);
    }

    // 2. verify: the cache, else the tag check and one store read.
    function verify(request: FastifyRequest, reply: FastifyReply, route: Route, path: string, credential: Credential | ExtractionFailure) {
      if (typeof credential === 'string') return refuse(request, reply, route.denials[credential]);
      const token = verifyToken(context, credential.token);
      if (token instanceof Promise) return token.then((read) => authorizeAndForward(request, reply, route, path, credential, read) ?? reply);
      return authorizeAndForward(request, reply, route, path, credential, token);
    }

    // 3. authorize: the route's token kind and scopes; 4. forward: to the upstream of this token
    // kind, with identity headers and without the credential.
    function authorizeAndForward(
      request: FastifyRequest,
      reply: FastifyReply,
      route: Route,
      path: string,
      credential: Credential,
      token: VerifiedToken | VerificationFailure,
    ): undefined {
      if (typeof token === 'string') return refuse(request, reply, route.denials[token]);
      const refusal = authorizeRoute(route, token);
      if (refusal !== null) return refuse(request, reply, route.denials[refusal]);
      const target = route.targets[token.kind]!;
      if (isUpgrade(request)) forwardUpgrade(request, reply, target, path, credential, token);
      else forwarder.forward(request, reply, target, path, credential, token);
      return undefined;
    }
  });
}
