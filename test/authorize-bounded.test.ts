import { readFileSync } from 'node:fs';
import { Pool } from 'undici';
import { adminTokenFile, readAdminTokenFile } from '../src/admin/credential.js';
import { afterAll, describe, expect, it } from 'vitest';
import { generateTagKey } from '../src/token/token-value.js';
import { IMAGE_NODE_OPTIONS, startServe, tempConfigs, type ServeProcess, testStateHome } from './support/cli.js';
import { authorizePath, FormClient, signInAndApprove } from './support/issuer.js';
import { deletePrefix, rawRedis, REDIS_URL, uniquePrefix } from './support/redis.js';

/**
 * Anonymous authorization requests cost a sidecar nothing that lasts: 10,000 of them, each with
 * a 15,000-character state (and every other parameter oversized, or at its limit), against one
 * `tokengate serve` on each store, with the image's NODE_OPTIONS. Each is answered with the
 * documented page or error; the process's resident memory stays flat and Redis holds no more
 * keys after them than before; a person signing in in the middle of it signs in.
 *
 * Memory is the RSS of the child process (/proc/<pid>/status), after a warm-up of the same mix
 * so that V8's young generation and the allocator have reached their working size first.
 */

const REQUESTS = 10_000;
/**
 * Requests before the judged flood: as many, so that what a process grows into under this load
 * (the young generation up to the image's --max-semi-space-size, the JIT's code) is in place
 * before RSS is first read. After 2,000, a loaded machine's flood still grew RSS by 10.1 MiB.
 */
const WARM_UP = REQUESTS;
const CONCURRENCY = 16;
const EMAIL = 'fan@example.com';
const PASSWORD = 'correct horse battery';
const REDIRECT_URI = 'https://app.example/cb';
const HUGE_STATE = 's'.repeat(15_000);

const configs = tempConfigs();
afterAll(() => configs.remove());

function rssMiB(pid: number): number {
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

async function admin(serve: ServeProcess, path: string, body: unknown): Promise<Record<string, unknown>> {
  // A serve without admin.token keeps the one it made in the test's state directory, where the CLI reads it.
  const adminToken = readAdminTokenFile(adminTokenFile({ XDG_STATE_HOME: testStateHome() }))!;
  const response = await fetch(`${serve.opsUrl}/admin${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` },
    body: JSON.stringify(body),
  });
  expect(response.status, await response.clone().text()).toBe(201);
  return (await response.json()) as Record<string, unknown>;
}

interface Kind {
  name: string;
  path: string;
  status: number;
  /** Text the answer carries: the page's title, or the error. */
  says: string;
}

/** The mix of requests: what each is, and the documented answer. */
function requestKinds(clientId: string): Kind[] {
  const valid = { client_id: clientId, redirect_uri: REDIRECT_URI, response_type: 'code', code_challenge: 'c'.repeat(43), code_challenge_method: 'S256' };
  return [
    // A state over its limit (2,048): the page, never a redirect carrying it.
    { name: '15 KB state', path: authorizePath({ ...valid, state: HUGE_STATE }), status: 400, says: 'This sign-in link is not valid' },
    // Every parameter over its limit: the request head is over server.maxHeaderSize (16 KiB).
    {
      name: 'everything oversized, 15 KB state',
      path: authorizePath({
        client_id: `https://x.example/${'c'.repeat(600)}`,
        redirect_uri: `https://app.example/${'r'.repeat(2_100)}`,
        response_type: 'r'.repeat(300),
        scope: 'p'.repeat(1_100),
        state: HUGE_STATE,
        code_challenge: 'c'.repeat(300),
        code_challenge_method: 'm'.repeat(300),
        dpop_jkt: 'j'.repeat(300),
        resource: Array.from({ length: 6 }, (_, index) => `https://api.example/${index}/${'x'.repeat(520)}`),
      }),
      status: 431,
      says: 'invalid_request',
    },
    // Every parameter over its limit within the head limit: an unknown application (client_id first).
    {
      name: 'everything oversized',
      path: authorizePath({
        client_id: 'c'.repeat(600),
        redirect_uri: `https://app.example/${'r'.repeat(2_100)}`,
        response_type: 'r'.repeat(300),
        scope: 'p'.repeat(1_100),
        state: 's'.repeat(2_100),
        code_challenge: 'c'.repeat(300),
        code_challenge_method: 'm'.repeat(300),
        dpop_jkt: 'j'.repeat(300),
        resource: Array.from({ length: 6 }, (_, index) => `https://api.example/${index}/${'x'.repeat(520)}`),
      }),
      status: 400,
      says: 'Unknown application',
    },
    // Every parameter at its limit: a sign-in page, whose form carries the request; nothing stored.
    { name: 'at the limits', path: authorizePath({ ...valid, state: 's'.repeat(2_048), scope: 'public' }), status: 200, says: 'Sign in' },
  ];
}

