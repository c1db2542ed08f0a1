import type { ApplicationView } from '../admin/applications.js';
import type { SigningKeyView } from '../admin/keys.js';
import type { GrantView, UserView } from '../admin/users.js';
import { adminClientFor } from './admin-client.js';
import { configOption, UsageError, type Command, type OptionValues } from './command.js';

/**
 * The operator's commands. Each calls the admin API of the running instance that `--config`
 * describes (admin.host, admin.port, admin.token), so a command acts on the same store as the
 * instance, whichever store driver it uses.
 */

const jsonOption = { json: { type: 'boolean', default: false } } as const;

interface CreatedApplication extends ApplicationView {
  client_secret?: string;
}

const client = (values: OptionValues) => adminClientFor(String(values.config));

/** `keys list` and `openid-keys list`: a signing key set in the store, as the admin API lists it (never the private halves). */
function listKeys(kind: string, usage: string, path: string): Command {
  return {
    summary: `List the ${kind} signing keys in the store (never their private halves).`,
    usage: `${usage} [--json]`,
    options: { ...configOption, ...jsonOption },
    async run(values) {
      const answer = await client(values).request<{ keys: SigningKeyView[] }>('GET', path);
      if (values.json === true) printJson(answer);
      else
        print(
          table(
            ['KID', 'ALG', 'CREATED', 'SIGNS_FROM'],
            answer.keys.map((key) => [key.kid, key.alg, key.created_at, key.activates_at]),
          ),
        );
      return 0;
    },
  };
}
function print(text: string): void {
  process.stdout.write(`${text}\n`);
}

function printJson(value: unknown): void {
  print(JSON.stringify(value, null, 2));
}

