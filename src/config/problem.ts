import type { Config } from './schema.js';

/** One thing wrong with a config file, located by its key path (`routes[2].upstream`). */
export interface ConfigProblem {
  path: string;
  message: string;
  line?: number;
}

/**
 * A room's checks of the config beyond its shape (a resource's identifier, a rate limit policy's
 * numbers): each room keeps its own, and the composition root hands them to the loader
 * (src/load-config.ts), so config/ imports no room above it.
 */
export type ConfigCheck = (config: Config, env: Environment) => ConfigProblem[];

/** The environment a config is read with (`${VAR}` substitution, and settings a room takes from it, as tracing's OTEL_* variables). */
export type Environment = Readonly<Record<string, string | undefined>>;
