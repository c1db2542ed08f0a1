import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ROUTE_METHODS } from '../config/routes.js';
import type { TokengateContext } from '../context.js';
import { authorizeRoute, isMethodAllowed } from './authorize-route.js';
import { deny } from './denials.js';
import { extractCredential } from './extract-credential.js';
import { createForwarder, isUpgrade, isWebSocketUpgrade } from './forward.js';
import { normalizePath, PathRefusal } from './normalize-path.js';
import { compileRouteTable } from './route-table.js';
import { verifyToken } from './verify-token.js';

/**
 * The gateway: every request to a configured route prefix is checked, then forwarded.
 * Registered as its own encapsulated plugin: its catch-all route, its pass-through body parser
 * and reply-from stay inside it. The issuer's routes are more specific and win in the router.
 */
export async function registerGateway(app: FastifyInstance, context: TokengateContext): Promise<void> {
  await app.register(async function gateway(scope) {
    const forwarder = await createForwarder(scope, context);
    const table = compileRouteTable(context.config, context.metrics, forwarder.createTarget);
    const bodyLimit = context.config.server.bodyLimit;
    const requestIdHeader = context.config.gateway.requestIdHeader.toLowerCase();

    // Bodies are not parsed: they stream to the upstream. The few that may carry a token
    // (form or JSON POSTs on routes that accept body tokens) are read by extractCredential.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, body, done) => done(null, body));

    // Every method fastify parses reaches the handler, so a method a route does not list is a
    // 405 from the route table, not a 404. The raw URL is matched, not the router's view of it.
    scope.route({ method: [...ROUTE_METHODS, 'TRACE'], url: '/*', handler: handleGatewayRequest });

    /**
     * The request path, in order: where (normalize, match, method) -> extract -> verify ->
     * authorize -> forward. Each step returns a result or a stable denial reason; the reason
     * picks a denial compiled at start (error, challenge, metric children), so refusing builds
     * no error, header or label per request.
     */
    async function handleGatewayRequest(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
      reply.header(requestIdHeader, request.id);
      const url = request.raw.url!;
      const queryStart = url.indexOf('?');

      // 0. where: the normalized path picks the route and is exactly what the upstream receives.
      const path = normalizePath(queryStart === -1 ? url : url.slice(0, queryStart));
      if (path instanceof PathRefusal) return deny(request, reply, table.unrouted.invalidPath.get(path)!);
      const route = table.match(path);
      if (route === null) return deny(request, reply, table.unrouted.notFound);
      if (route instanceof PathRefusal) return deny(request, reply, table.unrouted.invalidPath.get(route)!);
      if (!isMethodAllowed(route, request.method)) return deny(request, reply, route.denials.method_not_allowed);
      const upgrade = isUpgrade(request);
      if (upgrade && !isWebSocketUpgrade(request)) return deny(request, reply, route.denials.unsupported_upgrade);

      // 1. extract: exactly one RFC 6750 credential, removed from what will be forwarded.
      const credential = await extractCredential(request, route, queryStart === -1 ? '' : url.slice(queryStart + 1), bodyLimit);
      if (typeof credential === 'string') return deny(request, reply, route.denials[credential]);

      // 2. verify: tag check, then one store lookup (the cache when it is on).
      const grant = await verifyToken(context, credential.token);
      if (typeof grant === 'string') return deny(request, reply, route.denials[grant]);

      // 3. authorize: the route's token kind and scopes.
      const refusal = authorizeRoute(route, grant);
      if (refusal !== null) return deny(request, reply, route.denials[refusal]);

      // 4. forward: to the upstream of this token kind, with identity headers and without the credential.
      const target = route.targets[grant.kind]!;
      return upgrade
        ? forwarder.forwardUpgrade(request, reply, target, path, credential, grant)
        : forwarder.forward(request, reply, target, path, credential, grant);
    }
  });
}
