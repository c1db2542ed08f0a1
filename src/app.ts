import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { ConfigError } from './config/load.js';
import type { ConfigProblem } from './config/problem.js';
import { changedSections, configHash, effectiveConfig, restartKeys, type ReloadOutcome } from './config/reload.js';
import { checkRoutes } from './config/routes.js';
import type { Config } from './config/schema.js';
import { createContext, type CreatedContext, type TokengateContext } from './context.js';
import type { GatewayRoutes } from './gateway/index.js';
import { createDecisionListener, type DecisionListener } from './listeners/decisions.js';
import { createOpsListener, routeOpsListener } from './listeners/ops.js';
import { createPublicListener, routePublicListener } from './listeners/public.js';
import { closeBackChannel } from './logout/back-channel.js';
import type { WorkerReports } from './observability/health.js';
import { createLogger } from './observability/logger.js';
import { openStore } from './store/open-store.js';
import type { Store } from './store/store.js';

/** Which listeners a process serves (BuildOptions.serves). */
export type Serves = 'both' | 'public' | 'ops';

export interface BuildOptions {
  /** A store to use instead of opening the configured one (tests pass a Redis store with their own prefix). */
  store?: Store;
  logger?: Logger;
  /**
   * Which listeners this process serves: both (one process), the public one alone (a worker of
   * several, see src/serve/), or the ops one alone (their primary, which answers for them all
   * through `workers`).
   */
  serves?: Serves;
  workers?: WorkerReports;
  /**
   * The admin token when the config sets none: the one `tokengate serve` keeps in its file
   * (src/admin/credential.ts). Without either, the admin API refuses every call.
   */
  adminToken?: string;
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
  const serves = options.serves ?? 'both';
  const store = options.store ?? (await openStore(config.store, log));
  const created = await createContext(config, store, log, serves !== 'ops');
  const adminToken = config.admin.token !== '' ? config.admin.token : (options.adminToken ?? '');
  const listeners = await buildListeners(created.context, serves, adminToken, options.workers);
  const lifecycle: Lifecycle = { closed: false, stoppingCaches: [] };
  const reload = wireReload(created, listeners, lifecycle);
  return {
    context: created.context,
    app: listeners.app,
    ops: listeners.ops,
    decisions: listeners.decisions,
    reload,
    listen: () => start(config, listeners, serves, created.context),
    close: () => stop(created.context, listeners, lifecycle, options.store === undefined ? store : null),
  };
}

interface Listeners {
  readonly app: FastifyInstance;
  readonly ops: FastifyInstance;
  readonly decisions: DecisionListener | null;
  /** The gateway's route table, which a reload replaces; null when this process does not serve the public side. */
  readonly gatewayRoutes: GatewayRoutes | null;
  /** Whether the public listener serves the shared signals push endpoint (a receiver took pushes at start); null when it does not serve the public side. */
  readonly pushEndpoint: boolean | null;
}

/** What stopping needs to know: whether it has begun, and the caches a reload replaced, still stopping. */
interface Lifecycle {
  closed: boolean;
  readonly stoppingCaches: Array<Promise<void>>;
}

/** Both fastify listeners exist in every process; only the sides it serves get their routes. */
async function buildListeners(context: TokengateContext, serves: Serves, adminToken: string, workers: WorkerReports | undefined): Promise<Listeners> {
  const app = createPublicListener(context);
  const ops = createOpsListener(context);
  if (serves !== 'public') await routeOpsListener(ops, context, adminToken, workers);
  const gatewayRoutes = serves !== 'ops' ? await routePublicListener(app, context) : null;
  // The decision listener shares the gateway's route table and header rules (one compile, one reload).
  const decisions = gatewayRoutes !== null && context.config.decisions.enabled ? createDecisionListener(context, gatewayRoutes) : null;
  return { app, ops, decisions, gatewayRoutes, pushEndpoint: serves !== 'ops' ? context.sharedSignals.pushes : null };
}

