import { request as httpRequest } from 'node:http';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { buildTokengate } from '../src/app.js';
import { AdminTokenFileError, adminTokenFile, readAdminTokenFile, readOrCreateAdminToken, servedAdminToken } from '../src/admin/credential.js';
import type { Config } from '../src/config/schema.js';
import { parseConfig } from '../src/load-config.js';
import { generateTagKey } from '../src/token/token-value.js';
import { captureLog, type CapturedLog } from './support/log.js';
import { adminFetch, registerApplication, startTokengate, TEST_ADMIN_TOKEN, type RunningTokengate } from './support/instance.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './support/redis.js';
import { eventually } from './support/wait.js';

/**
 * Who may call the admin API: always a token (the config's, or the one `serve` makes and keeps
 * for its user), never a browser (Origin) or a rebound name (Host), and one audit line per call.
 */

const ROOT = join(import.meta.dirname, '..');
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

/** Every config the repository ships, as the deployments it describes load it. */
const SHIPPED: Array<[string, string, Record<string, string>]> = [
  ['config/tokengate.yaml', read('config/tokengate.yaml'), {}],
  [
    'config/tokengate.redis.yaml (examples/docker-compose.yml)',
    read('config/tokengate.redis.yaml'),
    { TOKENGATE_ADMIN_TOKEN: 'compose-admin-token-0123456789' },
  ],
  ['examples/ingress/tokengate.yaml', read('examples/ingress/tokengate.yaml'), {}],
  [
    'examples/kubernetes/tokengate-config.yaml',
    (parse(read('examples/kubernetes/tokengate-config.yaml')) as { data: Record<string, string> }).data['tokengate.yaml']!,
    {
      TOKENGATE_ADMIN_TOKEN: 'kubernetes-admin-token-0123456789',
      TOKENGATE_ISSUER_URL: 'https://auth.ticketing.example',
      TOKENGATE_TOKEN_TAG_KEY: generateTagKey(),
    },
  ],
];

/** The routes of a listener as fastify lists them: method and full path, the admin API's only. */
function adminRoutes(tree: string): Array<[string, string]> {
  const stack: string[] = [];
  const routes: Array<[string, string]> = [];
  for (const line of tree.split('\n')) {
    const match = /^([│├└─ ]*)(\S+) \(([^)]+)\)$/.exec(line);
    if (match === null) continue;
    const depth = match[1]!.length / 4;
    stack[depth - 1] = match[2]!;
    const path = stack.slice(0, depth).join('');
    if (!path.startsWith('/admin/')) continue;
    for (const method of match[3]!.split(', ')) routes.push([method, path.replace(/:[^/]+/g, 'some-id')]);
  }
  return routes;
}

describe('the shipped configs', () => {
  let stateHome: string;
  beforeAll(() => {
    stateHome = mkdtempSync(join(tmpdir(), 'tokengate-admin-state-'));
  });
  afterAll(() => rmSync(stateHome, { recursive: true, force: true }));

  it.each(SHIPPED)('%s: every admin route answers 401 from 127.0.0.1 without the admin token', async (_name, text, env) => {
    const loaded = parseConfig(text, 'shipped', { TOKENGATE_ISSUER_URL: 'http://localhost:8080', ...env });
    // Its own ports and the test's Redis; the admin API exactly as `serve` runs it.
    const config: Config = {
      ...loaded,
      server: { ...loaded.server, host: '127.0.0.1', port: 0, workers: 1 },
      admin: { ...loaded.admin, host: '127.0.0.1', port: 0 },
      decisions: { ...loaded.decisions, enabled: false },
    };
    const { token } = servedAdminToken(config.admin.token, { XDG_STATE_HOME: stateHome });
    const prefix = uniquePrefix('shipped-admin');
    const store = createTestRedisStore(prefix);
    const tokengate = await buildTokengate(config, { store, adminToken: token, serves: 'ops' });
    try {
      const { opsUrl } = await tokengate.listen();
      const routes = adminRoutes(tokengate.ops.printRoutes({ commonPrefix: false }));
      expect(routes.length).toBeGreaterThanOrEqual(12);
      for (const [method, path] of routes) {
        const response = await fetch(`${opsUrl}${path}`, {
          method,
          headers: { 'content-type': 'application/json' },
          ...(method === 'GET' || method === 'HEAD' ? {} : { body: '{}' }),
        });
        expect([method, path, response.status]).toEqual([method, path, 401]);
        expect(response.headers.get('www-authenticate')).toMatch(/^Bearer realm=/);
      }
      // The token it runs with opens it, and the probes need none.
      expect((await fetch(`${opsUrl}/admin/applications`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
      for (const probe of ['/healthz', '/readyz', '/metrics']) expect((await fetch(`${opsUrl}${probe}`)).status, probe).toBe(200);
    } finally {
      await tokengate.close();
      await store.close();
      await deletePrefix(prefix);
    }
  });
});

/** A request with full control of Host (fetch sets its own), from a known local port. */
function rawAdminRequest(
  url: string,
  options: { method: string; path: string; headers: Record<string, string>; body?: string },
): Promise<{ status: number; body: Record<string, unknown>; localPort: number }> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const sent = httpRequest(
      { host: target.hostname, port: target.port, method: options.method, path: options.path, headers: options.headers, setHost: false, agent: false },
      (response) => {
        const localPort = response.socket.localPort!;
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) as Record<string, unknown>, localPort }));
      },
    );
    sent.on('error', reject);
    sent.end(options.body);
  });
}

