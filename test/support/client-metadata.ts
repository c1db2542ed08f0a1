import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import dns2 from 'dns2';
import { s256CodeChallenge } from '../../src/issuer/pkce.js';
import type { RunningTokengate } from './instance.js';
import { FormClient, authorizePath } from './issuer.js';

/**
 * What the client ID metadata tests run against: a test certificate authority made with
 * openssl (the TLS tests of the store use it too), an https server on the loopback serving documents under it, and a DNS server that
 * answers the names the tests choose with the addresses they choose (tokengate's fetcher is
 * pointed at it by `clientMetadataDocuments.nameServers`, so names resolve through the real
 * lookup path, the check included).
 */

export interface TestCa {
  /** Directory of the files below; removed by remove(). */
  readonly dir: string;
  /** The CA certificate (PEM file): what tokengate's `caFile` names. */
  readonly caFile: string;
  readonly key: Buffer;
  readonly cert: Buffer;
  remove(): void;
}

/** A CA and one server certificate (`server.pem`, `server.key` in `dir`) for `names` (DNS names) and 127.0.0.1, valid for a day. */
export function createTestCa(names: string[]): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-cimd-ca-'));
  const file = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(
    'req',
    '-x509',
    ...ec,
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-days',
    '1',
    '-subj',
    '/CN=tokengate test CA',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign',
  );
  openssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${names[0] ?? 'localhost'}`);
  writeFileSync(file('server.ext'), `subjectAltName=${[...names.map((name) => `DNS:${name}`), 'IP:127.0.0.1'].join(',')}\nextendedKeyUsage=serverAuth\n`);
  openssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '1',
    '-extfile',
    'server.ext',
  );
  return {
    dir,
    caFile: file('ca.pem'),
    key: readFileSync(file('server.key')),
    cert: readFileSync(file('server.pem')),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export type DocumentHandler = (request: IncomingMessage, response: ServerResponse) => void;

/** An https server of documents: a handler per path, every request and connection counted. */
export interface DocumentServer {
  readonly port: number;
  /** Requests by path. */
  readonly requests: Map<string, number>;
  /** When each request of a path arrived (epoch ms). */
  readonly arrivals: Map<string, number[]>;
  /** TCP connections accepted, in all. */
  connections: number;
  route(path: string, handler: DocumentHandler): void;
  /** Serves `document` as JSON at `path`, with the given headers (Cache-Control...). */
  serveJson(path: string, document: unknown, headers?: Record<string, string>): void;
  requestsOf(path: string): number;
  close(): Promise<void>;
}

export async function startDocumentServer(ca: TestCa, host = '127.0.0.1'): Promise<DocumentServer> {
  const routes = new Map<string, DocumentHandler>();
  const requests = new Map<string, number>();
  const arrivals = new Map<string, number[]>();
  const sockets = new Set<Socket>();
  const server: Server = createServer({ key: ca.key, cert: ca.cert }, (request, response) => {
    const path = new URL(request.url ?? '/', 'https://documents').pathname;
    requests.set(path, (requests.get(path) ?? 0) + 1);
    arrivals.set(path, [...(arrivals.get(path) ?? []), Date.now()]);
    const handler = routes.get(path);
    if (handler === undefined) response.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    else handler(request, response);
  });
  const state: DocumentServer = {
    port: 0,
    requests,
    arrivals,
    connections: 0,
    route: (path, handler) => void routes.set(path, handler),
    serveJson(path, document, headers = {}) {
      routes.set(path, (_request, response) => response.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(document)));
    },
    requestsOf: (path) => requests.get(path) ?? 0,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  server.on('connection', (socket: Socket) => {
    state.connections += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  (state as { port: number }).port = (server.address() as AddressInfo).port;
  return state;
}

/** A DNS server on the loopback: each name answers the A records it is given; every question is recorded. */
export interface TestDns {
  /** `127.0.0.1:port`, for `clientMetadataDocuments.nameServers`. */
  readonly address: string;
  readonly questions: string[];
  set(name: string, addresses: string[]): void;
  close(): Promise<void>;
}

export async function startTestDns(records: Record<string, string[]> = {}): Promise<TestDns> {
  const answers = new Map(Object.entries(records));
  const questions: string[] = [];
  const server = dns2.createUDPServer((request, send) => {
    const response = dns2.Packet.createResponseFromRequest(request);
    const question = request.questions[0];
    if (question !== undefined) {
      questions.push(`${question.name} ${dns2.Packet.TYPE_NAME[question.type] ?? question.type}`);
      if (question.type === dns2.Packet.TYPE.A)
        for (const address of answers.get(question.name.toLowerCase()) ?? [])
          response.answers.push(dns2.Packet.createResourceFromQuestion(question, { ttl: 1, address }));
    }
    void send(response);
  });
  await server.listen(0, '127.0.0.1');
  return {
    address: `127.0.0.1:${server.address().port}`,
    questions,
    set: (name, addresses) => void answers.set(name.toLowerCase(), addresses),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A client ID metadata document as a public MCP client publishes it. */
export function clientDocument(clientId: string, redirectUris: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    client_id: clientId,
    client_name: 'Ticket Assistant',
    redirect_uris: redirectUris,
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...extra,
  };
}

/** An authorization request of a public client with PKCE (S256). */
export function authorizeFor(clientId: string, redirectUri: string, verifier = randomBytes(32).toString('base64url')): string {
  return authorizePath({
    client_id: clientId,
    redirect_uri: redirectUri,
    response_type: 'code',
    state: 'xyz',
    code_challenge: s256CodeChallenge(verifier),
    code_challenge_method: 'S256',
  });
}

/** What the authorization page answers for a client id: its status, title and text, and where it would send the browser. */
export async function authorizationPage(running: RunningTokengate, clientId: string, redirectUri = 'https://assistant.test/callback') {
  const response = await new FormClient(running.baseUrl).get(authorizeFor(clientId, redirectUri));
  return { status: response.status, location: response.location, title: /<h1 id="title">([^<]*)<\/h1>/.exec(response.text)?.[1], text: response.text };
}
