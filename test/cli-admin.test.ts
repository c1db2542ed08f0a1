import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyPassword } from '../src/issuer/passwords.js';
import { tokenDigest } from '../src/token/token-value.js';
import { runCli, type CliResult } from './support/cli.js';
import { adminFetch, issueAuthorizationCode, postForm, startTokengate, type RunningTokengate } from './support/instance.js';
import { codeBlocks, readDocument, sectionOf, shellCommands } from './support/markdown.js';
import { freePort } from './support/ports.js';

/**
 * The operator CLI as operators run it: a separate `tokengate` process (through tsx, so the test
 * needs no build) that reads a config file and calls the admin API of a running instance.
 */

const ADMIN_TOKEN = 'cli-admin-token-0123456789abcdef';
const USER_API = 'https://api.ticketing.example/api/public';

let running: RunningTokengate;
let directory: string;
let configFile: string;

beforeAll(async () => {
  running = await startTokengate('cli', {
    config: { admin: { token: ADMIN_TOKEN }, resources: [{ identifier: USER_API }], rateLimits: { gold: { requestsPerSecond: 50, burst: 100 } } },
  });
  directory = mkdtempSync(join(tmpdir(), 'tokengate-cli-'));
  configFile = writeConfig('tokengate.yaml', Number(new URL(running.opsUrl).port));
});
afterAll(async () => {
  await running.close();
  rmSync(directory, { recursive: true, force: true });
});

/** A config naming the instance's admin listener; the admin token comes from the environment, as documented. */
function writeConfig(name: string, adminPort: number): string {
  const file = join(directory, name);
  writeFileSync(file, `admin:\n  host: 127.0.0.1\n  port: ${adminPort}\n  token: \${TOKENGATE_ADMIN_TOKEN:-}\nlogging:\n  level: silent\n`);
  return file;
}

function tokengate(args: string[], options: { stdin?: string; adminToken?: string } = {}): Promise<CliResult> {
  return runCli(args, { stdin: options.stdin, env: { TOKENGATE_ADMIN_TOKEN: options.adminToken ?? ADMIN_TOKEN, TOKENGATE_CONFIG: '' } });
}

const withConfig = (...args: string[]) => [...args, '--config', configFile];

/** A bound for a hang: a test here spawns up to twenty CLI processes, about a second of CPU each. */
const CLI_STEPS_TIMEOUT = 120_000;

