import type { Logger } from 'pino';
import type { TracingConfig } from '../config/schema.js';
import { tracingSettings } from './settings.js';
import type { RequestTrace, SpanCounts, Tracing } from './trace.js';

/**
 * OpenTelemetry traces (docs/tracing.md): what the request path sees of them is in ./trace.ts;
 * the SDK (./sdk.ts) is imported only when tracing starts.
 */
export type { AttributeValue, ChildSpan, RequestTrace, SpanCounts, TracedToken, Tracing } from './trace.js';

/** Starts tracing when the config or the environment turns it on; null (nothing loaded) otherwise. */
export async function startTracing(
  section: TracingConfig,
  env: Readonly<Record<string, string | undefined>>,
  counts: SpanCounts,
  log: Logger,
): Promise<Tracing | null> {
  const { settings } = tracingSettings(section, env);
  if (settings === null) return null;
  const { createTracing } = await import('./sdk.js');
  return createTracing(settings, counts, log);
}

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The request's trace, for the steps that have the request and not the trace. A field of
     * every request from its start when tracing is on (`decorateRequest`), so requests keep one
     * shape; absent when tracing is off.
     */
    trace?: RequestTrace | null;
  }
}
