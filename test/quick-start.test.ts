import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeBlocks, readDocument, sectionOf, shellCommands } from './support/markdown.js';
import { acceptsConnections } from './support/ports.js';
import { copyRepository } from './support/repository.js';
import { eventually } from './support/wait.js';

/**
 * The README's Quick start, run as written on a fresh copy of the repository (no node_modules,
 * no dist): every command of its shell blocks in order, in bash with `set -euo pipefail` (an
 * unset variable fails), `npm run demo` in the background; then its browser step in headless
 * Chromium, and the issuer page's client_credentials walkthrough against the same demo. The
 * demo listens on its documented ports (3000-3002, 8080, 9090), so they must be free.
 */

const README = readDocument('README.md');
const QUICK_START = sectionOf(README, '## Quick start');
const COMMANDS = codeBlocks(QUICK_START, 'sh').flatMap(shellCommands);
const DEMO_COMMAND = 'npm run demo';
const DEMO_PORTS = [3000, 3001, 3002, 8080, 9090];
const CHROMIUM = process.env.TOKENGATE_TEST_CHROMIUM ?? '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];

/**
 * A shell with nothing of the test's environment but what a user's terminal has, and a state
 * directory of its own (XDG_STATE_HOME), where tokengate keeps the admin token it makes and the
 * CLI finds it, instead of the tester's home. A terminal of this machine also has its way to the
 * npm registry (a CA to trust, a proxy): without it `npm ci` retries the registry for minutes
 * before it falls back to its cache (seen: 170 s instead of 20).
 */
