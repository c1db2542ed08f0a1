#!/usr/bin/env node
// @ts-check
/**
 * `npm run demo`: tokengate on its embedded default (config/tokengate.yaml: memory store,
 * listeners on the loopback) as `tokengate serve` runs it, with what it guards and what uses
 * it: the example user API on :3001 and organizer API on :3002 (where that config's routes
 * point), and the demo application on http://localhost:3000. Ctrl-C stops them all.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createTicketingApi } from '../ticketing-api/server.mjs';
import { createDemoApp } from './demo-app.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '../..');
const CONFIG = 'config/tokengate.yaml';
const DEMO_HOST = '127.0.0.1';
const DEMO_PORT = 3000;
const CALLBACK_URL = `http://localhost:${DEMO_PORT}/callback`;
const APIS = /** @type {const} */ ([
  { api: 'user', port: 3001, name: 'user API' },
  { api: 'organizer', port: 3002, name: 'organizer API' },
]);

/** @param {string} line */
const say = (line) => process.stdout.write(`demo: ${line}\n`);

/**
 * @param {import('node:http').Server} server
 * @param {number} port
 * @param {string} what
 */
async function listen(server, port, what) {
  server.listen(port, DEMO_HOST);
  try {
    await once(server, 'listening');
  } catch (error) {
    const code = /** @type {NodeJS.ErrnoException} */ (error).code;
    throw new Error(
      code === 'EADDRINUSE'
        ? `port ${port} (${what}) is already in use: stop what listens there and run npm run demo again`
        : `${what} cannot listen on ${DEMO_HOST}:${port}: ${/** @type {Error} */ (error).message}`,
      { cause: error },
    );
  }
}

/**
 * Starts `tokengate serve` and resolves with its listeners once it logs that it listens, and
 * with the admin token: TOKENGATE_ADMIN_TOKEN when set, or the one tokengate keeps in the file
 * it logs (`adminTokenFile`). Its log lines (JSON) pass through to this terminal.
 * @returns {Promise<{ child: import('node:child_process').ChildProcess, publicUrl: string, opsUrl: string, issuerUrl: string, adminToken: string }>}
 */
function startTokengate() {
  const child = spawn(process.execPath, [join(ROOT, 'dist/main.js'), 'serve', '--config', CONFIG], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  let adminToken = process.env.TOKENGATE_ADMIN_TOKEN ?? '';
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: /** @type {import('node:stream').Readable} */ (child.stdout) });
    lines.on('line', (line) => {
      process.stdout.write(`${line}\n`);
      if (line.includes('"adminTokenFile"')) adminToken = readFileSync(JSON.parse(line).adminTokenFile, 'utf8').trim();
      if (!line.includes('"tokengate listening"')) return;
      const { publicUrl, opsUrl, issuerUrl } = JSON.parse(line);
      resolve({ child, publicUrl, opsUrl, issuerUrl, adminToken });
    });
    child.once('exit', (code) => reject(new Error(`tokengate serve exited with status ${code} before it listened (its message is above)`)));
  });
}

async function main() {
  /** @type {import('node:http').Server[]} */
  const servers = [];
  /** @type {import('node:child_process').ChildProcess | undefined} */
  let tokengate;
  const stop = async () => {
    tokengate?.kill('SIGTERM');
    for (const server of servers) server.closeAllConnections();
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    if (tokengate !== undefined && tokengate.exitCode === null) await once(tokengate, 'exit');
  };
  for (const signal of /** @type {const} */ (['SIGINT', 'SIGTERM'])) {
    process.once(signal, () => {
      say('stopping');
      void stop().then(() => process.exit(0));
    });
  }
  try {
    for (const { api, port, name } of APIS) {
      const server = createTicketingApi({ api, log: (line) => say(`${name}: ${line}`) });
      servers.push(server);
      await listen(server, port, `the example ${name}`);
    }
    const started = await startTokengate();
    tokengate = started.child;
    tokengate.once('exit', (code) => {
      if (code !== 0) say(`tokengate serve exited with status ${code}`);
      void stop().then(() => process.exit(code ?? 1));
    });
    const demo = createDemoApp({
      callbackUrl: CALLBACK_URL,
      publicUrl: started.publicUrl,
      opsUrl: started.opsUrl,
      adminToken: started.adminToken,
    });
    servers.push(demo);
    await listen(demo, DEMO_PORT, 'the demo application');
    /** @type {Array<[string, string]>} */
    const rows = [
      ['tokengate', `${started.issuerUrl} (issuer and gateway), ops listener ${started.opsUrl}`],
      ...APIS.map(({ port, name }) => /** @type {[string, string]} */ ([`example ${name}`, `http://${DEMO_HOST}:${port} (reached through tokengate)`])),
      ['demo application', `http://localhost:${DEMO_PORT}`],
    ];
    say('tokengate demo is running');
    for (const [what, where] of rows) say(`  ${what.padEnd(22)} ${where}`);
    say('Next steps: README.md, Quick start. Ctrl-C stops everything.');
  } catch (error) {
    process.stderr.write(`demo: ${/** @type {Error} */ (error).message}\n`);
    await stop();
    process.exit(1);
  }
}

await main();
