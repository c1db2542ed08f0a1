import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import { runCli } from './support/cli.js';
import { adminFetch, registerApplication, registerUser, startTokengate, TEST_ADMIN_TOKEN, type RunningTokengate } from './support/instance.js';
import { captureLog, type CapturedLog } from './support/log.js';
import { eventually } from './support/wait.js';

/**
 * The operator's view of users' grants: the admin API lists and revokes them (authenticated, one
 * audit line each), the CLI calls it, and deleting an application or a user removes its grants.
 */

const DOCUMENT_CLIENT = 'https://assistant.example/client.json';

let running: RunningTokengate;
let log: CapturedLog;
let directory: string;
let configFile: string;

beforeAll(async () => {
  log = captureLog('info');
  running = await startTokengate('admin-grants', { logger: log.logger });
  directory = mkdtempSync(join(tmpdir(), 'tokengate-grants-cli-'));
  configFile = join(directory, 'tokengate.yaml');
  writeFileSync(configFile, `admin:\n  host: 127.0.0.1\n  port: ${new URL(running.opsUrl).port}\n  token: ${TEST_ADMIN_TOKEN}\nlogging:\n  level: silent\n`);
});
afterAll(async () => {
  await running?.close();
  rmSync(directory, { recursive: true, force: true });
});

interface GrantsAnswer {
  user_id: string;
  grants: Array<{ client_id: string; scopes: string[]; resources: string[]; approved_at: string; last_used_at: string }>;
}

/** A user with a grant to each application given, and a token of theirs at each. */
async function connected(clientIds: string[]): Promise<{ userId: string; tokens: Map<string, string> }> {
  const userId = await registerUser(running.store);
  const tokens = new Map<string, string>();
  for (const clientId of clientIds) {
    await running.store.grants.approve(userId, clientId, { scopes: ['public'], resources: [] }, Date.UTC(2026, 10, 1));
    tokens.set(clientId, await running.issue({ userId, clientId, familyId: `family-${userId}-${clientId}` }));
  }
  return { userId, tokens };
}

const live = async (token: string) => (await running.store.tokens.getAccessToken(tokenDigest(token))) !== null;
const adminLines = () => log.entries().filter((entry) => entry.msg === 'admin call') as unknown as Array<{ audit: Record<string, unknown> }>;

