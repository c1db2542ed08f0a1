import { afterEach, describe, expect, it } from 'vitest';
import { runCli, startServe, writeTempConfig, type ServeProcess } from './support/cli.js';
import { REDIS_URL, deletePrefix, uniquePrefix } from './support/redis.js';

const LISTEN_ON_FREE_PORTS = 'server:\n  host: 127.0.0.1\n  port: 0\nadmin:\n  port: 0\nlogging:\n  level: info\n';

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
    const file = writeTempConfig('server:\n  port: nope\nstore:\n  drivr: redis\n');
    const result = await runCli(['check', '--config', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`${file} has 2 problems:`);
    expect(result.stderr).toContain('server.port (line 2): expected an integer, got "nope"');
    expect(result.stderr).toContain('store.drivr (line 4): unknown key');
    expect(result.stderr).not.toMatch(/\n\s+at /);
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
});

describe('tokengate serve', () => {
  let serve: ServeProcess | undefined;
  afterEach(() => {
    serve?.child.kill('SIGKILL');
    serve = undefined;
  });

  it('serves /healthz on the ops listener and stops cleanly on SIGTERM', async () => {
    serve = await startServe(writeTempConfig(LISTEN_ON_FREE_PORTS));
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
    serve = await startServe(writeTempConfig(`${LISTEN_ON_FREE_PORTS}store:\n  driver: redis\n  url: ${REDIS_URL}\n  keyPrefix: "${prefix}"\n`));
    expect(await (await fetch(`${serve.opsUrl}/readyz`)).json()).toEqual({ status: 'ready', store: 'redis' });
    serve.child.kill('SIGINT');
    expect(await serve.exited).toBe(0);
    await deletePrefix(prefix);
  });

  it('refuses to start with an unreachable Redis, in one paragraph', async () => {
    const file = writeTempConfig(`${LISTEN_ON_FREE_PORTS}store:\n  driver: redis\n  url: redis://:hunter2-secret@127.0.0.1:1\n  connectTimeoutMs: 300\n  commandTimeoutMs: 300\n`);
    const result = await runCli(['serve', '--config', file]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^tokengate: cannot start: Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:1\S* does not answer .*store\.url.*\n$/);
    expect(result.stderr).not.toContain('hunter2-secret');
  });
});
