import type { ParseArgsConfig } from 'node:util';

/** The shape every `tokengate` command shares; src/main.ts dispatches to them by name. */

export const DEFAULT_CONFIG = 'config/tokengate.yaml';

/** Bad arguments: printed with the command's usage, exit 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** A failure the user can fix (instance not running, refused by the admin API): one line, exit 1, no stack. */
export class CommandError extends Error {
  override name = 'CommandError';
}

export type OptionValues = Record<string, string | boolean | string[] | undefined>;

export interface Command {
  summary: string;
  usage: string;
  options: NonNullable<ParseArgsConfig['options']>;
  run(values: OptionValues, positionals: string[]): Promise<number>;
}

export const configOption = { config: { type: 'string', short: 'c', default: process.env.TOKENGATE_CONFIG || DEFAULT_CONFIG } } as const;
