import cluster from 'node:cluster';
import type { Logger } from 'pino';
import { AdminTokenFileError, servedAdminToken } from '../admin/credential.js';
import type { Config } from '../config/schema.js';
import { configWarnings } from '../config/warnings.js';
import { PRODUCTION_SCRYPT_PARAMETERS, SCRYPT_PARAMETERS, TEST_MODE_VARIABLE } from '../issuer/passwords.js';
import { createProcessLogger } from '../observability/logger.js';
import { StartupError } from '../store/open-store.js';
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
  if (SCRYPT_PARAMETERS.N < PRODUCTION_SCRYPT_PARAMETERS.N)
    log.warn(`${TEST_MODE_VARIABLE}: new password hashes use scrypt N=${SCRYPT_PARAMETERS.N}, for test suites only; never run production like this`);
  // Only the process that serves the ops listener (the primary, with workers) holds the admin token.
  const adminToken = keptAdminToken(config, log);
  const workers = workerCount(config.server.workers);
  if (workers === 1) return runInstance(config, log, { serves: 'both', adminToken }, { attach: (tokengate) => reloadOnChange(file, log, tokengate) });
  return superviseWorkers(config, log, workers, file, adminToken);
}

/**
 * The admin token when the config sets none: the one kept for this user of the machine, made at
 * the first start (src/admin/credential.ts), so the CLI finds it with no flag. A file that
 * cannot be used stops the start: an admin API nobody can call, or anyone can, is no use.
 */
function keptAdminToken(config: Readonly<Config>, log: Logger): string {
  let served: ReturnType<typeof servedAdminToken>;
  try {
    served = servedAdminToken(config.admin.token);
  } catch (error) {
    if (!(error instanceof AdminTokenFileError)) throw error;
    throw new StartupError(
      `admin.token is not set, and the admin token kept for this user cannot be used: ${error.message}. Set admin.token (e.g. through TOKENGATE_ADMIN_TOKEN) or XDG_STATE_HOME`,
    );
  }
  if (served.file !== null)
    log.info({ adminTokenFile: served.file }, 'admin.token is not set: the admin API requires the token kept in adminTokenFile, where the CLI reads it');
  return served.token;
}
