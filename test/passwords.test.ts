import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

// This file proves the production cost: it runs outside the suite's test mode, which must be left
// before the password module reads the environment (vi.hoisted runs above the imports).
vi.hoisted(() => {
  delete process.env.TOKENGATE_TEST_MODE;
});

import {
  hashPassword,
  needsRehash,
  passwordHashingProblem,
  scryptParametersFor,
  SCRYPT_PARAMETERS,
  TEST_MODE_VARIABLE,
  TEST_SCRYPT_N_VARIABLE,
  verifyPassword,
} from '../src/issuer/passwords.js';
import { MemoryStore } from '../src/store/memory.js';
import { IMAGE_NODE_OPTIONS, runCli } from './support/cli.js';
import { registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { authorizePath, FormClient, formFields, signInAndApprove } from './support/issuer.js';

/**
 * Password hashes: scrypt at N=2^17, r=8, p=1 for new ones, each stored hash checked with its own
 * parameters, a hash below the current cost replaced at the next successful sign-in, and the
 * memory of concurrent runs bounded under the image's NODE_OPTIONS.
 */

const PASSWORD = 'correct horse battery';
const CURRENT = /^scrypt\$131072\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{86}$/;
const ROOT = resolve(import.meta.dirname, '..');

describe('password hashes', () => {
  it('are made at N=2^17 by a process outside the test mode, whatever TOKENGATE_TEST_SCRYPT_N says', () => {
    expect(SCRYPT_PARAMETERS).toEqual({ N: 2 ** 17, r: 8, p: 1 });
    const production = { N: 2 ** 17, r: 8, p: 1 };
    expect(scryptParametersFor({})).toEqual(production);
    expect(scryptParametersFor({ [TEST_SCRYPT_N_VARIABLE]: '1024' })).toEqual(production);
    expect(scryptParametersFor({ [TEST_MODE_VARIABLE]: 'true', [TEST_SCRYPT_N_VARIABLE]: '1024' })).toEqual(production);
    expect(scryptParametersFor({ [TEST_MODE_VARIABLE]: '1', [TEST_SCRYPT_N_VARIABLE]: '1024' })).toEqual({ ...production, N: 1024 });
    // Never above production's cost through this door, never a value scrypt would refuse.
    for (const value of ['131072', '262144', '1000', '1', '0', '-2', 'fast'])
      expect(scryptParametersFor({ [TEST_MODE_VARIABLE]: '1', [TEST_SCRYPT_N_VARIABLE]: value })).toEqual(production);
    expect(passwordHashingProblem({ [TEST_MODE_VARIABLE]: '1', [TEST_SCRYPT_N_VARIABLE]: '1000' })).toMatch(/power of two/);
  });

  it('refuses to start with the test setting outside the test mode, naming the variable', async () => {
    const file = resolve(ROOT, 'config/tokengate.yaml');
    const refused = await runCli(['check', '--config', file], { env: { [TEST_SCRYPT_N_VARIABLE]: '1024' } });
    expect(refused.code).not.toBe(0);
    expect(refused.stdout + refused.stderr).toContain(`${TEST_SCRYPT_N_VARIABLE} lowers the password hash's cost and is honoured only in the test mode`);
    const accepted = await runCli(['check', '--config', file], { env: { [TEST_MODE_VARIABLE]: '1', [TEST_SCRYPT_N_VARIABLE]: '1024' } });
    expect(accepted.code, accepted.stderr).toBe(0);
  }, 60_000);

  it('are made at N=2^17, r=8, p=1, and each is checked with the parameters it carries', async () => {
    const current = await hashPassword(PASSWORD);
    expect(current).toMatch(CURRENT);
    expect(needsRehash(current)).toBe(false);
    const legacy = await hashPassword(PASSWORD, { N: 2 ** 15, r: 8, p: 1 });
    const other = await hashPassword(PASSWORD, { N: 2 ** 14, r: 8, p: 2 });
    for (const encoded of [current, legacy, other]) {
      expect(await verifyPassword(PASSWORD, encoded)).toBe(true);
      expect(await verifyPassword('wrong password', encoded)).toBe(false);
    }
    expect([needsRehash(legacy), needsRehash(other)]).toEqual([true, true]);
    // Parameters no hash of ours has (N not a power of two, or a cost beyond the bounds) are refused unrun.
    const [, , , , salt, key] = current.split('$');
    for (const parameters of ['131071$8$1', '1048576$8$1', '131072$64$1', '131072$8$0'])
      expect(await verifyPassword(PASSWORD, `scrypt$${parameters}$${salt}$${key}`)).toBe(false);
  }, 120_000);

  it("run under the image's NODE_OPTIONS with their memory bounded: eight sign-ins at once hold two runs' worth", async () => {
    // A child as the image runs it: its heap limit, and scrypt's 128 MiB per run outside that heap.
    const script = `
      import { hashPassword, verifyPassword } from './src/issuer/passwords.ts';
      const encoded = await hashPassword('${PASSWORD}');
      const results = await Promise.all(Array.from({ length: 8 }, () => verifyPassword('${PASSWORD}', encoded)));
      console.log(JSON.stringify({ encoded, results, maxRssKb: process.resourceUsage().maxRSS }));
    `;
    const output = await new Promise<string>((done, fail) => {
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        cwd: ROOT,
        env: { ...process.env, NODE_OPTIONS: IMAGE_NODE_OPTIONS },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', fail);
      child.on('close', (code) => (code === 0 ? done(stdout) : fail(new Error(`exit ${code}: ${stderr}`))));
    });
    const { encoded, results, maxRssKb } = JSON.parse(output) as { encoded: string; results: boolean[]; maxRssKb: number };
    expect(encoded).toMatch(CURRENT);
    expect(results).toEqual(Array(8).fill(true));
    // Two runs of 128 MiB at most, on top of the process itself (about 100 MiB with tsx): eight
    // at once unbounded would hold 1 GiB.
    expect(maxRssKb / 1024).toBeLessThan(2 * 128 + 160);
  }, 120_000);
});

describe('a hash below the current cost', () => {
  let running: RunningTokengate;
  let application: TestApplication;
  const store = new MemoryStore();

  beforeAll(async () => {
    running = await startTokengate('passwords-rehash', { store });
    application = await registerApplication(store, { redirectUri: 'https://app.example/cb' });
  });
  afterAll(async () => {
    await running?.close();
  });

  const path = () => authorizePath({ client_id: application.clientId, redirect_uri: application.redirectUri, response_type: 'code', state: 's' });

  it('is replaced at the next successful sign-in, and the password goes on working; a failed sign-in changes nothing', async () => {
    const legacy = await hashPassword(PASSWORD, { N: 2 ** 15, r: 8, p: 1 });
    await store.users.create({ id: 'user-legacy', email: 'legacy@example.com', passwordHash: legacy, createdAt: Date.now() });

    const browser = new FormClient(running.baseUrl);
    const login = await browser.get(path());
    const failed = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email: 'legacy@example.com', password: 'wrong password' });
    expect(failed.status).toBe(200);
    expect((await store.users.get('user-legacy'))?.passwordHash).toBe(legacy);

    const { location } = await signInAndApprove(new FormClient(running.baseUrl), path(), 'legacy@example.com', PASSWORD);
    expect(location.searchParams.get('code')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const rehashed = (await store.users.get('user-legacy'))!.passwordHash;
    expect(rehashed).toMatch(CURRENT);
    expect(await verifyPassword(PASSWORD, rehashed)).toBe(true);
    // Signing in again finds it current: nothing more to replace.
    await signInAndApprove(new FormClient(running.baseUrl), path(), 'legacy@example.com', PASSWORD);
    expect((await store.users.get('user-legacy'))!.passwordHash).toBe(rehashed);
  }, 120_000);
});