describe('admin API: grants', () => {
  it('answers only with the admin token, and never a browser', async () => {
    const { userId } = await connected([]);
    for (const [method, path] of [
      ['GET', `/users/${userId}/grants`],
      ['DELETE', `/users/${userId}/grants/some-client`],
    ] as const) {
      expect((await adminFetch(running, path, { method, headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
      expect((await adminFetch(running, path, { method, headers: { authorization: '' } })).status).toBe(401);
      expect((await adminFetch(running, path, { method, headers: { origin: 'https://evil.example' } })).status).toBe(403);
    }
  });

  it("lists a user's grants and revokes one with every token of the user at that application, on one audit line", async () => {
    const { clientId } = await registerApplication(running.store);
    const other = await registerApplication(running.store);
    const { userId, tokens } = await connected([clientId, other.clientId, DOCUMENT_CLIENT]);

    const listed = (await (await adminFetch(running, `/users/${userId}/grants`)).json()) as GrantsAnswer;
    expect(listed.user_id).toBe(userId);
    expect(listed.grants.map((grant) => grant.client_id).sort()).toEqual([clientId, other.clientId, DOCUMENT_CLIENT].sort());
    expect(listed.grants[0]).toEqual({
      client_id: expect.any(String),
      scopes: ['public'],
      resources: [],
      approved_at: '2026-11-01T00:00:00.000Z',
      last_used_at: '2026-11-01T00:00:00.000Z',
    });

    const revoked = await adminFetch(running, `/users/${userId}/grants/${encodeURIComponent(DOCUMENT_CLIENT)}`, { method: 'DELETE' });
    expect(await revoked.json()).toEqual({ user_id: userId, client_id: DOCUMENT_CLIENT, deleted: true, revoked: 1 });
    expect(await live(tokens.get(DOCUMENT_CLIENT)!)).toBe(false);
    expect([await live(tokens.get(clientId)!), await live(tokens.get(other.clientId)!)]).toEqual([true, true]);
    expect((await running.store.grants.list(userId)).map((grant) => grant.clientId).sort()).toEqual([clientId, other.clientId].sort());
    const again = await adminFetch(running, `/users/${userId}/grants/${encodeURIComponent(DOCUMENT_CLIENT)}`, { method: 'DELETE' });
    expect([again.status, ((await again.json()) as { error: string }).error]).toEqual([404, 'not_found']);

    await eventually(() => adminLines().some((entry) => entry.audit.action === 'grant revoked by the operator, its tokens revoked'));
    expect(adminLines().find((entry) => entry.audit.action === 'grant revoked by the operator, its tokens revoked')!.audit).toMatchObject({
      method: 'DELETE',
      route: '/admin/users/:id/grants/:clientId',
      status: 200,
      userId,
      clientId: DOCUMENT_CLIENT,
      revoked: 1,
    });
    expect(
      adminLines()
        .filter((entry) => entry.audit.route === '/admin/users/:id/grants')
        .map((entry) => [entry.audit.method, entry.audit.status]),
    ).toContainEqual(['GET', 200]);
  });

  it('removes the grants of a deleted application, and of a deleted user', async () => {
    const { clientId } = await registerApplication(running.store);
    const kept = await registerApplication(running.store);
    const first = await connected([clientId, kept.clientId]);
    const second = await connected([clientId]);
    expect((await adminFetch(running, `/applications/${clientId}`, { method: 'DELETE' })).status).toBe(200);
    for (const { userId } of [first, second]) {
      const { grants } = (await (await adminFetch(running, `/users/${userId}/grants`)).json()) as GrantsAnswer;
      expect(grants.map((grant) => grant.client_id)).toEqual(userId === first.userId ? [kept.clientId] : []);
    }
    expect((await adminFetch(running, `/users/${first.userId}`, { method: 'DELETE' })).status).toBe(200);
    expect(((await (await adminFetch(running, `/users/${first.userId}/grants`)).json()) as GrantsAnswer).grants).toEqual([]);
  });
});

describe('tokengate users grants / revoke-grant', { timeout: 120_000 }, () => {
  const tokengate = (...args: string[]) => runCli([...args, '--config', configFile], { env: { TOKENGATE_CONFIG: '' } });

  it("lists a user's grants as a table and as JSON, and revokes one", async () => {
    const { clientId } = await registerApplication(running.store);
    const { userId, tokens } = await connected([clientId]);
    const [table, json] = await Promise.all([tokengate('users', 'grants', userId), tokengate('users', 'grants', userId, '--json')]);
    expect([table.code, table.stderr]).toEqual([0, '']);
    expect(table.stdout).toMatch(/^CLIENT_ID +SCOPES +RESOURCES +APPROVED +LAST_USED$/m);
    expect(table.stdout).toContain(`${clientId}  public  -          2026-11-01T00:00:00.000Z`);
    expect((JSON.parse(json.stdout) as GrantsAnswer).grants.map((grant) => grant.client_id)).toEqual([clientId]);

    const revoke = await tokengate('users', 'revoke-grant', userId, clientId);
    expect([revoke.code, revoke.stdout.trim()]).toEqual([0, `Revoked the grant of user ${userId} to ${clientId} and 1 token.`]);
    expect(await live(tokens.get(clientId)!)).toBe(false);
    const empty = await tokengate('users', 'grants', userId);
    expect(empty.stdout.trim()).toBe(`User ${userId} has connected no application.`);
    const missing = await tokengate('users', 'revoke-grant', userId, clientId);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('This user has no grant to this application.');
    const usage = await tokengate('users', 'revoke-grant', userId);
    expect([usage.code, usage.stderr]).toEqual([2, expect.stringContaining('usage: tokengate users revoke-grant USER_ID CLIENT_ID')]);
  });
});
