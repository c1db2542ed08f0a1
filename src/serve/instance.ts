import type { Logger } from 'pino';
import { buildTokengate, type BuildOptions, type Tokengate } from '../app.js';
import type { Config } from '../config/schema.js';

export interface RunHooks {
  /**
   * Called once the instance listens, with a way to stop it (a worker talks to its primary, a
   * process watches its config file); what it returns is called when the instance stops.
   */
  attach?: (tokengate: Tokengate, stop: (reason: string) => void) => (() => void) | void;
  /** Runs before the listeners close (a primary lets its workers drain first). */
  beforeClose?: () => Promise<void>;
  /** After a stop was asked, how long before the process exits anyway (default server.shutdownGraceMs). */
  graceMs?: number;
}

/** Builds one instance, binds its listeners, and runs until asked to stop. */
export async function runInstance(config: Readonly<Config>, log: Logger, options: BuildOptions, hooks: RunHooks = {}): Promise<number> {
  const tokengate = await buildTokengate(config, { ...options, logger: log });
  let urls: { publicUrl: string; opsUrl: string };
  try {
    urls = await tokengate.listen();
  } catch (error) {
    // A port taken, an address not on this host: the store and its connections go too, or they would keep the process alive.
    await tokengate.close();
    throw error;
  }
  const { publicUrl, opsUrl } = urls;
  const issuerUrl = config.issuer.enabled ? config.issuer.issuerUrl : undefined;
  log.info(
    { publicUrl: publicUrl || undefined, opsUrl: opsUrl || undefined, issuerUrl, store: config.store.driver, routes: config.routes.length },
    'tokengate listening',
  );
  let exitCode = 0;
  let detach: (() => void) | undefined;
  await new Promise<void>((resolve) => {
    let stopping = false;
    const stop = (reason: string) => {
      if (stopping) return;
      stopping = true;
      log.info({ reason }, 'shutting down: no new connections, finishing in-flight requests');
      const graceMs = hooks.graceMs ?? config.server.shutdownGraceMs;
      const forced = setTimeout(() => {
        log.error({ graceMs }, 'in-flight requests did not finish in time; exiting');
        process.exit(1);
      }, graceMs);
      forced.unref();
      (hooks.beforeClose?.() ?? Promise.resolve())
        .then(() => tokengate.close())
        .then(resolve, (error: unknown) => {
          log.error({ err: error }, 'error while shutting down');
          exitCode = 1;
          resolve();
        });
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    detach = hooks.attach?.(tokengate, stop) ?? undefined;
  });
  detach?.();
  log.info('tokengate stopped');
  return exitCode;
}
