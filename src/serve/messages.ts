/** What the primary and its workers say to each other over the cluster's IPC channel. */

export type PrimaryMessage = { tokengate: 'readiness?'; id: number } | { tokengate: 'reload' };

export type WorkerMessage = { tokengate: 'readiness'; id: number; ready: boolean };

export function isPrimaryMessage(message: unknown): message is PrimaryMessage {
  const kind = typeof message === 'object' && message !== null ? (message as { tokengate?: unknown }).tokengate : undefined;
  return kind === 'readiness?' || kind === 'reload';
}

export function isWorkerMessage(message: unknown): message is WorkerMessage {
  return typeof message === 'object' && message !== null && (message as { tokengate?: unknown }).tokengate === 'readiness';
}
