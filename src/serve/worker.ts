import { AggregatorRegistry } from 'prom-client';
import type { Tokengate } from '../app.js';
import { loadConfigFile } from '../load-config.js';
import { isPrimaryMessage, type WorkerMessage } from './messages.js';

/**
 * A worker's side of its primary: its metrics are handed over when the primary is scraped
 * (prom-client's cluster aggregation asks every worker), it answers readiness questions, it
 * reloads its config when told, and it stops when the primary goes away (an orphaned worker would hold the port with nobody to
 * report for it).
 */
export function answerPrimary(tokengate: Tokengate, stop: (reason: string) => void, file: string): void {
  AggregatorRegistry.setRegistries([tokengate.context.metrics.registry]);
  // prom-client starts answering the primary's metric requests once this process has an aggregator.
  new AggregatorRegistry();
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
