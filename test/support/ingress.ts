import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { IncomingHttpHeaders, Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTicketingApi } from '../../examples/ticketing-api/server.mjs';
import { rawRequest } from './gateway.js';
import { ROOT } from './markdown.js';
import { acceptsConnections, freePort } from './ports.js';

/** A real ingress (nginx, Caddy) run as the current user, every file in its own temporary directory. */
export interface Ingress {
  readonly port: number;
  /** The process started (nginx's master, Caddy). */
  readonly pid: number;
  /** Its own temporary directory: its config, and every file it writes. */
  readonly dir: string;
  /** What the ingress wrote to its error log or stderr so far. */
  log(): string;
  close(): Promise<void>;
}

/**
 * Requests with one token from a child process (autocannon, 4 connections, 400 a second: in this
 * process it would delay the sidecars' own event loop, which the revocation feed goes through),
 * until stopped; stop() resolves with the count of 2xx answers, other answers and errors.
 */
export function startLoad(url: string, token: string): { stop(): Promise<{ ok: number; other: number; errors: number }> } {
  const script = `
    const instance = require('autocannon')({ url: process.argv[1], connections: 4, overallRate: 400, duration: 600, headers: { authorization: process.argv[2] } },
      (error, result) => process.stdout.write(JSON.stringify({ ok: result['2xx'], other: result.non2xx, errors: result.errors })));
    process.stdin.on('end', () => instance.stop());
    process.stdin.resume();`;
  const child = spawn(process.execPath, ['-e', script, url, `Bearer ${token}`], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'exit');
  return {
    async stop() {
      child.stdin!.end();
      await exited;
      return JSON.parse(output) as { ok: number; other: number; errors: number };
    },
  };
}

/** Whether `program` runs here (`nginx -v`, `caddy version`). */
export function installed(program: string, versionArgument: string): boolean {
  return spawnSync(program, [versionArgument], { stdio: 'ignore' }).status === 0;
}

/** Starts an ingress from the config `configFor` writes for its port, and waits until it accepts connections. */
export async function startIngress(
  label: string,
  configFor: (address: string) => string,
  start: (dir: string, configFile: string) => { command: string; args: string[]; env?: NodeJS.ProcessEnv; errorLog: string | null },
): Promise<Ingress> {
  const dir = mkdtempSync(join(tmpdir(), `tokengate-${label}-`));
  const port = await freePort();
  const configFile = join(dir, 'ingress.conf');
  writeFileSync(configFile, configFor(`127.0.0.1:${port}`));
  const { command, args, env, errorLog } = start(dir, configFile);
  let output = '';
  const child: ChildProcess = spawn(command, args, { cwd: dir, env: env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const log = () => {
    let written = '';
    try {
      if (errorLog !== null) written = readFileSync(errorLog, 'utf8');
    } catch {
      // not written yet
    }
    return output + written;
  };
  const close = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 20_000;
  while (!(await acceptsConnections(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      const written = log();
      await close();
      throw new Error(`${command} did not start (exit code ${child.exitCode}):\n${written}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { port, pid: child.pid!, dir, log, close };
}

/** nginx in the foreground, its prefix (pid file, logs, temp directories) the run's directory. */
export function nginxCommand(dir: string, configFile: string) {
  const errorLog = join(dir, 'error.log');
  return { command: 'nginx', args: ['-p', dir, '-c', configFile, '-e', errorLog, '-g', 'daemon off;'], errorLog };
}

/** Caddy with its config and data directories in the run's directory (nothing in the user's home). */
export function caddyCommand(dir: string, configFile: string) {
  return {
    command: 'caddy',
    args: ['run', '--adapter', 'caddyfile', '--config', configFile],
    env: { ...process.env, HOME: dir, XDG_CONFIG_HOME: join(dir, 'config'), XDG_DATA_HOME: join(dir, 'data') },
    errorLog: null,
  };
}

/** What an API received: the request target as it arrived, and its headers. */
export interface ApiReceived {
  readonly url: string;
  readonly method: string;
  readonly headers: IncomingHttpHeaders;
  readonly rawHeaders: string[];
}

/** One of the example ticketing APIs (examples/ticketing-api) on a free port, recording every request it receives. */
export async function startTicketingApi(api: 'user' | 'organizer'): Promise<{ address: string; received: ApiReceived[]; close(): Promise<void> }> {
  const server: Server = createTicketingApi({ api });
  const received: ApiReceived[] = [];
  server.prependListener('request', (request) =>
    received.push({ url: request.url!, method: request.method!, headers: request.headers, rawHeaders: request.rawHeaders }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** A response as it came over the wire: status, every header (names lower-cased, repeats kept) and the body, de-chunked. */
export interface WireResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: string;
  /** The values of one header, in order. */
  all(name: string): string[];
  /** The one value of a header; null when absent (a repeated header fails the test). */
  header(name: string): string | null;
  json(): unknown;
}

/**
 * Sends one request byte for byte (the target as given, headers as given, repeats and odd
 * spellings included) over a new connection, and reads the whole response.
 */
export async function exchange(
  port: number,
  method: string,
  target: string,
  headers: ReadonlyArray<readonly [string, string]> = [],
  body = '',
): Promise<WireResponse> {
  const head = [`${method} ${target} HTTP/1.1`, 'Host: ingress.test', 'Connection: close', ...headers.map(([name, value]) => `${name}: ${value}`)];
  if (body !== '') head.push(`Content-Length: ${Buffer.byteLength(body)}`);
  return parseResponse(await rawRequest(port, `${head.join('\r\n')}\r\n\r\n${body}`, 15_000));
}

export function parseResponse(raw: string): WireResponse {
  const end = raw.indexOf('\r\n\r\n');
  if (end === -1) throw new Error(`no complete response head: ${JSON.stringify(raw.slice(0, 200))}`);
  const [statusLine, ...lines] = raw.slice(0, end).split('\r\n');
  const headers = lines.map((line): [string, string] => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]);
  let body = raw.slice(end + 4);
  if (headers.some(([name, value]) => name === 'transfer-encoding' && value.toLowerCase() === 'chunked')) body = dechunk(body);
  const all = (name: string) => headers.filter(([each]) => each === name).map(([, value]) => value);
  return {
    status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine!)?.[1] ?? 0),
    headers,
    body,
    all,
    header(name) {
      const values = all(name);
      if (values.length > 1) throw new Error(`${name} is repeated: ${JSON.stringify(values)}`);
      return values[0] ?? null;
    },
    json: () => JSON.parse(body) as unknown,
  };
}

function dechunk(chunked: string): string {
  let body = '';
  let offset = 0;
  for (;;) {
    const lineEnd = chunked.indexOf('\r\n', offset);
    const size = Number.parseInt(chunked.slice(offset, lineEnd), 16);
    if (lineEnd === -1 || Number.isNaN(size) || size === 0) return body;
    body += chunked.slice(lineEnd + 2, lineEnd + 2 + size);
    offset = lineEnd + 2 + size + 2;
  }
}