describe('tokengate apps', { timeout: CLI_STEPS_TIMEOUT }, () => {
  it('creates a confidential application, prints its credentials once, and they work at the token endpoint', async () => {
    const run = await tokengate(withConfig('apps', 'create', '--name', 'Box office', '--redirect-uri', 'https://box.example/callback'));
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const clientId = /^client_id: +(\S+)$/m.exec(run.stdout)?.[1];
    const clientSecret = /^client_secret: +(\S+)$/m.exec(run.stdout)?.[1];
    expect(clientId).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(clientSecret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(run.stdout).toContain('shown only this once');
    const response = await postForm(`${running.baseUrl}/oauth/token`, { grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret });
    expect(response.status).toBe(200);

    const list = await tokengate(withConfig('apps', 'list'));
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^CLIENT_ID +TYPE +NAME +SCOPES +RESOURCES +DPOP +RATE_LIMIT +REDIRECT_URIS +CREATED$/m);
    expect(list.stdout).toContain(clientId);
    expect(list.stdout).not.toContain(clientSecret);
  });

  it('creates a public application with several redirect URIs as JSON, lists it and deletes it with its tokens', async () => {
    const created = await tokengate(
      withConfig(
        'apps',
        'create',
        '--name',
        'Scanner',
        '--redirect-uri',
        'https://scan.example/cb',
        '--redirect-uri',
        'http://127.0.0.1:7000/cb',
        '--scopes',
        'public',
        '--public',
        '--json',
      ),
    );
    expect(created.code).toBe(0);
    const application = JSON.parse(created.stdout) as {
      client_id: string;
      client_secret?: string;
      confidential: boolean;
      redirect_uris: string[];
      scopes: string[];
    };
    expect(application).toMatchObject({ confidential: false, redirect_uris: ['https://scan.example/cb', 'http://127.0.0.1:7000/cb'], scopes: ['public'] });
    expect(application.client_secret).toBeUndefined();

    // --json prints the admin API's answer as it is.
    const [list, answer] = await Promise.all([
      tokengate(withConfig('apps', 'list', '--json')),
      fetch(`${running.opsUrl}/admin/applications`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }).then((response) => response.json()),
    ]);
    expect(JSON.parse(list.stdout)).toEqual(answer);
    expect((answer as { applications: Array<{ client_id: string }> }).applications.map((each) => each.client_id)).toContain(application.client_id);

    const updated = await tokengate(withConfig('apps', 'update', application.client_id, '--name', 'Scanner v2', '--json'));
    expect(updated.code).toBe(0);
    expect(JSON.parse(updated.stdout)).toMatchObject({ client_id: application.client_id, name: 'Scanner v2', scopes: ['public'] });
    expect(await running.store.applications.get(application.client_id)).toMatchObject({ name: 'Scanner v2', redirectUris: application.redirect_uris });
    expect(await tokengate(withConfig('apps', 'update', application.client_id))).toMatchObject({ code: 2 });
    const dpop = await tokengate(withConfig('apps', 'update', application.client_id, '--dpop', 'required', '--json'));
    expect(JSON.parse(dpop.stdout)).toMatchObject({ client_id: application.client_id, dpop: 'required' });
    expect(await running.store.applications.get(application.client_id)).toMatchObject({ dpop: 'required' });
    expect(await tokengate(withConfig('apps', 'update', application.client_id, '--dpop', 'allowed'))).toMatchObject({ code: 0 });

    // Limited to a resource, shown in the list; then to every resource again.
    const limited = await tokengate(withConfig('apps', 'update', application.client_id, '--resource', USER_API, '--json'));
    expect(JSON.parse(limited.stdout)).toMatchObject({ resources: [USER_API] });
    expect((await tokengate(withConfig('apps', 'list'))).stdout).toMatch(new RegExp(`${application.client_id} .* ${USER_API} `));
    const unknown = await tokengate(withConfig('apps', 'update', application.client_id, '--resource', 'https://elsewhere.example/api'));
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('resources: unknown resource "https://elsewhere.example/api" (configured resources: ' + USER_API + ')');
    expect(await tokengate(withConfig('apps', 'update', application.client_id, '--resource', USER_API, '--all-resources'))).toMatchObject({ code: 2 });
    const lifted = await tokengate(withConfig('apps', 'update', application.client_id, '--all-resources', '--json'));
    expect(JSON.parse(lifted.stdout)).toMatchObject({ resources: [] });

    // A tier: a policy of the config, and `default` to give the routes' policies back.
    const tiered = await tokengate(withConfig('apps', 'update', application.client_id, '--rate-limit', 'gold'));
    expect(tiered.stdout).toContain('rate_limit');
    expect(await running.store.applications.get(application.client_id)).toMatchObject({ rateLimit: 'gold' });
    expect((await tokengate(withConfig('apps', 'list'))).stdout).toMatch(new RegExp(`^${application.client_id} .* gold +`, 'm'));
    const unknownTier = await tokengate(withConfig('apps', 'update', application.client_id, '--rate-limit', 'platinum'));
    expect(unknownTier.code).not.toBe(0);
    expect(unknownTier.stderr).toContain('rate_limit must name a policy');
    await tokengate(withConfig('apps', 'update', application.client_id, '--rate-limit', 'default'));
    expect(await running.store.applications.get(application.client_id)).toMatchObject({ rateLimit: null });

    // Token exchange, allowed and taken back; anything but on or off is a usage error.
    const exchanging = await tokengate(withConfig('apps', 'update', application.client_id, '--token-exchange', 'on', '--json'));
    expect(JSON.parse(exchanging.stdout)).toMatchObject({ token_exchange: true });
    expect(await running.store.applications.get(application.client_id)).toMatchObject({ tokenExchange: true });
    expect(await tokengate(withConfig('apps', 'update', application.client_id, '--token-exchange', 'yes'))).toMatchObject({ code: 2 });
    await tokengate(withConfig('apps', 'update', application.client_id, '--token-exchange', 'off'));
    expect(await running.store.applications.get(application.client_id)).toMatchObject({ tokenExchange: false });

    // Sign-out: where the user may be sent after it, where the application is told of it; `none` takes them away.
    const logout = await tokengate(
      withConfig(
        'apps',
        'update',
        application.client_id,
        '--post-logout-redirect-uri',
        'https://scanner.example/signed-out',
        '--post-logout-redirect-uri',
        'http://localhost:5173/bye',
        '--backchannel-logout-uri',
        'https://scanner.example/backchannel',
        '--backchannel-logout-session-required',
        'on',
        '--json',
      ),
    );
    expect(JSON.parse(logout.stdout)).toMatchObject({
      post_logout_redirect_uris: ['https://scanner.example/signed-out', 'http://localhost:5173/bye'],
      backchannel_logout_uri: 'https://scanner.example/backchannel',
      backchannel_logout_session_required: true,
    });
    expect(await tokengate(withConfig('apps', 'update', application.client_id, '--backchannel-logout-session-required', 'yes'))).toMatchObject({ code: 2 });
    const plainHttp = await tokengate(withConfig('apps', 'update', application.client_id, '--backchannel-logout-uri', 'http://scanner.example/backchannel'));
    expect(plainHttp.stderr).toContain('backchannel_logout_uri: "http://scanner.example/backchannel" must use https');
    await tokengate(withConfig('apps', 'update', application.client_id, '--post-logout-redirect-uri', 'none', '--backchannel-logout-uri', 'none'));
    const withoutLogout = await running.store.applications.get(application.client_id);
    expect(withoutLogout).toMatchObject({ postLogoutRedirectUris: [], backchannelLogoutSessionRequired: true });
    expect(withoutLogout).not.toHaveProperty('backchannelLogoutUri');
    const registered = await tokengate(
      withConfig(
        'apps',
        'create',
        '--name',
        'Merch',
        '--redirect-uri',
        'https://merch.example/cb',
        '--post-logout-redirect-uri',
        'https://merch.example/bye',
        '--backchannel-logout-uri',
        'https://merch.example/backchannel',
        '--backchannel-logout-session-required',
        '--json',
      ),
    );
    expect(JSON.parse(registered.stdout)).toMatchObject({
      post_logout_redirect_uris: ['https://merch.example/bye'],
      backchannel_logout_uri: 'https://merch.example/backchannel',
      backchannel_logout_session_required: true,
    });

    const token = running.tokengate.context.minter.mint();
    await running.store.tokens.saveAccessToken(tokenDigest(token), {
      kind: 'user',
      clientId: application.client_id,
      userId: 'u',
      scopes: ['public'],
      familyId: 'f',
      issuedAt: Date.now(),
      expiresAt: Date.now() + 60_000,
    });
    const deleted = await tokengate(withConfig('apps', 'delete', application.client_id));
    expect(deleted).toMatchObject({ code: 0, stdout: `Deleted application ${application.client_id} and revoked its tokens.\n` });
    expect(await running.store.tokens.getAccessToken(tokenDigest(token))).toBeNull();
    expect(await running.store.applications.get(application.client_id)).toBeNull();
  });

  it("runs docs/account.md's sign-out registration commands as written, each doing what the text says", async () => {
    const commands = codeBlocks(sectionOf(readDocument('docs/account.md'), '## Sign-out from an application'), 'sh').flatMap(shellCommands);
    expect(commands).toHaveLength(3);
    // Words as the shell splits these lines: on spaces, double quotes kept together.
    const words = (command: string) => [...command.matchAll(/"([^"]*)"|(\S+)/g)].map((match) => match[1] ?? match[2]!).slice(1);
    const created = await tokengate(withConfig(...words(commands[0]!), '--json'));
    const { client_id: clientId } = JSON.parse(created.stdout) as { client_id: string };
    const recorded = () => running.store.applications.get(clientId);
    expect(await recorded()).toMatchObject({
      postLogoutRedirectUris: ['https://box-office.example/signed-out'],
      backchannelLogoutUri: 'https://box-office.example/backchannel-logout',
    });
    expect(await tokengate(withConfig(...words(commands[1]!.replace('CLIENT_ID', clientId))))).toMatchObject({ code: 0 });
    expect(await recorded()).toMatchObject({ backchannelLogoutSessionRequired: true });
    expect(await tokengate(withConfig(...words(commands[2]!.replace('CLIENT_ID', clientId))))).toMatchObject({ code: 0 });
    expect(await recorded()).toMatchObject({ postLogoutRedirectUris: [] });
    expect(await recorded()).not.toHaveProperty('backchannelLogoutUri');
  });

  it("prints the admin API's refusal on one line and exits 1", async () => {
    const [badUri, unknown] = await Promise.all([
      tokengate(withConfig('apps', 'create', '--name', 'Bad', '--redirect-uri', 'http://evil.example/cb')),
      tokengate(withConfig('apps', 'delete', 'no-such-client')),
    ]);
    expect(badUri).toMatchObject({ code: 1, stdout: '' });
    expect(badUri.stderr).toBe(
      'tokengate: the admin API refused: redirect_uris: "http://evil.example/cb" must use https (http only on localhost, 127.0.0.1 or [::1])\n',
    );
    expect(unknown).toMatchObject({ code: 1, stderr: 'tokengate: the admin API refused: No application has this client_id.\n' });
  });
});

