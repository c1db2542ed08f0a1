import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from './config/schema.js';
import type { TokengateContext } from './context.js';
import { registerAdmin } from './admin/index.js';
import { createDecisionListener, type DecisionListener } from './decisions/index.js';
import { TokengateError, isTokengateError, rawErrorResponse } from './errors.js';
import { registerGateway } from './gateway/index.js';
import { registerAuthorization } from './issuer/authorize/index.js';
import { registerIssuer } from './issuer/index.js';
import { registerHealth } from './observability/health.js';
import { createLogger, fastifyLogger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { cached } from './store/cached.js';
import { openStore } from './store/open-store.js';
import { StoreUnavailableError, type Store } from './store/store.js';
import { createTokenMinter, decodeTagKey, generateTagKey } from './token/token-value.js';

export interface BuildOptions {
  /** A store to use instead of opening the configured one (tests pass a Redis store with their own prefix). */
  store?: Store;
  logger?: Logger;
}

export interface Tokengate {
  readonly context: TokengateContext;
  /** Public listener: issuer endpoints and gateway routes. */
  readonly app: FastifyInstance;
  /** Ops listener: /healthz, /readyz, /metrics, admin API. */
  readonly ops: FastifyInstance;
  /** Decision listener (an ingress's token checks); null unless decisions.enabled. */
  readonly decisions: DecisionListener | null;
  /** Binds the listeners as configured; resolves with their URLs. */
  listen(): Promise<{ publicUrl: string; opsUrl: string; decisionsUrl: string | null }>;
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
  const metrics = createMetrics();
  const cache = config.cache.enabled ? cached(store, config.cache, metrics) : null;
  const context: TokengateContext = {
    config,
    store: cache ?? store,
    cache,
    minter: createTokenMinter(decodeTagKey(tagKey)),
    metrics,
    log,
  };

  const app = Fastify({
    loggerInstance: fastifyLogger(log.child({ listener: 'public' })),
    bodyLimit: config.server.bodyLimit,
    trustProxy: config.server.trustProxy,
    requestTimeout: config.server.requestTimeoutMs,
    http: { maxHeaderSize: config.server.maxHeaderSize },
    requestIdHeader: config.gateway.requestIdHeader,
    // Ids are unique across sidecars and restarts, so one id follows a request through every log.
    genReqId: () => randomUUID(),
    // No access log line per request: on the gateway's hot path it would cost more than the
    // check itself. Denials and errors are logged where they are decided.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    frameworkErrors: renderError,
    clientErrorHandler: renderClientError,
  });
  const ops = Fastify({
    loggerInstance: fastifyLogger(log.child({ listener: 'ops' })),
    logController: new LogController({ disableRequestLogging: true }),
  });
  for (const server of [app, ops]) {
    server.setErrorHandler(renderError);
    server.setNotFoundHandler((_request, reply) => reply.send(new TokengateError('NOT_FOUND')));
  }

  // Ops listener: health, readiness, metrics; the admin API joins it.
  await registerHealth(ops, context);
  await registerAdmin(ops, context);

  // Public listener: the issuer's endpoints and pages, then the gateway's routes. Each part
  // registers as its own encapsulated plugin, so its parsers and hooks stay its own.
  if (config.issuer.enabled) await registerAuthorization(app, context);
  if (config.issuer.enabled) await registerIssuer(app, context);
  const gateway = await registerGateway(app, context);
  // The decision listener shares the gateway's route table and header rules (one compile).
  const decisions = config.decisions.enabled ? createDecisionListener(context, gateway) : null;

  let closed = false;
  return {
    context,
    app,
    ops,
    decisions,
    async listen() {
      const publicUrl = await app.listen({ host: config.server.host, port: config.server.port });
      const opsUrl = await ops.listen({ host: config.admin.host, port: config.admin.port });
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
      await cache?.stop();
      if (ownsStore) await store.close();
    },
  };
}

/**
 * The one error renderer: TokengateErrors keep their status and RFC body; fastify's own
 * client errors (bad JSON, body too large, unsupported media type) become invalid_request;
 * anything else is a 500 whose detail stays in the log.
 */
function renderError(error: Error & { statusCode?: number; code?: string }, request: FastifyRequest, reply: FastifyReply) {
  let failure: TokengateError;
  if (isTokengateError(error)) failure = error;
  else if (error instanceof StoreUnavailableError) {
    request.log.warn({ err: error.message }, 'token store unavailable');
    failure = new TokengateError('STORE_UNAVAILABLE');
  } else if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') failure = new TokengateError('BODY_TOO_LARGE');
  else if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') failure = new TokengateError('UNSUPPORTED_MEDIA_TYPE');
  else if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
    failure = new TokengateError('INVALID_REQUEST', { description: publicClientErrorMessage(error) });
  } else {
    request.log.error({ err: error }, 'unhandled error');
    failure = new TokengateError('INTERNAL');
  }
  if (failure.detail !== undefined) request.log.info({ code: failure.code, detail: failure.detail }, 'request refused');
  if (failure.headers !== undefined) reply.headers(failure.headers);
  reply.code(failure.status).header('cache-control', 'no-store').send(failure.toBody());
}

/**
 * Requests node's parser refuses before fastify sees them (oversized head: 431, malformed or
 * smuggling-shaped framing such as Content-Length with Transfer-Encoding: 400, slow head: 408)
 * get the same JSON error body, then the connection is closed.
 */
function renderClientError(error: Error & { code?: string }, socket: Duplex) {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const failure = new TokengateError(
    error.code === 'HPE_HEADER_OVERFLOW' ? 'HEADERS_TOO_LARGE' : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'REQUEST_TIMEOUT' : 'INVALID_REQUEST',
  );
  if (socket.writable) socket.end(rawErrorResponse(failure));
  socket.destroy();
}

/** Fastify's client-error messages describe the request's shape, never its content: safe to show. */
function publicClientErrorMessage(error: Error & { code?: string }): string {
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return 'The request body is not valid JSON.';
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return 'The Content-Length header does not match the body.';
    case 'FST_ERR_BAD_URL':
      return 'The request path is not valid percent-encoded UTF-8.';
    default:
      return 'The request is malformed.';
  }
}
