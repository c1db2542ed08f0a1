import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { ConfigError } from './config/load.js';
import type { ConfigProblem } from './config/problem.js';
import { changedSections, configHash, effectiveConfig, restartKeys, type ReloadOutcome } from './config/reload.js';
import { checkRoutes } from './config/routes.js';
import type { CacheConfig, Config } from './config/schema.js';
import type { TokengateContext } from './context.js';
import { registerAdmin } from './admin/index.js';
import { isMetadataClientId } from './client-metadata/client-id.js';
import { createDpop } from './dpop/index.js';
import { createDecisionListener, type DecisionListener } from './decisions/index.js';
import { jsonErrorHandler, TokengateError } from './errors.js';
import { registerGateway } from './gateway/index.js';
import { createListenerGuard } from './http/listener-limits.js';
import { registerHealth, type WorkerReports } from './observability/health.js';
import { createLogger, fastifyLogger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { nextRequestId } from './observability/request-id.js';
import { observeRequests, RequestLog, RouteRequests, UNROUTED } from './observability/requests.js';
import { cached, type CachedTokens } from './store/cached.js';
import { registerResourceMetadata } from './resource/metadata-endpoint.js';
import { leasesFor } from './ratelimit/leases.js';
import { RateLimiter } from './ratelimit/limiter.js';
import { openStore } from './store/open-store.js';
import { startTracing } from './tracing/index.js';
import { withTokens, type Store } from './store/store.js';
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
  /** Decision listener (an ingress's token checks); null unless decisions.enabled and this process serves the public side. */
  readonly decisions: DecisionListener | null;
  /** Binds the listeners it serves as configured; resolves with their URLs ('' for one it does not serve, null for decisions off). */
  listen(): Promise<{ publicUrl: string; opsUrl: string; decisionsUrl: string | null }>;
  /**
   * Applies a new config between two requests: `load` reads and validates it whole (a
   * ConfigError it throws, or a route the running issuer overlaps, keeps the running config, and
   * every problem is logged). Routes, rate limit policies, cache and logging settings are swapped in; requests in
   * flight finish on the routes they matched. Changed keys that need a restart are logged by
   * name and keep their running values. Counted in tokengate_config_reloads_total.
   */
  reload(load: () => Readonly<Config>): ReloadOutcome;
  /** Stops accepting, lets in-flight requests finish, closes the store. */
  close(): Promise<void>;
}

/** During shutdown, how often connections that finished their last request are closed. */
const IDLE_SWEEP_MS = 50;

