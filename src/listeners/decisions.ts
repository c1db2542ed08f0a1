import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TokengateContext } from '../context.js';
import { createDecisionHandler } from '../decisions/index.js';
import { ingressRevocations, REVOCATIONS_ENDPOINT } from '../decisions/revocations.js';
import type { GatewayRoutes } from '../gateway/index.js';
import { createListenerGuard } from './guard.js';
import { publicLimits } from './public.js';

/**
 * The decision listener (src/decisions/ answers its requests). Plain node:http, not fastify:
 * every request the ingress serves costs one of these, and the answer is a status and a few
 * headers, so nothing of a framework is needed on this path.
 */
export interface DecisionListener {
  readonly server: Server;
  /** Binds decisions.host and decisions.port; resolves with the listener's URL. */
  listen(): Promise<string>;
  /** Stops accepting, lets the checks in flight finish, closes the ingress's idle connections. */
  close(): Promise<void>;
}

/**
 * Longer than the idle timeout of the ingresses' upstream connections (nginx keepalive_timeout
 * 60 s): the ingress, not tokengate, closes an idle connection, so it never reuses one that
 * tokengate is closing at the same moment.
 */
export const DECISION_KEEP_ALIVE_MS = 72_000;
/** During shutdown, how often connections that finished their last check are closed. */
const IDLE_SWEEP_MS = 50;

export function createDecisionListener(context: TokengateContext, gateway: GatewayRoutes): DecisionListener {
  const { config } = context;
  // The public listener's limits: timeouts, connection caps, and node's own refusals answered in order.
  const guard = createListenerGuard('decisions', publicLimits(config, ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']), context.metrics);
  const decide = createDecisionHandler(context, gateway);
  // What was revoked, for an ingress that keeps decisions; the store's revocation feed, followed
  // on a subscription of its own. The config is read when asked: a reload changes the routes' bounds.
  const revocations = ingressRevocations(context.store.tokens, () => context.config);
  const server = createServer(guard.serverOptions({ maxHeaderSize: config.server.maxHeaderSize }).http, (request, response) => {
    if (isRevocationsPoll(request.url!)) revocations.answer(request, response);
    else decide(request, response);
  });
  server.keepAliveTimeout = DECISION_KEEP_ALIVE_MS;
  guard.attachServer(server);
  return {
    server,
    listen() {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(config.decisions.port, config.decisions.host, () => {
          server.off('error', reject);
          const { address, port, family } = server.address() as AddressInfo;
          resolve(`http://${family === 'IPv6' ? `[${address}]` : address}:${port}`);
        });
      });
    },
    async close() {
      // The polls held are answered now (503): the ingress stops keeping decisions until another answers.
      await revocations.close();
      if (!server.listening) return;
      // Keep-alive connections whose check was in flight when close() started become idle later.
      const idleSweep = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS);
      try {
        await new Promise<void>((resolve) => server.close(() => resolve()));
      } finally {
        clearInterval(idleSweep);
      }
    },
  };
}

function isRevocationsPoll(url: string): boolean {
  return url.startsWith(REVOCATIONS_ENDPOINT) && (url.length === REVOCATIONS_ENDPOINT.length || url.charCodeAt(REVOCATIONS_ENDPOINT.length) === 0x3f);
}
