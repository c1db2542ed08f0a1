import type { Tokengate } from '../app.js';
import { loadConfigFile } from '../load-config.js';
import { isPrimaryMessage, type WorkerMessage } from './messages.js';

/**
 * A worker's side of its primary: it hands over its metrics when the primary is scraped, it
 * answers readiness questions, it
 * reloads its config when told, and it stops when the primary goes away (an orphaned worker would hold the port with nobody to
 * report for it).
 */
export function answerPrimary(tokengate: Tokengate, stop: (reason: string) => void, file: string): void {
  // The primary watches the config and tells every worker to reload; a SIGHUP sent to the whole
  // process group (a terminal's) must not end a worker, as it would by default.
  process.on('SIGHUP', () => {});
  process.on('message', (message: unknown) => {
    if (!isPrimaryMessage(message)) return;
    if (message.tokengate === 'reload') {
      tokengate.reload(() => loadConfigFile(file));
      return;
    }
    const id = message.id;
    if (message.tokengate === 'metrics?') {
      tokengate.context.metrics.registry.getMetricsAsJSON().then(
        (metrics) => reply({ tokengate: 'metrics', id, metrics }),
        () => {},
      );
      return;
    }
    tokengate.context.store.ping().then(
      () => reply({ tokengate: 'readiness', id, ready: true }),
      () => reply({ tokengate: 'readiness', id, ready: false }),
    );
  });
  process.once('disconnect', () => stop('the primary process is gone'));
}

function reply(message: WorkerMessage): void {
  // The channel may close while the store answers (the primary is stopping): nothing to tell then.
  if (process.connected) process.send!(message);
}