/** Builds one tokengate instance from a validated config. Nothing listens until listen(). */
export async function buildTokengate(config: Readonly<Config>, options: BuildOptions = {}): Promise<Tokengate> {
  const log = options.logger ?? createLogger(config.logging.level);
  const store = options.store ?? (await openStore(config.store, log));
  const ownsStore = options.store === undefined;
  const tagKey = config.issuer.tokenTagKey !== '' ? config.issuer.tokenTagKey : await store.secrets.getOrCreate('token-tag-key', generateTagKey());
  const serves = options.serves ?? 'both';
  const servesPublic = serves !== 'ops';
  const servesOps = serves !== 'public';
  const metrics = createMetrics();
  // The store answered when it was opened (openStore pings it, and a store a caller passes in is its own).
  metrics.storeUp.set(1);
  // Only the public listener verifies tokens at speed; a primary's admin API reads the store.
  const cacheOf = (settings: CacheConfig): CachedTokens | null => (settings.enabled && servesPublic ? cached(store.tokens, settings, metrics) : null);
  const readThrough = (tokenCache: CachedTokens | null): Store => (tokenCache === null ? store : withTokens(store, tokenCache));
  const cache = cacheOf(config.cache);
  const tagKeyBytes = decodeTagKey(tagKey);
  // Loaded only when on: a deployment without it never holds its code.
  const clientMetadata = config.clientMetadataDocuments.enabled
    ? (await import('./client-metadata/index.js')).createClientMetadata(config.clientMetadataDocuments, config.issuer, store.backend, metrics, log)
    : null;
  // Every process that serves requests exports its own spans (each worker of server.workers).
  const tracing = servesPublic
    ? await startTracing(config.tracing, process.env, { exported: metrics.traceSpansExported, dropped: metrics.traceSpansDropped }, log)
    : null;
  const context: TokengateContext = {
    config,
    store: readThrough(cache),
    cache,
    minter: createTokenMinter(tagKeyBytes),
    dpop: createDpop(config.dpop, store.backend, tagKeyBytes),
    metrics,
    log,
    rateLimiter: new RateLimiter(config, leasesFor(store.backend), (clientId) => applicationTier(context, clientId), metrics, log),
    clientMetadata,
    requestLog: new RequestLog(config.logging.requests),
    tracing,
  };
  // Caches replaced by a reload, stopping (close() waits for them).
  const stoppingCaches: Array<Promise<void>> = [];
  let hash = configHash(config);
  metrics.configInfo.set({ hash }, 1);
  for (const result of ['success', 'failure']) metrics.configReloads.inc({ result }, 0);
  for (const reason of ['queue_full', 'export_failed'] as const) metrics.traceSpansDropped.inc({ reason }, 0);
  metrics.configLastReloadSuccessful.set(1);

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
    genReqId: nextRequestId,
    // No access log line per request: on the gateway's hot path it would cost more than the
    // check itself. Denials and errors are logged where they are decided.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    frameworkErrors: jsonErrorHandler(),
  });
  const ops = Fastify({
    loggerInstance: fastifyLogger(log.child({ listener: 'ops' })),
    genReqId: nextRequestId,
    logController: new LogController({ disableRequestLogging: true }),
    ...opsLimits.serverOptions(),
  });
  // Each request's trace is a field of fastify's request, there from its start.
  if (tracing !== null) app.decorateRequest('trace', null);
  publicLimits.attach(app);
  opsLimits.attach(ops);
  for (const [server, listener] of [
    [app, 'public'],
    [ops, 'ops'],
  ] as const) {
    server.setErrorHandler(jsonErrorHandler());
    // Methods no route takes (PROPFIND), and paths of the ops listener it does not serve.
    const unrouted = new RouteRequests(metrics.requests, context.requestLog, listener, UNROUTED);
    server.setNotFoundHandler((request, reply) => {
      unrouted.completed(request, reply, 404, 'not_found');
      void reply.send(new TokengateError('NOT_FOUND'));
    });
  }

  // Ops listener: health, readiness, metrics; the admin API joins it, its requests counted and
  // logged (probes and scrapes are not).
  if (servesOps) {
    await registerHealth(ops, context.store, metrics, options.workers);
    await ops.register(async function observedAdmin(scope) {
      observeRequests(scope, 'ops', metrics, context.requestLog);
      await registerAdmin(scope, context);
    });
  }

  // Public listener: the issuer's endpoints and pages, then the gateway's routes. Each part
  // registers as its own encapsulated plugin, so its parsers and hooks stay its own. The gateway
  // counts and logs its own requests (most of them it answers outside fastify's reply).
  if (servesPublic && config.issuer.enabled) {
    // Loaded only here: a gateway-only sidecar (issuer.enabled: false) never holds the issuer's code.
    const [{ registerAuthorization }, { registerIssuer }] = await Promise.all([import('./issuer/authorize/index.js'), import('./issuer/index.js')]);
    await app.register(async function observedIssuer(scope) {
      observeRequests(scope, 'public', metrics, context.requestLog, tracing);
      await registerAuthorization(scope, context);
      await registerIssuer(scope, context);
    });
  }
  // The resources' metadata (RFC 9728) is the resource side's: served with or without the issuer.
  if (servesPublic) await registerResourceMetadata(app, context);
  const gatewayRoutes = servesPublic ? await registerGateway(app, context) : null;
  // The decision listener shares the gateway's route table and header rules (one compile, one reload).
  const decisions = gatewayRoutes !== null && config.decisions.enabled ? createDecisionListener(context, gatewayRoutes) : null;
  let closed = false;

  function reload(load: () => Readonly<Config>): ReloadOutcome {
    const running = context.config;
    const loaded = closed ? { problems: [{ path: '', message: 'tokengate is shutting down' }] } : loadForReload(load, running);
    if (!('config' in loaded)) {
      metrics.configReloads.inc({ result: 'failure' });
      metrics.configLastReloadSuccessful.set(0);
      log.error({ file: loaded.file, problems: loaded.problems }, 'config reload failed: the running config stays');
      return { result: 'failure', problems: loaded.problems, applied: [], restartRequired: [], hash };
    }
    const next = loaded.config;
    const applied = changedSections(running, next);
    const restartRequired = restartKeys(running, next);
    const effective = effectiveConfig(running, next);
    // Everything below is synchronous: no request sees half of it.
    // Policies first: the routes compiled next name them. A route's challenges name its
    // resource's metadata: a changed resource recompiles the routes too.
    if (applied.includes('rateLimits')) context.rateLimiter.configure(effective);
    if (applied.includes('routes') || applied.includes('resources') || applied.includes('rateLimits')) gatewayRoutes?.replace(effective);
    if (applied.includes('cache')) {
      const previous = context.cache;
      context.cache = cacheOf(effective.cache);
      context.store = readThrough(context.cache);
      if (previous !== null) stoppingCaches.push(previous.stop());
    }
    if (effective.logging.level !== running.logging.level) {
      // Each listener logs through its own child, which its requests' loggers copy the level from.
      for (const logger of [log, app.log, ops.log]) logger.level = effective.logging.level;
    }
    context.requestLog.configure(effective.logging.requests);
    context.config = effective;
    const previousHash = hash;
    hash = configHash(effective);
    if (hash !== previousHash) {
      metrics.configInfo.reset();
      metrics.configInfo.set({ hash }, 1);
    }
    metrics.configReloads.inc({ result: 'success' });
    metrics.configLastReloadSuccessful.set(1);
    log.info({ hash, applied, routes: effective.routes.length }, applied.length > 0 ? 'config reloaded' : 'config reloaded: nothing to apply');
    if (restartRequired.length > 0) {
      log.warn({ keys: restartRequired }, 'config keys changed that take effect only on restart; they keep their running values');
    }
    return { result: 'success', problems: [], applied, restartRequired, hash };
  }

  return {
    context,
    app,
    ops,
    decisions,
    reload,
    async listen() {
      const publicUrl = servesPublic ? await app.listen({ host: config.server.host, port: config.server.port }) : '';
      const opsUrl = servesOps ? await ops.listen({ host: config.admin.host, port: config.admin.port }) : '';
      const decisionsUrl = decisions === null ? null : await decisions.listen();
      return { publicUrl, opsUrl, decisionsUrl };
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
        await Promise.all([app.close(), ops.close(), decisions?.close()]);
      } finally {
        clearInterval(idleSweep);
      }
      await context.rateLimiter.close();
      // The spans of the last requests go out before the process ends (within the export timeout).
      await tracing?.shutdown();
      await clientMetadata?.close();
      await context.cache?.stop();
      await Promise.all(stoppingCaches);
      if (ownsStore) await store.close();
    },
  };
}

