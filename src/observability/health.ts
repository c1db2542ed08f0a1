import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';

/** Liveness, readiness and the Prometheus scrape, on the ops listener. */
export async function registerHealth(ops: FastifyInstance, context: TokengateContext): Promise<void> {
  ops.get('/healthz', async (_request, reply) => {
    reply.header('cache-control', 'no-store');
    return { status: 'ok' };
  });

  // Ready means able to verify tokens: the store answers.
  ops.get('/readyz', async (_request, reply) => {
    reply.header('cache-control', 'no-store');
    try {
      await context.store.ping();
      context.metrics.storeUp.set(1);
      return { status: 'ready', store: context.store.driver };
    } catch {
      context.metrics.storeUp.set(0);
      return reply.code(503).send({ status: 'unavailable', store: context.store.driver, reason: 'store_unreachable' });
    }
  });

  ops.get('/metrics', async (_request, reply) => {
    reply.header('content-type', context.metrics.registry.contentType);
    return context.metrics.registry.metrics();
  });
}
