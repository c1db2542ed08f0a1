import Fastify, { LogController, type FastifyInstance } from 'fastify';
import { registerAdmin } from '../admin/index.js';
import type { TokengateContext } from '../context.js';
import { registerHealth, type WorkerReports } from '../observability/health.js';
import { fastifyLogger } from '../observability/logger.js';
import { nextRequestId } from '../observability/request-id.js';
import { observeRequests } from '../observability/requests.js';
import { createListenerGuard } from './guard.js';
import { answerUnrouted } from './unrouted.js';

/** The methods of the ops listener's routes (health, metrics, admin API). */
const OPS_METHODS = ['GET', 'HEAD', 'POST', 'DELETE'];

/** The ops listener, guarded, with nothing routed yet. */
export function createOpsListener(context: TokengateContext): FastifyInstance {
  const { admin } = context.config;
  const guard = createListenerGuard(
    'ops',
    { requestTimeoutMs: admin.requestTimeoutMs, maxConnections: admin.maxConnections, maxConnectionsPerAddress: 0, methods: OPS_METHODS },
    context.metrics,
  );
  const ops = Fastify({
    loggerInstance: fastifyLogger(context.log.child({ listener: 'ops' })),
    genReqId: nextRequestId,
    logController: new LogController({ disableRequestLogging: true }),
    ...guard.serverOptions(),
  });
  guard.attach(ops);
  answerUnrouted(ops, 'ops', context);
  return ops;
}

/**
 * Health, readiness, metrics; the admin API joins them, its requests counted and logged (probes
 * and scrapes are not). `adminToken`: the token the admin API requires. `workers`: a primary
 * answers for its workers.
 */
export async function routeOpsListener(ops: FastifyInstance, context: TokengateContext, adminToken: string, workers?: WorkerReports): Promise<void> {
  await registerHealth(ops, context.store, context.metrics, workers);
  await ops.register(async function observedAdmin(scope) {
    observeRequests(scope, 'ops', context.metrics, context.requestLog);
    await registerAdmin(scope, context, adminToken);
  });
}