/** The new config, validated whole, or every problem it has (and the file it came from). */
function loadForReload(load: () => Readonly<Config>, running: Readonly<Config>): { config: Readonly<Config> } | { problems: ConfigProblem[]; file?: string } {
  let config: Readonly<Config>;
  try {
    config = load();
  } catch (error) {
    if (error instanceof ConfigError) return { problems: error.problems, file: error.file };
    return { problems: [{ path: '', message: (error as Error).message }] };
  }
  // The file's routes were checked against its own issuer.enabled; they meet the running issuer.
  const problems = checkRoutes(config.routes, { issuerEnabled: running.issuer.enabled, decisionsEnabled: running.decisions.enabled });
  return problems.length > 0 ? { problems } : { config };
}

/** An application's rate limit tier: a registered one's own, or a metadata document client's from its entry of the list. */
async function applicationTier(context: TokengateContext, clientId: string): Promise<string | null> {
  if (context.clientMetadata !== null && isMetadataClientId(clientId)) return context.clientMetadata.tier(clientId);
  return (await context.store.applications.get(clientId))?.rateLimit ?? null;
}

/** The methods the public listener serves (its Allow to a CONNECT): the issuer's and the routes'. */
function publicMethods(config: Readonly<Config>): string[] {
  const methods = new Set(config.issuer.enabled ? ['GET', 'HEAD', 'POST'] : []);
  for (const route of config.routes) for (const method of route.methods) methods.add(method);
  return [...methods];
}

/** The methods of the ops listener's routes (health, metrics, admin API). */
const OPS_METHODS = ['GET', 'HEAD', 'POST', 'DELETE'];
