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

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * The words of a command line as node's parseArgs must see them for values that begin with `-`.
 * parseArgs (strict) takes every such word for an option: `--client -Kaw...` is "ambiguous" and
 * `apps delete -Kaw...` an unknown option `-K`; yet client ids issued before they stopped
 * beginning with `-` (one in 64 did), key ids and a provider's subjects may. So, as getopt does,
 * an option that takes a value takes the next word whatever it begins with, and a word with one
 * `-` that is no group of the command's short flags is an operand. A word beginning with `--`
 * that names no option stays an error (a mistyped option must not pass for an id): an operand
 * beginning with `--` goes after `--`, as everywhere.
 */
export function operandsApart(args: readonly string[], options: Options): string[] {
  const valueOf = new Map<string, string>();
  const shortFlags = new Set<string>();
  for (const [name, option] of Object.entries(options)) {
    if (option.type === 'string') {
      valueOf.set(`--${name}`, name);
      if (option.short !== undefined) valueOf.set(`-${option.short}`, name);
    } else if (option.short !== undefined) shortFlags.add(option.short);
  }
  const optionWords: string[] = [];
  const operands: string[] = [];
  for (let index = 0; index < args.length; index += 1) {
    const word = args[index]!;
    if (word === '--') {
      operands.push(...args.slice(index + 1));
      break;
    }
    const takesValue = valueOf.get(word);
    if (takesValue !== undefined && index + 1 < args.length) optionWords.push(`--${takesValue}=${args[(index += 1)]!}`);
    else if (isOperand(word, valueOf, shortFlags)) operands.push(word);
    else optionWords.push(word);
  }
  return [...optionWords, '--', ...operands];
}

function isOperand(word: string, valueOf: ReadonlyMap<string, string>, shortFlags: ReadonlySet<string>): boolean {
  if (!word.startsWith('-') || word === '-') return true;
  if (word.startsWith('--')) return false;
  // `-cVALUE`: a short option with its value attached.
  if (valueOf.has(word.slice(0, 2))) return false;
  return ![...word.slice(1)].every((letter) => shortFlags.has(letter));
}
