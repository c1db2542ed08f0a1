import cluster from 'node:cluster';
import type { Config } from '../config/schema.js';
import { configWarnings } from '../config/warnings.js';
import { createProcessLogger } from '../observability/logger.js';
import { runInstance } from './instance.js';
import { superviseWorkers } from './primary.js';
import { reloadOnChange } from './reload.js';
import { answerPrimary } from './worker.js';
import { workerCount } from './worker-count.js';

/**
 * `tokengate serve`: one process serving both listeners, or, with `server.workers` above 1, a
 * primary that serves the ops listener and supervises that many workers serving the public
 * listener (node:cluster shares its port between them). Resolves with the exit code once the
 * process has stopped: on SIGTERM or SIGINT every listener stops accepting, requests in flight
 * finish (at most `server.shutdownGraceMs`), and the store is closed. SIGHUP, or a change of
 * `file`, reloads the config (every worker's, with workers).
 */
export async function serve(config: Readonly<Config>, file: string): Promise<number> {
  const log = await createProcessLogger(config.logging.level);
  if (cluster.isWorker) {
    try {
      return await runInstance(
        config,
        log.child({ worker: cluster.worker!.id }),
        { serves: 'public' },
        { attach: (tokengate, stop) => answerPrimary(tokengate, stop, file) },
      );
    } finally {
      // The channel to the primary would keep this process alive, whether it stopped or failed to start.
      cluster.worker!.disconnect();
    }
  }
  for (const warning of configWarnings(config)) log.warn(warning);
  const workers = workerCount(config.server.workers);
  if (workers === 1) return runInstance(config, log, { serves: 'both' }, { attach: (tokengate) => reloadOnChange(file, log, tokengate) });
  return superviseWorkers(config, log, workers, file);
}
