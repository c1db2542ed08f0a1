import { readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest } from '../src/token/token-value.js';
import { runCli, serveInTerminal, spawnServe, startServe, tempConfigs, testStateHome, type ServeProcess, warningLines } from './support/cli.js';
import { USER_TOKEN, startUpstream } from './support/gateway.js';
import { freePort } from './support/ports.js';
import { REDIS_URL, createTestRedisStore, deletePrefix, uniquePrefix } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';
import { eventually } from './support/wait.js';

// Port 0 leaves nothing to derive the issuer URL from: it is named (last, so a test can add issuer keys).
const LISTEN_ON_FREE_PORTS = 'server:\n  host: 127.0.0.1\n  port: 0\nadmin:\n  port: 0\nlogging:\n  level: info\nissuer:\n  issuerUrl: http://localhost:8080\n';
const configs = tempConfigs();
afterAll(() => configs.remove());

describe('tokengate check', () => {
  it('exits 0 on each shipped config', async () => {
    for (const file of ['config/tokengate.yaml', 'config/tokengate.redis.yaml']) {
      const result = await runCli(['check', '--config', file]);
      expect(result.stderr).toBe('');
      expect(result.stdout).toContain(`${file} is valid`);
      expect(result.code).toBe(0);
    }
  });

  it('exits 2 naming every problem of a broken config, without a stack trace', async () => {
    const file = configs.write('server:\n  port: nope\nstore:\n  drivr: redis\n');
    const result = await runCli(['check', '--config', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`${file} has 2 problems:`);
    expect(result.stderr).toContain('server.port (line 2): expected an integer, got "nope"');
    expect(result.stderr).toContain('store.drivr (line 4): unknown key');
    expect(result.stderr).not.toMatch(/\n\s+at /);
  });

  it('names the issuer URL, and warns (still exit 0) when it names this machine on another port than the listener', async () => {
    const derived = await runCli(['check', '--config', configs.write('server:\n  port: 8181\n')]);
    expect(derived).toMatchObject({ code: 0, stderr: '', stdout: expect.stringContaining('issuer at http://localhost:8181\n') });
    const mismatched = await runCli(['check', '--config', configs.write('server:\n  port: 8181\nissuer:\n  issuerUrl: http://localhost:8080\n')]);
    expect(mismatched.code).toBe(0);
    expect(mismatched.stderr).toMatch(
      /^tokengate: warning: issuer\.issuerUrl \(http:\/\/localhost:8080\) names port 8080 on this machine, but the public listener is on port 8181 \(server\.port\)/,
    );
    expect(mismatched.stdout).toContain('is valid');
  });

  it('prints the stack trace only when asked with --debug', async () => {
    const result = await runCli(['check', '--config', 'missing.yaml', '--debug']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/\n\s+at /);
  });

  it('refuses unknown commands and options with usage', async () => {
    expect(await runCli(['frobnicate'])).toMatchObject({ code: 2, stderr: expect.stringContaining('unknown command "frobnicate"') });
    expect(await runCli(['check', '--confgi', 'x'])).toMatchObject({ code: 2, stderr: expect.stringContaining('usage: tokengate check') });
    expect(await runCli(['--help'])).toMatchObject({ code: 0, stdout: expect.stringContaining('tokengate serve') });
  });

  it('prints the package version with --version', async () => {
    const { version } = JSON.parse(readFileSync(join(import.meta.dirname, '../package.json'), 'utf8')) as { version: string };
    expect(version).toMatch(/^\d+\.\d+\.\d+/);
    for (const flag of ['--version', '-v']) expect(await runCli([flag])).toEqual({ code: 0, stdout: `tokengate ${version}\n`, stderr: '' });
  });
});

describe('tokengate serve', () => {
  let serve: ServeProcess | undefined;
  afterEach(() => {
    serve?.child.kill('SIGKILL');
    serve = undefined;
  });

  it('derives the issuer URL from the public listener when it is unset, and logs it', async () => {
    const port = await freePort();
    serve = await startServe(configs.write(`server:\n  host: 127.0.0.1\n  port: ${port}\nadmin:\n  port: 0\n`));
    const metadata = (await (await fetch(`${serve.publicUrl}/.well-known/oauth-authorization-server`)).json()) as { issuer: string; token_endpoint: string };
    expect(metadata).toMatchObject({ issuer: `http://localhost:${port}`, token_endpoint: `http://localhost:${port}/oauth/token` });
    const listening = JSON.parse(
      serve
        .output()
        .split('\n')
        .find((line) => line.includes('"tokengate listening"'))!,
    ) as { issuerUrl: string };
    expect(listening.issuerUrl).toBe(`http://localhost:${port}`);
    expect(warningLines(serve.output())).toEqual([]);
  });

  it('warns when the issuer URL names this machine on another port than the listener', async () => {
    const port = await freePort();
    serve = await startServe(configs.write(`server:\n  host: 127.0.0.1\n  port: ${port}\nadmin:\n  port: 0\nissuer:\n  issuerUrl: http://localhost:1\n`));
    const [warning] = warningLines(serve.output());
    expect(warning).toContain(`issuer.issuerUrl (http://localhost:1) names port 1 on this machine, but the public listener is on port ${port} (server.port)`);
  });

  it('writes JSON lines to a pipe, and lines made for reading (pino-pretty) to a terminal', async () => {
    serve = await startServe(configs.write(LISTEN_ON_FREE_PORTS));
    expect(serve.output()).toMatch(/^\{"level":30,.*"msg":"tokengate listening"\}$/m);
    // Without its colours: level, message, then the fields one per line.
    const printed = (await serveInTerminal(configs.write(LISTEN_ON_FREE_PORTS))).replace(/\u001b\[[0-9;]*m/g, '');
    expect(printed).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: tokengate listening\r?$/m);
    expect(printed).toMatch(/^\s+publicUrl: "http:\/\/127\.0\.0\.1:\d+"\r?$/m);
    expect(printed).not.toContain('{"level"');
  });

  it('without admin.token, makes the admin token at its first start and keeps it where the CLI of the same user finds it', async () => {
    const adminPort = await freePort();
    const file = configs.write(
      `server:\n  host: 127.0.0.1\n  port: 0\nadmin:\n  port: ${adminPort}\nlogging:\n  level: info\nissuer:\n  issuerUrl: http://localhost:8080\n`,
    );
    serve = await startServe(file);
    const kept = join(testStateHome(), 'tokengate', 'admin-token');
    expect(
      JSON.parse(
        serve
          .output()
          .split('\n')
          .find((line) => line.includes('"adminTokenFile"'))!,
      ),
    ).toMatchObject({ adminTokenFile: kept });
    expect(statSync(kept).mode & 0o777).toBe(0o600);
    const token = readFileSync(kept, 'utf8').trim();
    expect(serve.output()).not.toContain(token);
    expect((await fetch(`${serve.opsUrl}/admin/users`)).status).toBe(401);
    const listed = await runCli(['apps', 'list', '--config', file], { env: { TOKENGATE_CONFIG: '' } });
    expect([listed.code, listed.stdout, listed.stderr]).toEqual([0, 'No applications.\n', '']);
    // Another user (here: another state directory) has no token of this instance: one line says where none was found.
    const elsewhere = configs.write('');
    const stranger = await runCli(['apps', 'list', '--config', file], { env: { TOKENGATE_CONFIG: '', XDG_STATE_HOME: dirname(elsewhere) } });
    expect(stranger.code).toBe(1);
    expect(stranger.stderr).toBe(
      `tokengate: ${file} sets no admin.token, and there is no admin token at ${join(dirname(elsewhere), 'tokengate', 'admin-token')}: tokengate serve makes it there at its first start without admin.token (as this user), or set admin.token (e.g. through TOKENGATE_ADMIN_TOKEN)\n`,
    );
  }, 60_000);

  it('serves /healthz on the ops listener and stops cleanly on SIGTERM', async () => {
    serve = await startServe(configs.write(LISTEN_ON_FREE_PORTS));
    const health = await fetch(`${serve.opsUrl}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${serve.opsUrl}/readyz`);
    expect(await ready.json()).toEqual({ status: 'ready', store: 'memory' });
    serve.child.kill('SIGTERM');
    expect(await serve.exited).toBe(0);
    expect(serve.output()).toContain('"tokengate stopped"');
  });

  it('runs on Redis, and closes its connections when stopped', async () => {
    const prefix = uniquePrefix('serve');
    serve = await startServe(configs.write(`${LISTEN_ON_FREE_PORTS}store:\n  driver: redis\n  url: ${REDIS_URL}\n  keyPrefix: "${prefix}"\n`));
    expect(await (await fetch(`${serve.opsUrl}/readyz`)).json()).toEqual({ status: 'ready', store: 'redis' });
    serve.child.kill('SIGINT');
    expect(await serve.exited).toBe(0);
    await deletePrefix(prefix);
  });

  it('lets an in-flight request finish on SIGTERM while refusing new connections', async () => {
    const prefix = uniquePrefix('shutdown');
    const tagKey = generateTagKey();
    let releaseUpstream = () => {};
    const upstream = await startUpstream((_request, response) => {
      releaseUpstream = () => response.end('finished');
    });
    const store = createTestRedisStore(prefix);
    try {
      const token = createTokenMinter(decodeTagKey(tagKey)).mint();
      await store.tokens.saveAccessToken(tokenDigest(token), { ...USER_TOKEN, scopes: ['public'], issuedAt: Date.now(), expiresAt: Date.now() + 60_000 });
      serve = await startServe(
        configs.write(
          `${LISTEN_ON_FREE_PORTS}  tokenTagKey: ${tagKey}\nstore:\n  driver: redis\n  url: ${REDIS_URL}\n  keyPrefix: "${prefix}"\n` +
            `routes:\n  - path: /api/public/tickets\n    upstream: ${upstream.url}\n`,
        ),
      );
      const inFlight = fetch(`${serve.publicUrl}/api/public/tickets`, { headers: { authorization: `Bearer ${token}` } });
      while (upstream.received.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      serve.child.kill('SIGTERM');
      // The listener closes at once: a new connection is refused while the old request is still open.
      let refused = false;
      for (let attempt = 0; attempt < 100 && !refused; attempt += 1) {
        refused = await fetch(`${serve.opsUrl}/healthz`).then(
          () => false,
          () => true,
        );
        if (!refused) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(refused).toBe(true);
      releaseUpstream();
      const response = await inFlight;
      expect(response.status).toBe(200);
      expect(await response.text()).toBe('finished');
      expect(await serve.exited).toBe(0);
    } finally {
      await upstream.close();
      await store.close();
      await deletePrefix(prefix);
    }
  });

  it('waits for a Redis that starts after it, saying what it waits for, then serves', async () => {
    const redis = await ThrowawayRedis.notStarted();
    const prefix = uniquePrefix('serve-waits');
    const spawned = spawnServe(
      configs.write(`${LISTEN_ON_FREE_PORTS}store:\n  driver: redis\n  url: ${redis.url}\n  keyPrefix: "${prefix}"\n  startupTimeoutMs: 60000\n`),
    );
    try {
      await eventually(() => spawned.output().includes('waiting for the store'), 15_000);
      const waiting = spawned
        .output()
        .split('\n')
        .find((line) => line.includes('waiting for the store'))!;
      expect(JSON.parse(waiting)).toMatchObject({
        level: 40,
        msg: `waiting for the store: Redis at ${redis.url} (store.url) does not answer yet (connection refused); retrying until store.startupTimeoutMs (60000 ms) have passed`,
      });
      await redis.restart();
      serve = await spawned.listening;
      expect(await (await fetch(`${serve.opsUrl}/readyz`)).json()).toEqual({ status: 'ready', store: 'redis' });
      expect(serve.output()).toContain(`"the store answers: Redis at ${redis.url} (store.url)"`);
    } finally {
      spawned.child.kill('SIGKILL');
      await redis.kill();
    }
  });

  const neverAnswers: Array<[string, (port: number) => string, RegExp]> = [
    [
      'store.url',
      (port) => `  url: redis://:hunter2-secret@127.0.0.1:${port}\n`,
      /^tokengate: cannot start: Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:\d+ \(store\.url\) did not answer within 1500 ms \(store\.startupTimeoutMs\): connection refused\. Check that Redis runs and that this host reaches it, and the host, port and password in store\.url\. For a single instance, store\.driver: memory needs no Redis\.\n$/,
    ],
    [
      'store.sentinel',
      (port) => `  sentinel:\n    sentinels: ["127.0.0.1:${port}"]\n    masterName: main\n    password: hunter2-secret\n  password: hunter2-secret\n`,
      /^tokengate: cannot start: the master "main" of the sentinels 127\.0\.0\.1:\d+ \(store\.sentinel\) did not answer within 1500 ms \(store\.startupTimeoutMs\): no sentinel answered\. Check that the sentinels run .* and store\.sentinel\.password and store\.password\. For a single instance, store\.driver: memory needs no Redis\.\n$/,
    ],
    [
      'store.cluster.nodes',
      (port) => `  cluster:\n    nodes: ["127.0.0.1:${port}"]\n  password: hunter2-secret\n`,
      /^tokengate: cannot start: the Redis Cluster of 127\.0\.0\.1:\d+ \(store\.cluster\.nodes\) did not answer within 1500 ms \(store\.startupTimeoutMs\): (no cluster node answered|connection refused)\. Check that the cluster runs .*store\.password\. For a single instance, store\.driver: memory needs no Redis\.\n$/,
    ],
  ];

  it.each(neverAnswers)(
    'exits 1 when the store never answers (%s): one line naming the key and what to check, no password, no client jargon',
    async (_key, topology, message) => {
      const port = await freePort();
      const file = configs.write(`${LISTEN_ON_FREE_PORTS}store:\n  driver: redis\n${topology(port)}  startupTimeoutMs: 1500\n  commandTimeoutMs: 300\n`);
      const result = await runCli(['serve', '--config', file]);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(message);
      expect(result.stdout).toContain('waiting for the store');
      for (const text of [result.stderr, result.stdout]) {
        expect(text).not.toContain('hunter2-secret');
        expect(text).not.toMatch(/maxRetriesPerRequest|offline ?queue|ioredis|Reached the max retries/i);
      }
    },
  );
});