describe('tokengate users and tokens', { timeout: CLI_STEPS_TIMEOUT }, () => {
  it('creates a user from a password on stdin, refuses a duplicate, lists, revokes and deletes', async () => {
    const created = await tokengate(withConfig('users', 'create', '--email', 'Ana@Example.com', '--password-stdin', '--json'), {
      stdin: 'correct horse battery\n',
    });
    expect(created.stderr).toBe('');
    const user = JSON.parse(created.stdout) as { id: string; email: string };
    expect(user.email).toBe('ana@example.com');
    // The trailing newline of `echo` is not part of the password.
    expect(await verifyPassword('correct horse battery', (await running.store.users.get(user.id))!.passwordHash)).toBe(true);

    const [duplicate, list, listJson, answer] = await Promise.all([
      tokengate(withConfig('users', 'create', '--email', 'ana@example.com', '--password-stdin'), { stdin: 'another password' }),
      tokengate(withConfig('users', 'list')),
      tokengate(withConfig('users', 'list', '--json')),
      fetch(`${running.opsUrl}/admin/users`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }).then((response) => response.json()),
    ]);
    expect(duplicate).toMatchObject({ code: 1, stderr: 'tokengate: the admin API refused: A user with this e-mail address already exists.\n' });
    expect(list.stdout).toMatch(new RegExp(`^${user.id} +ana@example.com +\\S+$`, 'm'));
    expect(JSON.parse(listJson.stdout)).toEqual(answer);
    expect(answer).toMatchObject({ users: expect.arrayContaining([{ id: user.id, email: 'ana@example.com', created_at: expect.any(String) }]) });

    const application = { clientId: `client-${user.id}`, clientSecret: undefined, redirectUri: 'https://box.example/callback' };
    await running.store.applications.put({
      clientId: application.clientId,
      name: 'n',
      secretDigest: null,
      redirectUris: [application.redirectUri],
      scopes: ['public'],
      confidential: false,
      createdAt: Date.now(),
    });
    const grant = async () => {
      const verifier = 'v'.repeat(43);
      const { createHash } = await import('node:crypto');
      const { code } = await issueAuthorizationCode(running, application, user.id, {
        codeChallenge: createHash('sha256').update(verifier).digest('base64url'),
        codeChallengeMethod: 'S256',
      });
      const response = await postForm(`${running.baseUrl}/oauth/token`, {
        grant_type: 'authorization_code',
        code,
        code_verifier: verifier,
        redirect_uri: application.redirectUri,
        client_id: application.clientId,
      });
      return ((await response.json()) as { access_token: string }).access_token;
    };
    const first = await grant();
    const byUser = await tokengate(withConfig('tokens', 'revoke', '--user', user.id));
    expect(byUser).toMatchObject({ code: 0, stdout: `Revoked 2 tokens of user ${user.id}.\n` });
    expect(await running.store.tokens.getAccessToken(tokenDigest(first))).toBeNull();

    const second = await grant();
    const byClient = await tokengate(withConfig('tokens', 'revoke', '--client', application.clientId));
    expect(byClient).toMatchObject({ code: 0, stdout: `Revoked 2 tokens of application ${application.clientId}.\n` });
    expect(await running.store.tokens.getAccessToken(tokenDigest(second))).toBeNull();

    const deleted = await tokengate(withConfig('users', 'delete', user.id));
    expect(deleted).toMatchObject({ code: 0, stdout: `Deleted user ${user.id} and revoked their tokens.\n` });
    expect(await running.store.users.get(user.id)).toBeNull();
    // Nine CLI processes, each loading TypeScript through tsx: slow on a busy machine.
  }, 60_000);

  it('revokes the tokens of an identity provider subject, and lists the trusted providers', async () => {
    const idp = 'https://login.company.example';
    const tokens = [await running.issue({ identity: { issuer: idp, subject: 'ada' } }), await running.issue({ identity: { issuer: idp, subject: 'ada' } })];
    const other = await running.issue({ identity: { issuer: idp, subject: 'grace' } });
    const [revoked, listed] = await Promise.all([
      tokengate(withConfig('tokens', 'revoke', '--idp', idp, '--subject', 'ada')),
      tokengate(withConfig('identity-providers', 'list')),
    ]);
    expect(revoked).toMatchObject({ code: 0, stdout: `Revoked 2 tokens of subject ada of ${idp}.\n` });
    for (const token of tokens) expect(await running.store.tokens.getAccessToken(tokenDigest(token))).toBeNull();
    expect(await running.store.tokens.getAccessToken(tokenDigest(other))).not.toBeNull();
    expect(listed).toMatchObject({ code: 0, stdout: 'No identity provider is trusted.\n' });
  }, 60_000);

  it('never takes a password from the command line, and checks its arguments', async () => {
    const [noStdin, asArgument, both, neither] = await Promise.all([
      tokengate(withConfig('users', 'create', '--email', 'bo@example.com')),
      tokengate(withConfig('users', 'create', '--email', 'bo@example.com', '--password', 'hunter2hunter2')),
      tokengate(withConfig('tokens', 'revoke', '--user', 'a', '--client', 'b')),
      tokengate(withConfig('tokens', 'revoke')),
    ]);
    expect(noStdin.code).toBe(2);
    expect(noStdin.stderr).toContain('--password-stdin is required');
    expect(asArgument.code).toBe(2);
    expect(asArgument.stderr).toContain("Unknown option '--password'");
    expect(asArgument.stderr).not.toContain('hunter2');
    expect(both).toMatchObject({ code: 2, stderr: expect.stringContaining('exactly one of --user, --client and --idp with --subject') });
    expect(neither.code).toBe(2);
    expect(await running.store.users.findByEmail('bo@example.com')).toBeNull();
  });
});