/** Sends `count` requests of the kinds in turn, `CONCURRENCY` at a time, and counts each kind's answers. */
async function send(pool: Pool, kinds: Kind[], count: number): Promise<Map<string, Map<string, number>>> {
  const answers = new Map(kinds.map((kind) => [kind.name, new Map<string, number>()]));
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const kind = kinds[next++ % kinds.length]!;
      const response = await pool.request({ method: 'GET', path: kind.path });
      const text = await response.body.text();
      const answer = `${response.statusCode} ${text.includes(kind.says) ? 'as documented' : text.slice(0, 200)}`;
      const tally = answers.get(kind.name)!;
      tally.set(answer, (tally.get(answer) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return answers;
}

describe.each([
  ['memory', () => ({ driver: 'memory' }), null],
  ['redis', (prefix: string) => ({ driver: 'redis', url: REDIS_URL, keyPrefix: prefix }), uniquePrefix('authorize-bounded')],
] as const)('10,000 anonymous authorization requests on the %s store', (name, storeConfig, prefix) => {
  let serve: ServeProcess | undefined;
  afterAll(async () => {
    serve?.child.kill('SIGTERM');
    await serve?.exited;
    if (prefix !== null) await deletePrefix(prefix);
  });

  it('are each answered as documented, leave memory flat and Redis keys as they were, and a real sign-in among them works', async () => {
    const config = configs.write(
      JSON.stringify({
        server: { host: '127.0.0.1', port: 0 },
        admin: { host: '127.0.0.1', port: 0 },
        store: storeConfig(prefix ?? ''),
        issuer: { tokenTagKey: generateTagKey(), issuerUrl: 'http://127.0.0.1:8080' },
        logging: { level: 'info' },
      }),
    );
    serve = await startServe(config, { NODE_OPTIONS: IMAGE_NODE_OPTIONS });
    const application = await admin(serve, '/applications', { name: 'Fan app', redirect_uris: [REDIRECT_URI], confidential: false });
    await admin(serve, '/users', { email: EMAIL, password: PASSWORD });
    const kinds = requestKinds(application.client_id as string);
    const pool = new Pool(serve.publicUrl, { connections: CONCURRENCY });
    const redis = prefix === null ? null : rawRedis();
    const keyCount = async () => (redis === null ? 0 : (await redis.keys(`${prefix}*`)).length);
    try {
      await send(pool, kinds, WARM_UP);
      const rssBefore = rssMiB(serve.child.pid!);
      const keysBefore = await keyCount();

      const sending = send(pool, kinds, REQUESTS);
      // A person signs in while the flood goes on.
      const path = authorizePath({
        client_id: application.client_id as string,
        redirect_uri: REDIRECT_URI,
        response_type: 'code',
        code_challenge: 'c'.repeat(43),
        code_challenge_method: 'S256',
        state: 'mine',
      });
      const { location } = await signInAndApprove(new FormClient(serve.publicUrl), path, EMAIL, PASSWORD);
      expect(location.searchParams.get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(location.searchParams.get('state')).toBe('mine');
      const answers = await sending;

      for (const kind of kinds) expect(Object.fromEntries(answers.get(kind.name)!)).toEqual({ [`${kind.status} as documented`]: REQUESTS / kinds.length });
      const rssAfter = rssMiB(serve.child.pid!);
      expect(rssAfter - rssBefore, `RSS ${rssBefore.toFixed(1)} -> ${rssAfter.toFixed(1)} MiB`).toBeLessThan(10);
      // The one signed-in session (and its code) are what the sign-in stored; the flood stored nothing.
      if (redis !== null) expect((await keyCount()) - keysBefore).toBeLessThanOrEqual(3);
    } finally {
      await pool.close();
      redis?.disconnect();
    }
  }, 480_000);
});
