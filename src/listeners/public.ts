import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { Config } from '../config/schema.js';
import type { TokengateContext } from '../context.js';
import { jsonErrorHandler } from '../errors.js';
import { proxyTrust } from '../http/trusted-proxies.js';
import { registerGateway, type GatewayRoutes } from '../gateway/index.js';
import { fastifyLogger } from '../observability/logger.js';
import { nextRequestId } from '../observability/request-id.js';
import { observeRequests } from '../observability/requests.js';
import { registerResourceMetadata } from '../resource/metadata-endpoint.js';
import { registerJwks } from '../identity/jwks-endpoint.js';
import { registerOpenIdJwks } from '../openid/jwks-endpoint.js';
import { registerPushEndpoint } from '../shared-signals/index.js';
import { createListenerGuard, type ListenerLimits } from './guard.js';
import { answerUnrouted } from './unrouted.js';

/** The public listener, guarded, with nothing routed yet: the issuer's endpoints and the gateway's routes. */
export function createPublicListener(context: TokengateContext): FastifyInstance {
  const { config } = context;
  const guard = createListenerGuard('public', publicLimits(config, publicMethods(config)), context.metrics);
  const trust = proxyTrust(config.server.trustProxy);
  const app = Fastify({
    loggerInstance: fastifyLogger(context.log.child({ listener: 'public' })),
    bodyLimit: config.server.bodyLimit,
    // A function even for a hop count: fastify refuses a bare number (it would trust nothing).
    ...(trust === null ? {} : { trustProxy: trust }),
    ...guard.serverOptions({ maxHeaderSize: config.server.maxHeaderSize }),
    requestIdHeader: config.gateway.requestIdHeader,
    // Ids are unique across sidecars and restarts, so one id follows a request through every log.
    genReqId: nextRequestId,
    // No access log line per request: on the gateway's hot path it would cost more than the
    // check itself. Denials and errors are logged where they are decided.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    frameworkErrors: jsonErrorHandler(),
  });
  // Each request's trace is a field of fastify's request, there from its start.
  if (context.tracing !== null) app.decorateRequest('trace', null);
  guard.attach(app);
  answerUnrouted(app, 'public', context);
  return app;
}

/**
 * The issuer's endpoints and pages, the resources' metadata, then the gateway's routes. Each part
 * registers as its own encapsulated plugin, so its parsers and hooks stay its own. The gateway
 * counts and logs its own requests (most of them it answers outside fastify's reply).
 */
export async function routePublicListener(app: FastifyInstance, context: TokengateContext): Promise<GatewayRoutes> {
  if (context.config.issuer.enabled) {
    // Loaded only here: a gateway-only sidecar (issuer.enabled: false) never holds the issuer's code.
    const [{ registerAuthorization }, { registerIssuer }] = await Promise.all([import('../issuer/authorize/index.js'), import('../issuer/index.js')]);
    await app.register(async function observedIssuer(scope) {
      observeRequests(scope, 'public', context.metrics, context.requestLog, context.tracing);
      await registerAuthorization(scope, context);
      await registerIssuer(scope, context);
    });
  }
  // The resources' metadata (RFC 9728) is the resource side's: served with or without the issuer.
  await registerResourceMetadata(app, context);
  // The keys that sign identity assertions, for the resource services to verify them.
  if (context.identity !== null) await registerJwks(app, context.identity, context);
  // The keys that sign ID tokens, for applications to verify them.
  if (context.openid !== null) await registerOpenIdJwks(app, context.openid, context);
  // Security Event Tokens pushed by identity providers' transmitters, while one pushes.
  if (context.sharedSignals.pushes) await registerPushEndpoint(app, context.sharedSignals, context);
  return registerGateway(app, context);
}

/** The public listener's limits (`server`), which the decision listener shares; `methods` is the listener's own. */
export function publicLimits(config: Readonly<Config>, methods: readonly string[]): ListenerLimits {
  const { requestTimeoutMs, maxConnections, maxConnectionsPerAddress } = config.server;
  return { requestTimeoutMs, maxConnections, maxConnectionsPerAddress, methods };
}

/** The methods the public listener serves (its Allow to a CONNECT): the issuer's, the push endpoint's and the routes'. */
function publicMethods(config: Readonly<Config>): string[] {
  const methods = new Set(config.issuer.enabled ? ['GET', 'HEAD', 'POST'] : []);
  if (config.identityProviders.some((provider) => provider.sharedSignals?.delivery === 'push')) methods.add('POST');
  for (const route of config.routes) for (const method of route.methods) methods.add(method);
  return [...methods];
}
