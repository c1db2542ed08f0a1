import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from './config/schema.js';
import type { TokengateContext } from './context.js';
import { registerAdmin } from './admin/index.js';
import { jsonErrorHandler, TokengateError } from './errors.js';
import { registerGateway } from './gateway/index.js';
import { createListenerGuard } from './http/listener-limits.js';
import { registerAuthorization } from './issuer/authorize/index.js';
import { registerIssuer } from './issuer/index.js';
import { registerHealth, type WorkerReports } from './observability/health.js';
import { createLogger, fastifyLogger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { cached } from './store/cached.js';
import { openStore } from './store/open-store.js';
import type { Store } from './store/store.js';
import { createTokenMinter, decodeTagKey, generateTagKey } from './token/token-value.js';

export interface BuildOptions {
  /** A store to use instead of opening the configured one (tests pass a Redis store with their own prefix). */
  store?: Store;
  logger?: Logger;
  /**
   * Which listeners this process serves: both (one process), the public one alone (a worker of
   * several, see src/serve/), or the ops one alone (their primary, which answers for them all
   * through `workers`).
   */
  serves?: 'both' | 'public' | 'ops';
  workers?: WorkerReports;
}

export interface Tokengate {
  readonly context: TokengateContext;
  /** Public listener: issuer endpoints and gateway routes. */
  readonly app: FastifyInstance;
  /** Ops listener: /healthz, /readyz, /metrics, admin API. */
  readonly ops: FastifyInstance;
  /** Binds the listeners it serves as configured; resolves with their URLs ('' for one it does not serve). */
  listen(): Promise<{ publicUrl: string; opsUrl: string }>;
  /** Stops accepting, lets in-flight requests finish, closes the store. */
  close(): Promise<void>;
}

/** During shutdown, how often connections that finished their last request are closed. */
const IDLE_SWEEP_MS = 50;

/** Builds one tokengate instance from a validated config. Nothing listens until listen(). */
export async function buildTokengate(config: Readonly<Config>, options: BuildOptions = {}): Promise<Tokengate> {
  const log = options.logger ?? createLogger(config.logging.level);
  const store = options.store ?? (await openStore(config.store));
  const ownsStore = options.store === undefined;
  const tagKey = config.issuer.tokenTagKey !== '' ? config.issuer.tokenTagKey : await store.getOrCreateSecret('token-tag-key', generateTagKey());
  const serves = options.serves ?? 'both';
  const servesPublic = serves !== 'ops';
  const servesOps = serves !== 'public';
  const metrics = createMetrics();
  // The store answered when it was opened (openStore pings it, and a store a caller passes in is its own).
  metrics.storeUp.set(1);
  // Only the public listener verifies tokens at speed; a primary's admin API reads the store.
  const cache = config.cache.enabled && servesPublic ? cached(store, config.cache, metrics) : null;
  const context: TokengateContext = {
    config,
    store: cache ?? store,
    cache,
    minter: createTokenMinter(decodeTagKey(tagKey)),
    metrics,
    log,
  };

  const publicLimits = createListenerGuard(
    'public',
    {
      requestTimeoutMs: config.server.requestTimeoutMs,
      maxConnections: config.server.maxConnections,
      maxConnectionsPerAddress: config.server.maxConnectionsPerAddress,
      methods: publicMethods(config),
    },
    metrics,
  );
  const opsLimits = createListenerGuard(
    'ops',
    { requestTimeoutMs: config.admin.requestTimeoutMs, maxConnections: config.admin.maxConnections, maxConnectionsPerAddress: 0, methods: OPS_METHODS },
    metrics,
  );
  const app = Fastify({
    loggerInstance: fastifyLogger(log.child({ listener: 'public' })),
    bodyLimit: config.server.bodyLimit,
    trustProxy: config.server.trustProxy,
    ...publicLimits.serverOptions({ maxHeaderSize: config.server.maxHeaderSize }),
    requestIdHeader: config.gateway.requestIdHeader,
    // Ids are unique across sidecars and restarts, so one id follows a request through every log.
    genReqId: () => randomUUID(),
    // No access log line per request: on the gateway's hot path it would cost more than the
    // check itself. Denials and errors are logged where they are decided.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    frameworkErrors: jsonErrorHandler(),
  });
  const ops = Fastify({
    loggerInstance: fastifyLogger(log.child({ listener: 'ops' })),
    logController: new LogController({ disableRequestLogging: true }),
    ...opsLimits.serverOptions(),
  });
  publicLimits.attach(app);
  opsLimits.attach(ops);
  for (const server of [app, ops]) {
    server.setErrorHandler(jsonErrorHandler());
    server.setNotFoundHandler((_request, reply) => reply.send(new TokengateError('NOT_FOUND')));
  }

  // Ops listener: health, readiness, metrics; the admin API joins it.
  if (servesOps) {
    await registerHealth(ops, context.store, metrics, options.workers);
    await registerAdmin(ops, context);
  }

  // Public listener: the issuer's endpoints and pages, then the gateway's routes. Each part
  // registers as its own encapsulated plugin, so its parsers and hooks stay its own.
  if (servesPublic) {
    if (config.issuer.enabled) await registerAuthorization(app, context);
    if (config.issuer.enabled) await registerIssuer(app, context);
    await registerGateway(app, context);
  }

  let closed = false;
  return {
    context,
    app,
    ops,
    async listen() {
      const publicUrl = servesPublic ? await app.listen({ host: config.server.host, port: config.server.port }) : '';
      const opsUrl = servesOps ? await ops.listen({ host: config.admin.host, port: config.admin.port }) : '';
      return { publicUrl, opsUrl };
    },
    async close() {
      if (closed) return;
      closed = true;
      // Fastify closes the connections that are idle when close() starts; a keep-alive
      // connection whose request was in flight then would hold close() open until the client
      // let go. Closing idle connections again as requests finish lets shutdown end with them.
      const idleSweep = setInterval(() => {
        app.server.closeIdleConnections();
        ops.server.closeIdleConnections();
      }, IDLE_SWEEP_MS);
      try {
        await Promise.all([app.close(), ops.close()]);
      } finally {
        clearInterval(idleSweep);
      }
      await cache?.stop();
      if (ownsStore) await store.close();
    },
  };
}

/** The methods the public listener serves (its Allow to a CONNECT): the issuer's and the routes'. */
function publicMethods(config: Readonly<Config>): string[] {
  const methods = new Set(config.issuer.enabled ? ['GET', 'HEAD', 'POST'] : []);
  for (const route of config.routes) for (const method of route.methods) methods.add(method);
  return [...methods];
}

/** The methods of the ops listener's routes (health, metrics, admin API). */
const OPS_METHODS = ['GET', 'HEAD', 'POST', 'DELETE'];