describe('tokengate with ids that begin with "-"', { timeout: CLI_STEPS_TIMEOUT }, () => {
  // Client ids were 32 random bytes in base64url: one in 64 began with "-", and those are still in stores.
  const clientId = '-KawaVT8vXr2m5dJ0qYh1sGQ7uFcNzOeWbLt3pA9kIy';
  const userId = '-user-made-elsewhere';
  const idp = 'https://login.company.example';

  beforeAll(async () => {
    await running.store.applications.put({
      clientId,
      name: 'Old app',
      secretDigest: null,
      redirectUris: ['https://old.example/cb'],
      scopes: ['public'],
      confidential: false,
      createdAt: Date.now(),
    });
  });

  it('are taken as they are by every command and option that takes an id, as values of options and as operands', async () => {
    const byClient = await running.issue({ clientId });
    const bySubject = await running.issue({ identity: { issuer: idp, subject: '-ada' } });
    const [updated, revokedClient, revokedUser, revokedSubject, updatedAgain] = await Promise.all([
      tokengate(withConfig('apps', 'update', clientId, '--name', 'Renamed')),
      tokengate(withConfig('tokens', 'revoke', '--client', clientId)),
      tokengate(withConfig('tokens', 'revoke', '--user', userId)),
      tokengate(withConfig('tokens', 'revoke', '--idp', idp, '--subject', '-ada')),
      // After "--", as everywhere.
      tokengate(['apps', 'update', '--config', configFile, '--name', 'Renamed again', '--', clientId]),
    ]);
    expect(updated, updated.stderr).toMatchObject({ code: 0 });
    expect(revokedClient).toMatchObject({ code: 0, stdout: `Revoked 1 token of application ${clientId}.\n` });
    expect(revokedUser).toMatchObject({ code: 0, stdout: `Revoked 0 tokens of user ${userId}.\n` });
    expect(revokedSubject).toMatchObject({ code: 0, stdout: `Revoked 1 token of subject -ada of ${idp}.\n` });
    expect(updatedAgain, updatedAgain.stderr).toMatchObject({ code: 0 });
    for (const token of [byClient, bySubject]) expect(await running.store.tokens.getAccessToken(tokenDigest(token))).toBeNull();
    expect((await running.store.applications.get(clientId))?.name).toMatch(/^Renamed/);

    const [deletedUser, deleted] = await Promise.all([tokengate(withConfig('users', 'delete', userId)), tokengate(withConfig('apps', 'delete', clientId))]);
    // No such user: the admin API's answer, not a usage error.
    expect(deletedUser.code, deletedUser.stderr).toBe(1);
    expect(deletedUser.stderr).not.toMatch(/Unknown option|ambiguous/);
    expect(deleted, deleted.stderr).toMatchObject({ code: 0 });
    expect(await running.store.applications.get(clientId)).toBeNull();
  });

  it('still refuse a mistyped option rather than take it for an id, and -h still asks for help', async () => {
    const [mistyped, help] = await Promise.all([tokengate(withConfig('apps', 'list', '--jsn')), tokengate(['apps', 'delete', '-h'])]);
    expect(mistyped).toMatchObject({ code: 2, stderr: expect.stringContaining("Unknown option '--jsn'") });
    expect(help).toMatchObject({ code: 0, stdout: expect.stringContaining('tokengate apps delete CLIENT_ID') });
  });

  it('are never issued again: no new client id begins with "-"', async () => {
    // One in 64 did: among 300, at least one on the old code with a probability of 99 %.
    const created: string[] = [];
    // Twenty at a time: the ops listener bounds the connections of one address.
    for (let batch = 0; batch < 15; batch += 1)
      created.push(
        ...(await Promise.all(
          Array.from({ length: 20 }, (_, index) =>
            adminFetch(running, '/applications', {
              method: 'POST',
              body: JSON.stringify({ name: `n${batch}-${index}`, redirect_uris: ['https://n.example/cb'] }),
            }).then(async (answer) => ((await answer.json()) as { client_id: string }).client_id),
          ),
        )),
      );
    expect(created.filter((id) => /^[A-Za-z0-9_-]{43}$/.test(id))).toHaveLength(300);
    expect(created.filter((id) => id.startsWith('-'))).toEqual([]);
  });
});

describe('tokengate CLI: reaching the instance', { timeout: CLI_STEPS_TIMEOUT }, () => {
  it('says so in one line when no instance listens on the configured admin port', async () => {
    const deadConfig = writeConfig('dead.yaml', await freePort());
    const run = await tokengate(['apps', 'list', '--config', deadConfig]);
    expect(run.code).toBe(1);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
    expect(run.stderr).toMatch(
      /cannot reach the admin API at http:\/\/127\.0\.0\.1:\d+\/admin \(connection refused\): is tokengate serve running with this config\?/,
    );
  });

  it('reports a wrong admin token without printing it', async () => {
    const run = await tokengate(withConfig('users', 'list'), { adminToken: 'wrong-admin-token-0123456789' });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('The admin API requires a valid admin bearer token.');
    expect(run.stderr).not.toContain('wrong-admin-token');
  });
});