describe('a caller the admin API refuses whatever its token', () => {
  let running: RunningTokengate;
  let log: CapturedLog;
  let opsHost: string;

  beforeAll(async () => {
    log = captureLog('info');
    running = await startTokengate('admin-caller', { logger: log.logger });
    opsHost = new URL(running.opsUrl).host;
  });
  afterAll(() => running?.close());

  const withToken = { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' };

  it('a rebound name (DNS rebinding): 403, and nothing changes', async () => {
    const application = await registerApplication(running.store, { confidential: false });
    const patch = {
      method: 'PATCH',
      path: `/admin/applications/${application.clientId}`,
      body: JSON.stringify({ redirect_uris: ['https://attacker.example/steal'] }),
    };
    for (const host of ['rebind.attacker.example:9090', `attacker.example:${new URL(running.opsUrl).port}`, '127.0.0.1.attacker.example', 'evil@127.0.0.1']) {
      const refused = await rawAdminRequest(running.opsUrl, { ...patch, headers: { ...withToken, host } });
      expect([host, refused.status]).toEqual([host, 403]);
      expect(refused.body).toEqual({ error: 'forbidden', error_description: expect.stringContaining('addressed to the ops listener') });
    }
    const created = await rawAdminRequest(running.opsUrl, {
      method: 'POST',
      path: '/admin/applications',
      headers: { ...withToken, host: 'rebind.attacker.example' },
      body: JSON.stringify({ name: 'Stolen', redirect_uris: ['https://attacker.example/cb'] }),
    });
    expect(created.status).toBe(403);
    expect((await running.store.applications.get(application.clientId))?.redirectUris).toEqual([application.redirectUri]);
    expect((await running.store.applications.list()).map((each) => each.name)).not.toContain('Stolen');
  });

  it('a browser (an Origin header, even its own origin): 403', async () => {
    for (const origin of ['https://attacker.example', `http://${opsHost}`, 'null']) {
      const refused = await rawAdminRequest(running.opsUrl, { method: 'GET', path: '/admin/users', headers: { ...withToken, host: opsHost, origin } });
      expect([origin, refused.status, refused.body.error]).toEqual([origin, 403, 'forbidden']);
    }
  });

  it('takes the names the listener answers to: an IP address, localhost, any port', async () => {
    const port = new URL(running.opsUrl).port;
    for (const host of [opsHost, `localhost:${port}`, 'LOCALHOST', `[::1]:${port}`, '127.0.0.1:19090', '10.1.2.3']) {
      const answer = await rawAdminRequest(running.opsUrl, { method: 'GET', path: '/admin/users', headers: { ...withToken, host } });
      expect([host, answer.status]).toEqual([host, 200]);
    }
  });

  it("writes one audit line per call naming the caller's address and port, the Host, the route and what changed, never a secret", async () => {
    const created = await adminFetch(running, '/applications', {
      method: 'POST',
      body: JSON.stringify({ name: 'Audited', redirect_uris: ['https://audited.example/cb'] }),
    });
    const { client_id: clientId, client_secret: clientSecret } = (await created.json()) as { client_id: string; client_secret: string };
    const updated = await rawAdminRequest(running.opsUrl, {
      method: 'PATCH',
      path: `/admin/applications/${clientId}`,
      headers: { ...withToken, host: opsHost },
      body: JSON.stringify({ name: 'Audited again', redirect_uris: ['https://audited.example/other'] }),
    });
    expect(updated.status).toBe(200);
    const user = await adminFetch(running, '/users', { method: 'POST', body: JSON.stringify({ email: 'audited@example.com', password: 'a secret password' }) });
    expect(user.status).toBe(201);
    const refused = await rawAdminRequest(running.opsUrl, {
      method: 'GET',
      path: '/admin/users',
      headers: { authorization: 'Bearer wrong-token-0123456789abcdef', host: 'rebind.attacker.example' },
    });
    expect(refused.status).toBe(403);

    const audit = () => log.entries().filter((entry) => entry.msg === 'admin call') as unknown as Array<{ audit: Record<string, unknown> }>;
    await eventually(() => audit().length >= 4);
    const patchLine = audit().find((entry) => entry.audit.remotePort === updated.localPort)!.audit;
    expect(patchLine).toEqual({
      remoteAddress: '127.0.0.1',
      remotePort: updated.localPort,
      host: opsHost,
      method: 'PATCH',
      route: '/admin/applications/:clientId',
      status: 200,
      action: 'application updated',
      clientId,
      fields: ['name', 'redirectUris'],
    });
    expect(audit().find((entry) => entry.audit.action === 'application created')?.audit).toMatchObject({
      method: 'POST',
      status: 201,
      clientId,
      confidential: true,
    });
    expect(audit().find((entry) => entry.audit.action === 'user created')?.audit).toMatchObject({ method: 'POST', route: '/admin/users', status: 201 });
    expect(audit().find((entry) => entry.audit.remotePort === refused.localPort)?.audit).toEqual({
      remoteAddress: '127.0.0.1',
      remotePort: refused.localPort,
      host: 'rebind.attacker.example',
      method: 'GET',
      route: '/admin/users',
      status: 403,
    });
    for (const secret of [TEST_ADMIN_TOKEN, 'wrong-token-0123456789abcdef', clientSecret, 'a secret password']) expect(log.text()).not.toContain(secret);
  });
});

describe('the admin token serve keeps for its user', () => {
  let stateHome: string;
  beforeAll(() => {
    stateHome = mkdtempSync(join(tmpdir(), 'tokengate-admin-state-'));
  });
  afterAll(() => rmSync(stateHome, { recursive: true, force: true }));

  it('is made once, in a file and directory only its user can read, and read again by every later start', () => {
    const env = { XDG_STATE_HOME: join(stateHome, 'made') };
    const file = adminTokenFile(env);
    expect(file).toBe(join(stateHome, 'made', 'tokengate', 'admin-token'));
    expect(readAdminTokenFile(file)).toBeNull();
    const made = servedAdminToken('', env);
    expect(made).toEqual({ token: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/), file });
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(join(stateHome, 'made', 'tokengate')).mode & 0o777).toBe(0o700);
    expect(servedAdminToken('', env).token).toBe(made.token);
    expect(readOrCreateAdminToken(file)).toBe(made.token);
    // A configured token wins, and no file is read.
    expect(servedAdminToken('configured-token-0123456789', { XDG_STATE_HOME: '/nonexistent' })).toEqual({ token: 'configured-token-0123456789', file: null });
  });

  it('is one token when several instances start at once', async () => {
    const file = adminTokenFile({ XDG_STATE_HOME: join(stateHome, 'race') });
    const tokens = await Promise.all(Array.from({ length: 8 }, () => Promise.resolve().then(() => readOrCreateAdminToken(file))));
    expect(new Set(tokens).size).toBe(1);
  });

  it('refuses a file others can read or that holds no token', () => {
    const file = adminTokenFile({ XDG_STATE_HOME: join(stateHome, 'loose') });
    readOrCreateAdminToken(file);
    chmodSync(file, 0o644);
    expect(() => readAdminTokenFile(file)).toThrow(AdminTokenFileError);
    expect(() => readOrCreateAdminToken(file)).toThrow(/can be read or written by others \(mode 644\): chmod 600 it/);
    chmodSync(file, 0o600);
    writeFileSync(file, 'short\n');
    expect(() => readAdminTokenFile(file)).toThrow(/holds no admin token/);
  });
});
