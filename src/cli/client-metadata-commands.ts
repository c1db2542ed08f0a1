import type { AllowEntryView } from '../admin/client-metadata.js';
import { adminClientFor } from './admin-client.js';
import { configOption, UsageError, type Command, type OptionValues } from './command.js';

/**
 * The operator's list of client ID metadata documents, through the admin API of the running
 * instance (`--config`): which clients may sign users in with a URL as their client_id.
 */

const ALLOW_USAGE =
  'tokengate client-metadata allow URL [--scopes "public"] [--resource URI [--resource URI2]] [--dpop required|allowed] [--rate-limit POLICY] [--json]';
const DISALLOW_USAGE = 'tokengate client-metadata disallow URL';

const client = (values: OptionValues) => adminClientFor(String(values.config));

function print(text: string): void {
  process.stdout.write(`${text}\n`);
}

function oneUrl(positionals: string[], usage: string): string {
  if (positionals.length !== 1) throw new UsageError(`expected one URL (an https origin, a prefix ending in /, or one client id)\nusage: ${usage}`);
  return positionals[0]!;
}

function describe(entry: AllowEntryView): string {
  return [
    `scopes: ${entry.scopes === null ? '(default)' : entry.scopes.join(' ')}`,
    `resources: ${entry.resources.length === 0 ? '(all)' : entry.resources.join(' ')}`,
    `dpop: ${entry.dpop}`,
    `rate limit: ${entry.rate_limit ?? '-'}`,
  ].join(', ');
}

export const CLIENT_METADATA_COMMANDS: Record<string, Command> = {
  'client-metadata allow': {
    summary: 'Allow the clients whose metadata documents are under URL (an https origin or prefix) to sign users in.',
    usage: ALLOW_USAGE,
    options: {
      ...configOption,
      json: { type: 'boolean', default: false },
      scopes: { type: 'string' },
      resource: { type: 'string', multiple: true },
      dpop: { type: 'string' },
      'rate-limit': { type: 'string' },
    },
    async run(values, positionals) {
      const url = oneUrl(positionals, ALLOW_USAGE);
      const scopes =
        values.scopes === undefined
          ? undefined
          : String(values.scopes)
              .split(/[\s,]+/)
              .filter(Boolean);
      const entry = await client(values).request<AllowEntryView>('POST', '/client-metadata/allowed', {
        url,
        ...(scopes === undefined ? {} : { scopes }),
        ...(values.resource === undefined ? {} : { resources: values.resource }),
        ...(values.dpop === undefined ? {} : { dpop: values.dpop }),
        ...(values['rate-limit'] === undefined ? {} : { rate_limit: values['rate-limit'] }),
      });
      if (values.json === true) print(JSON.stringify(entry, null, 2));
      else print(`Allowed client metadata documents under ${entry.url} (${describe(entry)})`);
      return 0;
    },
  },
  'client-metadata list': {
    summary: 'List the entries of the client metadata list: from the config file and added here.',
    usage: 'tokengate client-metadata list [--json]',
    options: { ...configOption, json: { type: 'boolean', default: false } },
    async run(values) {
      const answer = await client(values).request<{ allowed: AllowEntryView[] }>('GET', '/client-metadata/allowed');
      if (values.json === true) print(JSON.stringify(answer, null, 2));
      else if (answer.allowed.length === 0) print('No client metadata documents are allowed.');
      else for (const entry of answer.allowed) print(`${entry.url}  [${entry.source}]  ${describe(entry)}`);
      return 0;
    },
  },
  'client-metadata disallow': {
    summary: 'Remove an entry added with allow; its clients sign in no more (revoke their tokens with tokens revoke --client).',
    usage: DISALLOW_USAGE,
    options: configOption,
    async run(values, positionals) {
      const url = oneUrl(positionals, DISALLOW_USAGE);
      const { url: removed } = await client(values).request<{ url: string }>('DELETE', `/client-metadata/allowed?url=${encodeURIComponent(url)}`);
      print(`Removed ${removed} from the client metadata list.`);
      return 0;
    },
  },
};