/** The reload of this instance, and the config metrics it keeps from the start. */
function wireReload({ context, cacheFor, readThrough }: CreatedContext, listeners: Listeners, lifecycle: Lifecycle): Tokengate['reload'] {
  const { metrics, log } = context;
  let hash = configHash(context.config);
  metrics.configInfo.set({ hash }, 1);
  for (const result of ['success', 'failure']) metrics.configReloads.inc({ result }, 0);
  for (const reason of ['queue_full', 'export_failed'] as const) metrics.traceSpansDropped.inc({ reason }, 0);
  metrics.configLastReloadSuccessful.set(1);

  return function reload(load) {
    const running = context.config;
    const loaded = lifecycle.closed ? { problems: [{ path: '', message: 'tokengate is shutting down' }] } : loadForReload(load, running);
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
    if (applied.includes('routes') || applied.includes('resources') || applied.includes('rateLimits')) listeners.gatewayRoutes?.replace(effective);
    if (applied.includes('identityProviders')) {
      revokeUntrusted(context, context.identityProviders.replace(effective.identityProviders));
      context.sharedSignals.replace(effective.identityProviders);
      if (context.sharedSignals.pushes && listeners.pushEndpoint === false)
        log.warn('a shared signals receiver takes pushed events, but the push endpoint is served only when one did at start: restart to serve it');
    }
    if (applied.includes('cache')) {
      const previous = context.cache;
      context.cache = cacheFor(effective.cache);
      context.store = readThrough(context.cache);
      if (previous !== null) lifecycle.stoppingCaches.push(previous.stop());
    }
    if (effective.logging.level !== running.logging.level) {
      // Each listener logs through its own child, which its requests' loggers copy the level from.
      for (const logger of [log, listeners.app.log, listeners.ops.log]) logger.level = effective.logging.level;
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
  };
}

/**
 * A provider removed from the trusted list takes every token issued from its assertions with
 * it, through the revocation feed. In the background: the reload itself stays synchronous, and
 * every process that reloads does it (a revocation found done is a revocation of nothing).
 */
function revokeUntrusted(context: TokengateContext, issuers: readonly string[]): void {
  for (const issuer of issuers) {
    context.store.tokens.revokeIdentityTokens(issuer).then(
      (revoked) => context.log.info({ issuer, revoked }, 'identity provider no longer trusted: its tokens revoked'),
      (error: unknown) => context.log.error({ issuer, err: error }, 'identity provider no longer trusted: revoking its tokens failed'),
    );
  }
}

/** Binds the listeners this process serves, at the addresses of the config it started with, then starts the shared signals' stream work. */
async function start(config: Readonly<Config>, listeners: Listeners, serves: Serves, context: TokengateContext): ReturnType<Tokengate['listen']> {
  const publicUrl = serves !== 'ops' ? await listeners.app.listen({ host: config.server.host, port: config.server.port }) : '';
  const opsUrl = serves !== 'public' ? await listeners.ops.listen({ host: config.admin.host, port: config.admin.port }) : '';
  const decisionsUrl = listeners.decisions === null ? null : await listeners.decisions.listen();
  context.sharedSignals.start();
  return { publicUrl, opsUrl, decisionsUrl };
}

/** `ownedStore`: the store this instance opened, closed last (one a caller passed in is the caller's). */
async function stop(context: TokengateContext, listeners: Listeners, lifecycle: Lifecycle, ownedStore: Store | null): Promise<void> {
  if (lifecycle.closed) return;
  lifecycle.closed = true;
  const { app, ops, decisions } = listeners;
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
  // Logout tokens still being retried are dropped: this instance can no longer keep its promise of them.
  await closeBackChannel(context);
  // The spans of the last requests go out before the process ends (within the export timeout).
  await context.tracing?.shutdown();
  await context.clientMetadata?.close();
  context.identity?.ring.stop();
  context.openid?.keys.stop();
  // The event in hand is applied whole, and the poller's lease given up for another sidecar.
  await context.sharedSignals.close();
  await context.identityProviders.close();
  await context.cache?.stop();
  await Promise.all(lifecycle.stoppingCaches);
  await ownedStore?.close();
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