const STATE_HOME = mkdtempSync(join(tmpdir(), 'tokengate-quick-start-state-'));
const NETWORK_SETTINGS = ['NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE', 'HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'NO_PROXY', 'no_proxy'];
const SHELL_ENV = {
  ...Object.fromEntries(NETWORK_SETTINGS.flatMap((name) => (process.env[name] === undefined ? [] : [[name, process.env[name]!]]))),
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: process.env.HOME ?? tmpdir(),
  LANG: 'C.UTF-8',
  XDG_STATE_HOME: STATE_HOME,
};
const ADMIN_TOKEN_FILE = join(STATE_HOME, 'tokengate', 'admin-token');

/**
 * Runs commands one after the other in one bash, as a user types them in one terminal, and
 * returns what each printed (stdout), in order.
 */
function runCommands(commands: string[], cwd: string, timeoutMs = 240_000): Promise<string[]> {
  const marker = '@@quick-start-command-done@@';
  const script = commands.map((command) => `${command}\nprintf '\\n%s\\n' '${marker}'`).join('\n');
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd, env: SHELL_ENV, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('close', (code) => {
      clearTimeout(timer);
      const outputs = stdout.split(`\n${marker}\n`);
      if (code === 0) resolve(outputs.slice(0, commands.length));
      else reject(new Error(`exit status ${code} at: ${commands[outputs.length - 1]}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
}

interface Demo {
  child: ChildProcess;
  output(): string;
}

/** Starts `npm run demo` in its own process group and resolves once it says it runs. */
async function startDemo(cwd: string): Promise<Demo> {
  const child = spawn('bash', ['-c', DEMO_COMMAND], { cwd, env: SHELL_ENV, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<never>((_resolve, reject) => child.once('exit', (code) => reject(new Error(`${DEMO_COMMAND} exited with ${code}:\n${output}`))));
  await Promise.race([eventually(() => output.includes('demo: tokengate demo is running'), 120_000), exited]);
  return { child, output: () => output };
}

/** Stops the demo as Ctrl-C in its terminal would (SIGINT to its process group) and waits until its ports are free. */
async function stopDemo(demo: Demo): Promise<void> {
  if (demo.child.exitCode === null) {
    const exited = new Promise((resolve) => demo.child.once('exit', resolve));
    process.kill(-demo.child.pid!, 'SIGINT');
    await exited;
  }
  await eventually(async () => !(await Promise.all(DEMO_PORTS.map(acceptsConnections))).some(Boolean), 15_000);
}

/** The JSON a command printed. */
const json = (output: string | undefined) =>
  JSON.parse(output ?? '') as Record<string, unknown> & { received: { identity: Record<string, unknown>; headers: Record<string, string> } };

describe('README: Quick start', () => {
  let fresh: string;
  let demo: Demo | undefined;
  let browser: Browser | undefined;
  let outputs: string[];

  beforeAll(async () => {
    const busy = (await Promise.all(DEMO_PORTS.map(async (port) => ((await acceptsConnections(port)) ? port : null)))).filter((port) => port !== null);
    if (busy.length > 0)
      throw new Error(`the Quick start listens on ports ${DEMO_PORTS.join(', ')}, and ${busy.join(', ')} answer already: stop what listens there`);
    fresh = copyRepository('quick-start');
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (demo !== undefined) await stopDemo(demo);
    if (fresh !== undefined) rmSync(fresh, { recursive: true, force: true });
    rmSync(STATE_HOME, { recursive: true, force: true });
  }, 60_000);

  it('has only commands this test runs, and npm test (which CI runs)', () => {
    expect(COMMANDS[0]).toBe('npm ci');
    expect(COMMANDS).toContain(DEMO_COMMAND);
    const elsewhere = codeBlocks(README, 'sh')
      .flatMap(shellCommands)
      .filter((command) => !COMMANDS.includes(command));
    expect(elsewhere).toEqual(['npm test']);
  });

  it('runs as written on a fresh copy: the demo starts, an application token reaches the organizer API, a user and a public application are created', async () => {
    const demoAt = COMMANDS.indexOf(DEMO_COMMAND);
    await runCommands(COMMANDS.slice(0, demoAt), fresh);
    demo = await startDemo(fresh);
    outputs = await runCommands(COMMANDS.slice(demoAt + 1), fresh);

    // The admin API asked the CLI for the token tokengate made at its start, kept where only its user reads it.
    expect((await fetch('http://127.0.0.1:9090/admin/applications')).status).toBe(401);
    expect(statSync(ADMIN_TOKEN_FILE).mode & 0o777).toBe(0o600);
    expect(statSync(join(STATE_HOME, 'tokengate')).mode & 0o777).toBe(0o700);
    const adminToken = readFileSync(ADMIN_TOKEN_FILE, 'utf8').trim();
    const listed = await fetch('http://127.0.0.1:9090/admin/applications', { headers: { authorization: `Bearer ${adminToken}` } });
    const registered = (await listed.json()) as {
      applications: Array<{ client_id: string; name: string; confidential: boolean }>;
    };
    const boxOffice = registered.applications.find((application) => application.name === 'Box office')!;
    expect(boxOffice.confidential).toBe(true);
    const events = json(outputs.find((output) => output.includes('"events"')));
    expect(events.events).toEqual([]);
    expect(events.received.identity).toEqual({ user_id: null, client_id: boxOffice.client_id, scopes: ['public'], token_kind: 'application' });
    expect(events.received.headers.authorization).toBeUndefined();

    expect(outputs.join('')).toMatch(/^Created user ana@example\.com\nid: [0-9a-f-]{36}$/m);
    expect(registered.applications.find((application) => application.name === 'Fan app')?.confidential).toBe(false);
  }, 360_000);

  it('signs in through the demo page in a browser, and /api/public/me answers the user token', async () => {
    expect(outputs, 'the commands ran').toBeDefined();
    const [, password, email] = /^printf '%s' '([^']+)' \| npx tokengate users create --email (\S+) --password-stdin$/m.exec(QUICK_START)!;
    const userId = /^id: (\S+)$/m.exec(outputs.join(''))![1];
    const demoUrl = /^Open (http:\/\/localhost:\d+), choose \*\*(.+?)\*\*/m.exec(QUICK_START)!;
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage();
    await page.goto(demoUrl[1]!);
    await page.getByRole('link', { name: demoUrl[2]! }).click();
    await page.getByLabel('E-mail address').fill(email!);
    await page.getByLabel('Password').fill(password!);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.waitForURL((url) => url.href.startsWith(`${demoUrl[1]}/callback?`));

    expect(await page.locator('#code').textContent()).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await page.locator('#token-status').textContent()).toBe('200');
    expect(JSON.parse((await page.locator('#token-response').textContent())!)).toMatchObject({
      token_type: 'Bearer',
      scope: 'public',
      refresh_token: '(received; not shown)',
    });
    expect(await page.locator('#me-status').textContent()).toBe('200');
    const me = json((await page.locator('#me-response').textContent())!);
    expect(me).toMatchObject({ user_id: userId, scopes: ['public'] });
    expect(me.received.identity).toMatchObject({ user_id: userId, token_kind: 'user' });
    expect(me.received.headers.authorization).toBeUndefined();
  }, 120_000);

  it("serves the issuer page's client_credentials walkthrough as written", async () => {
    expect(outputs, 'the commands ran').toBeDefined();
    const walkthrough = codeBlocks(sectionOf(readDocument('docs/issuer.md'), '## Walkthrough: client_credentials with curl'), 'sh').flatMap(shellCommands);
    expect(walkthrough.length).toBeGreaterThan(5);
    const printed = await runCommands(walkthrough, fresh);
    const said = printed.map((output) => output.trim()).filter(Boolean);
    expect(JSON.parse(said[0]!)).toMatchObject({ token_type: 'Bearer', expires_in: 7200, scope: 'public' });
    expect(JSON.parse(said[1]!)).toMatchObject({ resource_owner_id: null, scope: ['public'] });
    expect(json(said[2]).received.identity).toMatchObject({ token_kind: 'application' });
    expect(said.at(-1)).toBe('{"active":false}');
  }, 120_000);
});
