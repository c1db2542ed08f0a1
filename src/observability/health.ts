import type { FastifyInstance } from 'fastify';
import type { Metrics } from './metrics.js';
import { OPENMETRICS_CONTENT_TYPE, acceptsOpenMetrics, openMetricsOf } from './openmetrics.js';

/**
 * What the primary of several workers knows of them (src/serve/): the ops listener it serves
 * reports for the whole process group.
 */
export interface WorkerReports {
  /** Each expected worker, with whether it is running and its store answers. */
  readiness(): Promise<WorkerReadiness[]>;
  /** Every worker's metrics, summed (prom-client's cluster aggregation), in the Prometheus text format or OpenMetrics. */
  metrics(openMetrics: boolean): Promise<string>;
}

export interface WorkerReadiness {
  readonly worker: number;
  readonly ready: boolean;
}

/** What readiness asks of the store. */
export interface StoreProbe {
  readonly backend: { readonly driver: string };
  ping(): Promise<void>;
}

/** Liveness, readiness and the Prometheus scrape, on the ops listener. */
export async function registerHealth(ops: FastifyInstance, store: StoreProbe, metrics: Metrics, workers?: WorkerReports): Promise<void> {
  ops.get('/healthz', async (_request, reply) => {
    reply.header('cache-control', 'no-store');
    return { status: 'ok' };
  });

  // Ready means able to verify tokens: the store answers (and, with workers, every worker is up
  // and its own store connection answers).
  ops.get('/readyz', async (_request, reply) => {
    reply.header('cache-control', 'no-store');
    const driver = store.backend.driver;
    try {
      await store.ping();
      metrics.storeUp.set(1);
    } catch {
      metrics.storeUp.set(0);
      return reply.code(503).send({ status: 'unavailable', store: driver, reason: 'store_unreachable' });
    }
    if (workers === undefined) return { status: 'ready', store: driver };
    const fleet = await workers.readiness();
    const ready = fleet.every((worker) => worker.ready);
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? 'ready' : 'unavailable', store: driver, ...(ready ? {} : { reason: 'workers_not_ready' }), workers: fleet });
  });

  // OpenMetrics (with the duration histograms' exemplars) to a scrape that asks for it; the Prometheus text to any other.
  ops.get('/metrics', async (request, reply) => {
    const openMetrics = acceptsOpenMetrics(request.headers.accept);
    reply.header('content-type', openMetrics ? OPENMETRICS_CONTENT_TYPE : metrics.registry.contentType);
    if (workers !== undefined) return workers.metrics(openMetrics);
    return openMetrics ? openMetricsOf(metrics.registry) : metrics.registry.metrics();
  });
}
