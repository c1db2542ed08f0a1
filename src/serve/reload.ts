import type { Logger } from 'pino';
import type { Tokengate } from '../app.js';
import { loadConfigFile } from '../load-config.js';
import { watchConfig } from '../config/watch.js';

/**
 * Reloads `tokengate` on SIGHUP and when `file` changes (`also`: what else a change asks, such
 * as telling the workers). Returns the function that stops watching.
 */
export function reloadOnChange(file: string, log: Logger, tokengate: Tokengate, also: () => void = () => {}): () => void {
  return watchConfig(
    file,
    (trigger) => {
      log.info({ trigger, file }, 'reloading the config');
      tokengate.reload(() => loadConfigFile(file));
      also();
    },
    { onError: (error) => log.warn({ file, error: error.message }, 'cannot watch the config file for changes; SIGHUP still reloads it') },
  );
}
