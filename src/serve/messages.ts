/** What the primary and its workers say to each other over the cluster's IPC channel. */

export type PrimaryMessage = { tokengate: 'readiness?'; id: number } | { tokengate: 'metrics?'; id: number } | { tokengate: 'reload' };

/** `metrics`: the worker's registry as prom-client's getMetricsAsJSON() gives it. */
export type WorkerMessage = { tokengate: 'readiness'; id: number; ready: boolean } | { tokengate: 'metrics'; id: number; metrics: unknown[] };

export function isPrimaryMessage(message: unknown): message is PrimaryMessage {
  const kind = typeof message === 'object' && message !== null ? (message as { tokengate?: unknown }).tokengate : undefined;
  return kind === 'readiness?' || kind === 'metrics?' || kind === 'reload';
}

export function isWorkerMessage(message: unknown): message is WorkerMessage {
  const kind = typeof message === 'object' && message !== null ? (message as { tokengate?: unknown }).tokengate : undefined;
  return kind === 'readiness' || kind === 'metrics';
}