/** Left-aligned columns, for the list commands. */
function table(header: string[], rows: string[][]): string {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
  return [header, ...rows]
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function onePositional(positionals: string[], name: string, usage: string): string {
  if (positionals.length !== 1) throw new UsageError(`expected one ${name}\nusage: ${usage}`);
  return positionals[0]!;
}

/** The password comes from stdin only: argv is visible to every user of the machine (ps) and kept in shell history. */
async function readPasswordFromStdin(): Promise<string> {
  if (process.stdin.isTTY) {
    throw new UsageError('--password-stdin reads the password from a pipe, e.g. printf \'%s\' "$PASSWORD" | tokengate users create --email E --password-stdin');
  }
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
}

/** One entry of GET /admin/identity-providers. */
interface IdentityProviderView {
  issuer: string;
  jwksUrl: string;
  algorithms: string[];
  userClaim: string;
  jitUsers: boolean;
  maxAssertionLifetimeSeconds: number;
  sharedSignals?: SharedSignalsView;
}

/** A provider's shared signals receiver and its stream's state. */
interface SharedSignalsView {
  name: string;
  delivery: 'push' | 'poll';
  stream: 'configured' | 'operator';
  pushEndpoint: string | null;
  streamId: string | null;
  status: string | null;
  statusReason: string | null;
  verifiedAt: string | null;
  lastEvent: { type: string; outcome: string; at: string } | null;
  lastPoll: { at: string; result: string } | null;
  problem: string | null;
}

/** The second line of a provider with a receiver: how events arrive, the stream's state, the last event. */
function describeSignals(signals: SharedSignalsView): string {
  const parts = [
    `  signals ${signals.name}: ${signals.delivery}${signals.pushEndpoint === null ? '' : ` to ${signals.pushEndpoint}`}`,
    `stream ${signals.streamId ?? '(not set up)'} (${signals.stream === 'configured' ? 'configured by tokengate' : 'made by the operator'})`,
    `status ${signals.status ?? 'unknown'}${signals.statusReason === null ? '' : ` (${signals.statusReason})`}`,
    signals.verifiedAt === null ? 'not verified' : `verified ${signals.verifiedAt}`,
    signals.lastEvent === null ? 'no event yet' : `last event ${signals.lastEvent.type} ${signals.lastEvent.outcome} at ${signals.lastEvent.at}`,
  ];
  if (signals.lastPoll !== null) parts.push(`last poll ${signals.lastPoll.result} at ${signals.lastPoll.at}`);
  if (signals.problem !== null) parts.push(`problem: ${signals.problem}`);
  return parts.join(', ');
}

const APPS_CREATE_USAGE =
  'tokengate apps create --name N --redirect-uri URL [--redirect-uri URL2] [--scopes "public"] [--resource URI [--resource URI2]] [--public] [--post-logout-redirect-uri URL ...] [--backchannel-logout-uri URL [--backchannel-logout-session-required]] [--json]';
const APPS_UPDATE_USAGE =
  'tokengate apps update CLIENT_ID [--name N] [--redirect-uri URL [--redirect-uri URL2]] [--scopes "public"] [--resource URI [--resource URI2] | --all-resources] [--dpop required|allowed] [--rate-limit POLICY|default] [--token-exchange on|off] [--id-token-alg RS256|ES256] [--post-logout-redirect-uri URL ... | none] [--backchannel-logout-uri URL|none] [--backchannel-logout-session-required on|off] [--json]';
const USERS_CREATE_USAGE = 'tokengate users create --email E --password-stdin [--json]';
const USERS_REVOKE_GRANT_USAGE = 'tokengate users revoke-grant USER_ID CLIENT_ID';
const TOKENS_REVOKE_USAGE = 'tokengate tokens revoke --user ID | --client ID | --idp ISSUER --subject SUB';

/** `--scopes "a b"` or `--scopes a,b`. */
function scopeList(value: unknown): string[] | undefined {
  return value === undefined
    ? undefined
    : String(value)
        .split(/[\s,]+/)
        .filter(Boolean);
}

/** `apps update`'s logout settings as the admin API takes them: `none` empties the list, or removes the back-channel URI. */
function logoutPatch(values: Record<string, unknown>, sessionRequired: string | undefined): Record<string, unknown> {
  const postLogout = values['post-logout-redirect-uri'] as string[] | undefined;
  const backchannel = values['backchannel-logout-uri'] as string | undefined;
  return {
    ...(postLogout === undefined ? {} : { post_logout_redirect_uris: postLogout.length === 1 && postLogout[0] === 'none' ? [] : postLogout }),
    ...(backchannel === undefined ? {} : { backchannel_logout_uri: backchannel === 'none' ? null : backchannel }),
    ...(sessionRequired === undefined ? {} : { backchannel_logout_session_required: sessionRequired === 'on' }),
  };
}

export const ADMIN_COMMANDS: Record<string, Command> = {
  'apps create': {
    summary: 'Register an application; prints its client_id and, this once, its client_secret.',
    usage: APPS_CREATE_USAGE,
    options: {
      ...configOption,
      ...jsonOption,
      name: { type: 'string' },
      'redirect-uri': { type: 'string', multiple: true },
      scopes: { type: 'string' },
      resource: { type: 'string', multiple: true },
      public: { type: 'boolean', default: false },
      'post-logout-redirect-uri': { type: 'string', multiple: true },
      'backchannel-logout-uri': { type: 'string' },
      'backchannel-logout-session-required': { type: 'boolean', default: false },
    },
    async run(values) {
      if (values.name === undefined) throw new UsageError(`--name is required\nusage: ${APPS_CREATE_USAGE}`);
      const redirectUris = (values['redirect-uri'] as string[] | undefined) ?? [];
      if (redirectUris.length === 0) throw new UsageError(`--redirect-uri is required\nusage: ${APPS_CREATE_USAGE}`);
      const scopes = scopeList(values.scopes);
      const created = await client(values).request<CreatedApplication>('POST', '/applications', {
        name: values.name,
        redirect_uris: redirectUris,
        ...(scopes === undefined ? {} : { scopes }),
        ...(values.resource === undefined ? {} : { resources: values.resource }),
        confidential: values.public !== true,
        ...(values['post-logout-redirect-uri'] === undefined ? {} : { post_logout_redirect_uris: values['post-logout-redirect-uri'] }),
        ...(values['backchannel-logout-uri'] === undefined ? {} : { backchannel_logout_uri: values['backchannel-logout-uri'] }),
        ...(values['backchannel-logout-session-required'] === true ? { backchannel_logout_session_required: true } : {}),
      });
      if (values.json === true) {
        printJson(created);
      } else {
        print(`Created application "${created.name}" (${created.confidential ? 'confidential' : 'public'}, scopes: ${created.scopes.join(' ')})`);
        print(`client_id:     ${created.client_id}`);
        if (created.client_secret !== undefined) {
          print(`client_secret: ${created.client_secret}`);
          print('The client secret is shown only this once: store it now.');
        } else {
          print('A public client has no secret: it authenticates with its client_id and must use PKCE.');
        }
      }
      return 0;
    },
  },
  'apps list': {
    summary: 'List the registered applications (never their secrets).',
    usage: 'tokengate apps list [--json]',
    options: { ...configOption, ...jsonOption },
    async run(values) {
      // --json prints the admin API's answer as it is, so scripts read one shape from both.
      const answer = await client(values).request<{ applications: ApplicationView[] }>('GET', '/applications');
      const { applications } = answer;
      if (values.json === true) printJson(answer);
      else if (applications.length === 0) print('No applications.');
      else {
        const rows = applications.map((app) => [
          app.client_id,
          app.confidential ? 'confidential' : 'public',
          app.name,
          app.scopes.join(' '),
          app.resources.length === 0 ? '(all)' : app.resources.join(' '),
          app.dpop,
          app.rate_limit ?? '-',
          app.redirect_uris.join(' '),
          app.created_at,
        ]);
        print(table(['CLIENT_ID', 'TYPE', 'NAME', 'SCOPES', 'RESOURCES', 'DPOP', 'RATE_LIMIT', 'REDIRECT_URIS', 'CREATED'], rows));
      }
      return 0;
    },
  },
  'apps update': {
    summary: "Change a registered application's settings; the fields not given stay as they are.",
    usage: APPS_UPDATE_USAGE,
    options: {
      ...configOption,
      ...jsonOption,
      name: { type: 'string' },
      'redirect-uri': { type: 'string', multiple: true },
      scopes: { type: 'string' },
      dpop: { type: 'string' },
      resource: { type: 'string', multiple: true },
      'all-resources': { type: 'boolean', default: false },
      'rate-limit': { type: 'string' },
      'token-exchange': { type: 'string' },
      'id-token-alg': { type: 'string' },
      'post-logout-redirect-uri': { type: 'string', multiple: true },
      'backchannel-logout-uri': { type: 'string' },
      'backchannel-logout-session-required': { type: 'string' },
    },
    async run(values, positionals) {
      const clientId = onePositional(positionals, 'CLIENT_ID', APPS_UPDATE_USAGE);
      const tokenExchange = values['token-exchange'];
      if (tokenExchange !== undefined && tokenExchange !== 'on' && tokenExchange !== 'off')
        throw new UsageError(`--token-exchange takes on or off\nusage: ${APPS_UPDATE_USAGE}`);
      if (values.resource !== undefined && values['all-resources'] === true)
        throw new UsageError(`give either --resource or --all-resources\nusage: ${APPS_UPDATE_USAGE}`);
      const rateLimit = values['rate-limit'];
      const sessionRequired = values['backchannel-logout-session-required'];
      if (sessionRequired !== undefined && sessionRequired !== 'on' && sessionRequired !== 'off')
        throw new UsageError(`--backchannel-logout-session-required takes on or off\nusage: ${APPS_UPDATE_USAGE}`);
      const patch = {
        ...(values.name === undefined ? {} : { name: values.name }),
        ...(values['redirect-uri'] === undefined ? {} : { redirect_uris: values['redirect-uri'] }),
        ...(values.scopes === undefined ? {} : { scopes: scopeList(values.scopes) }),
        ...(values.dpop === undefined ? {} : { dpop: values.dpop }),
        ...(values.resource === undefined ? {} : { resources: values.resource }),
        ...(values['all-resources'] === true ? { resources: [] } : {}),
        // `default`: back to the routes' own policies.
        ...(rateLimit === undefined ? {} : { rate_limit: rateLimit === 'default' ? null : rateLimit }),
        ...(tokenExchange === undefined ? {} : { token_exchange: tokenExchange === 'on' }),
        ...(values['id-token-alg'] === undefined ? {} : { id_token_signed_response_alg: values['id-token-alg'] }),
        ...logoutPatch(values, sessionRequired),
      };
      if (Object.keys(patch).length === 0) throw new UsageError(`give at least one setting to change\nusage: ${APPS_UPDATE_USAGE}`);
      const updated = await client(values).request<ApplicationView>('PATCH', `/applications/${encodeURIComponent(clientId)}`, patch);
      if (values.json === true) printJson(updated);
      else print(`Updated application "${updated.name}" (${updated.client_id}): ${Object.keys(patch).join(', ')}`);
      return 0;
    },
  },
  'apps delete': {
    summary: 'Delete an application and revoke every token issued to it.',
    usage: 'tokengate apps delete CLIENT_ID',
    options: configOption,
    async run(values, positionals) {
      const clientId = onePositional(positionals, 'CLIENT_ID', 'tokengate apps delete CLIENT_ID');
      await client(values).request('DELETE', `/applications/${encodeURIComponent(clientId)}`);
      print(`Deleted application ${clientId} and revoked its tokens.`);
      return 0;
    },
  },
  'users create': {
    summary: 'Create a user who can log in on the authorization page; the password is read from stdin.',
    usage: USERS_CREATE_USAGE,
    options: { ...configOption, ...jsonOption, email: { type: 'string' }, 'password-stdin': { type: 'boolean', default: false } },
    async run(values) {
      if (values.email === undefined) throw new UsageError(`--email is required\nusage: ${USERS_CREATE_USAGE}`);
      if (values['password-stdin'] !== true) {
        throw new UsageError(`--password-stdin is required: the password is read from stdin, never from the command line\nusage: ${USERS_CREATE_USAGE}`);
      }
      const password = await readPasswordFromStdin();
      const user = await client(values).request<UserView>('POST', '/users', { email: values.email, password });
      if (values.json === true) printJson(user);
      else print(`Created user ${user.email}\nid: ${user.id}`);
      return 0;
    },
  },
  'users list': {
    summary: 'List the users kept in the store (never their password hashes).',
    usage: 'tokengate users list [--json]',
    options: { ...configOption, ...jsonOption },
    async run(values) {
      const answer = await client(values).request<{ users: UserView[] }>('GET', '/users');
      const { users } = answer;
      if (values.json === true) printJson(answer);
      else if (users.length === 0) print('No users.');
      else
        print(
          table(
            ['ID', 'EMAIL', 'CREATED'],
            users.map((user) => [user.id, user.email, user.created_at]),
          ),
        );
      return 0;
    },
  },
  'users delete': {
    summary: 'Delete a user and revoke every token issued for them.',
    usage: 'tokengate users delete ID',
    options: configOption,
    async run(values, positionals) {
      const id = onePositional(positionals, 'ID', 'tokengate users delete ID');
      await client(values).request('DELETE', `/users/${encodeURIComponent(id)}`);
      print(`Deleted user ${id} and revoked their tokens.`);
      return 0;
    },
  },
  'users grants': {
    summary: 'List the applications a user connected (their grants: scopes, resources, when approved and last used).',
    usage: 'tokengate users grants USER_ID [--json]',
    options: { ...configOption, ...jsonOption },
    async run(values, positionals) {
      const id = onePositional(positionals, 'USER_ID', 'tokengate users grants USER_ID [--json]');
      const answer = await client(values).request<{ user_id: string; grants: GrantView[] }>('GET', `/users/${encodeURIComponent(id)}/grants`);
      if (values.json === true) printJson(answer);
      else if (answer.grants.length === 0) print(`User ${id} has connected no application.`);
      else
        print(
          table(
            ['CLIENT_ID', 'SCOPES', 'RESOURCES', 'APPROVED', 'LAST_USED'],
            answer.grants.map((grant) => [
              grant.client_id,
              grant.scopes.join(' '),
              grant.resources.length === 0 ? '-' : grant.resources.join(' '),
              grant.approved_at,
              grant.last_used_at,
            ]),
          ),
        );
      return 0;
    },
  },
  'users revoke-grant': {
    summary: "End a user's grant to an application and revoke every token of that user at it (what the user's Disconnect does).",
    usage: USERS_REVOKE_GRANT_USAGE,
    options: configOption,
    async run(values, positionals) {
      if (positionals.length !== 2) throw new UsageError(`expected USER_ID and CLIENT_ID\nusage: ${USERS_REVOKE_GRANT_USAGE}`);
      const [id, clientId] = positionals as [string, string];
      const { revoked } = await client(values).request<{ revoked: number }>(
        'DELETE',
        `/users/${encodeURIComponent(id)}/grants/${encodeURIComponent(clientId)}`,
      );
      print(`Revoked the grant of user ${id} to ${clientId} and ${revoked} token${revoked === 1 ? '' : 's'}.`);
      return 0;
    },
  },
  'tokens revoke': {
    summary:
      'Revoke every token of one user (all applications), of one application (all users), or issued from the identity assertions of one subject of an identity provider.',
    usage: TOKENS_REVOKE_USAGE,
    options: { ...configOption, user: { type: 'string' }, client: { type: 'string' }, idp: { type: 'string' }, subject: { type: 'string' } },
    async run(values) {
      const { user, client: clientId, idp, subject } = values as { user?: string; client?: string; idp?: string; subject?: string };
      if ([user, clientId, idp].filter((value) => value !== undefined).length !== 1 || (idp === undefined) !== (subject === undefined))
        throw new UsageError(`give exactly one of --user, --client and --idp with --subject\nusage: ${TOKENS_REVOKE_USAGE}`);
      const body = user !== undefined ? { user_id: user } : clientId !== undefined ? { client_id: clientId } : { identity_provider: idp, subject };
      const { revoked } = await client(values).request<{ revoked: number }>('POST', '/tokens/revoke', body);
      const whose = user !== undefined ? `user ${user}` : clientId !== undefined ? `application ${clientId}` : `subject ${subject} of ${idp}`;
      print(`Revoked ${revoked} token${revoked === 1 ? '' : 's'} of ${whose}.`);
      return 0;
    },
  },
  'identity-providers list': {
    summary: 'List the identity providers trusted for identity assertions (the config in effect), with their shared signals streams.',
    usage: 'tokengate identity-providers list [--json]',
    options: { ...configOption, json: { type: 'boolean', default: false } },
    async run(values) {
      const answer = await client(values).request<{ identityProviders: IdentityProviderView[] }>('GET', '/identity-providers');
      if (values.json === true) print(JSON.stringify(answer, null, 2));
      else if (answer.identityProviders.length === 0) print('No identity provider is trusted.');
      else
        for (const provider of answer.identityProviders) {
          print(
            `${provider.issuer}  keys ${provider.jwksUrl}  ${provider.algorithms.join(',')}  users by ${provider.userClaim}${provider.jitUsers ? ' (created when missing)' : ''}  assertions up to ${provider.maxAssertionLifetimeSeconds} s`,
          );
          if (provider.sharedSignals !== undefined) print(describeSignals(provider.sharedSignals));
        }
      return 0;
    },
  },
  'keys rotate': {
    summary: 'Make a new identity signing key: published at once, signing once every resource service can have fetched it.',
    usage: 'tokengate keys rotate [--json]',
    options: { ...configOption, ...jsonOption },
    async run(values) {
      const answer = await client(values).request<{ kid: string; activates_at: string; keys: SigningKeyView[] }>('POST', '/keys/rotate');
      if (values.json === true) printJson(answer);
      else print(`Created signing key ${answer.kid}: published now, signing from ${answer.activates_at}.`);
      return 0;
    },
  },
  'openid-keys rotate': {
    summary: 'Make a new ID token signing key of each algorithm: published at once, signing once every application can have fetched it.',
    usage: 'tokengate openid-keys rotate [--json]',
    options: { ...configOption, ...jsonOption },
    async run(values) {
      const answer = await client(values).request<{ created: SigningKeyView[]; keys: SigningKeyView[] }>('POST', '/openid-keys/rotate');
      if (values.json === true) printJson(answer);
      else for (const key of answer.created) print(`Created ${key.alg} ID token key ${key.kid}: published now, signing from ${key.activates_at}.`);
      return 0;
    },
  },
  'openid-keys list': listKeys('ID token', 'tokengate openid-keys list', '/openid-keys'),
  'keys list': listKeys('identity', 'tokengate keys list', '/keys'),
};
