#!/usr/bin/env node
import { readFileSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ADMIN_COMMANDS } from './cli/admin-commands.js';
import { CLIENT_METADATA_COMMANDS } from './cli/client-metadata-commands.js';
import { CommandError, configOption, DEFAULT_CONFIG, operandsApart, UsageError, type Command, type OptionValues } from './cli/command.js';
import { ConfigError, loadConfigFile } from './load-config.js';
import { configWarnings } from './config/warnings.js';
import { StartupError } from './store/open-store.js';
import { describeTopology, redisConnection } from './store/redis-topology.js';

/**
 * The tokengate command. Each command is a named entry of COMMANDS; a failure the user can fix
 * (config, unreachable Redis, bad arguments) prints one paragraph and exits non-zero; a stack
 * trace only with --debug or TOKENGATE_DEBUG=1.
 */

export const COMMANDS: Record<string, Command> = {
  serve: {
    summary: 'Start the issuer, the gateway, the ops listener and (when enabled) the decision listener.',
    usage: 'tokengate serve [--config FILE]',
    options: configOption,
    async run(values) {
      const file = String(values.config);
      const config = loadConfigFile(file);
      // Loaded here, not at the top: the admin commands only make an HTTP call and start faster without the server.
      const { serve } = await import('./serve/index.js');
      return serve(config, file);
    },
  },
  check: {
    summary: 'Validate a config file; exit 0 when it is valid, 2 with every problem otherwise.',
    usage: 'tokengate check [--config FILE]',
    options: configOption,
    async run(values) {
      const config = loadConfigFile(String(values.config));
      for (const warning of configWarnings(config)) process.stderr.write(`tokengate: warning: ${warning}\n`);
      const issuer = config.issuer.enabled ? `issuer at ${config.issuer.issuerUrl}` : 'issuer off';
      const store = config.store.driver === 'memory' ? 'memory' : `redis, ${describeTopology(redisConnection(config.store).topology)}`;
      process.stdout.write(`${String(values.config)} is valid: ${config.routes.length} route(s), store ${store}, ${issuer}\n`);
      return 0;
    },
  },
  ...ADMIN_COMMANDS,
  ...CLIENT_METADATA_COMMANDS,
};

function help(): string {
  const lines = Object.entries(COMMANDS).map(([, command]) => `  ${command.usage.padEnd(58)} ${command.summary}`);
  return `tokengate: OAuth 2 issuer and token-checking gateway\n\nUsage:\n${lines.join('\n')}\n  ${'tokengate --version'.padEnd(58)} Print the version.\n\nEvery command reads --config (default: $TOKENGATE_CONFIG or ${DEFAULT_CONFIG}).\n`;
}

/** The version of the package this file belongs to: package.json sits one level above src/ and dist/ alike. */
export function version(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

export async function main(argv: string[]): Promise<number> {
  const debug = argv.includes('--debug') || process.env.TOKENGATE_DEBUG === '1';
  const args = argv.filter((arg) => arg !== '--debug');
  const [first, second, ...rest] = args;
  if (first === undefined || first === '--help' || first === '-h' || first === 'help') {
    process.stdout.write(help());
    return first === undefined ? 2 : 0;
  }
  if (first === '--version' || first === '-v') {
    process.stdout.write(`tokengate ${version()}\n`);
    return 0;
  }
  // Two-word commands (`apps create`) take precedence over one-word ones.
  const twoWord = second !== undefined ? `${first} ${second}` : undefined;
  const name = twoWord !== undefined && COMMANDS[twoWord] !== undefined ? twoWord : first;
  const command = COMMANDS[name];
  const commandArgs = name === twoWord ? rest : args.slice(1);
  try {
    if (command === undefined) throw new UsageError(`unknown command "${first}"; run tokengate --help for the list`);
    let parsed;
    try {
      const options = { ...command.options, help: { type: 'boolean', short: 'h' } } as const;
      parsed = parseArgs({ args: operandsApart(commandArgs, options), options, allowPositionals: true, strict: true });
    } catch (error) {
      throw new UsageError(`${(error as Error).message}\nusage: ${command.usage}`);
    }
    if (parsed.values.help) {
      process.stdout.write(`${command.usage}\n\n${command.summary}\n`);
      return 0;
    }
    return await command.run(parsed.values as OptionValues, parsed.positionals);
  } catch (error) {
    return reportFailure(error, debug);
  }
}

function reportFailure(error: unknown, debug: boolean): number {
  if (debug) process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  if (error instanceof ConfigError) {
    process.stderr.write(`tokengate: invalid configuration\n${error.message}\n`);
    return 2;
  }
  if (error instanceof UsageError) {
    process.stderr.write(`tokengate: ${error.message}\n`);
    return 2;
  }
  if (error instanceof CommandError) {
    process.stderr.write(`tokengate: ${error.message}\n`);
    return 1;
  }
  if (error instanceof StartupError) {
    process.stderr.write(`tokengate: cannot start: ${error.message}\n`);
    return 1;
  }
  if (!debug) process.stderr.write(`tokengate: ${(error as Error).message ?? String(error)}\n(run again with --debug for the stack trace)\n`);
  return 1;
}

function isEntryPoint(): boolean {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

// Run only as the entry point (directly or through the npm bin link), not when tests import COMMANDS.
if (isEntryPoint()) {
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
