import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeServer, rawRequest, startUpstream, statusOf, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { eventually } from './support/wait.js';

/**
 * The forwarder's streaming guarantees, over raw sockets so that nothing normalizes what the
 * gateway sends: large bodies both ways against a reader that stops reading (bounded buffering,
 * then every byte), bodiless answers, Expect: 100-continue, a client that leaves, an upstream
 * that resets or stalls mid-body, and how many header fields a request may carry.
 */

/** Large enough that it cannot sit in the socket buffers between the three processes' sockets (a few MB each on loopback). */
const LARGE = 96 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 'x');

interface BigUpstream {
  server: Server;
  url: string;
  /** Bytes the upstream has written of its large response so far. */
  sent: number;
  /** Bytes of a large request body the upstream has read so far. */
  received: number;
  /** Lets the upstream start reading the request body it holds. */
  releaseReading: () => void;
  /** Requests whose connection closed before the upstream answered. */
  abandoned: number;
}

let big: BigUpstream & { hanging: number };
let echo: Upstream;
let truncating: TruncatingUpstream;
let gateway: RunningTokengate;
let token: string;

beforeAll(async () => {
  big = await startBigUpstream();
  echo = await startUpstream();
  truncating = await startTruncatingUpstream(1_000);
  gateway = await startTokengate('gateway-streaming', {
    config: {
      server: { maxHeaders: 1000 },
      routes: [
        { path: '/big', token: 'user', upstream: big.url, timeoutMs: 30_000 },
        { path: '/stall', token: 'user', upstream: big.url, timeoutMs: 300 },
        { path: '/echo', token: 'user', upstream: echo.url },
        { path: '/truncating', token: 'user', upstream: truncating.url },
      ],
    },
  });
  token = await gateway.issue();
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all([big && closeServer(big.server), echo?.close(), truncating && new Promise((resolve) => truncating.server.close(resolve))]);
});

function head(method: string, path: string, extra = ''): string {
  return `${method} ${path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer ${token}\r\n${extra}\r\n`;
}

/** Resolves when `socket` has received a whole response head; the bytes so far are returned. */
async function readHead(socket: Socket, received: Buffer[]): Promise<string> {
  for (;;) {
    const text = Buffer.concat(received).toString('latin1');
    if (text.includes('\r\n\r\n')) return text;
    await once(socket, 'data');
  }
}

function connectTo(port: number): Promise<{ socket: Socket; received: Buffer[] }> {
  return new Promise((resolve, reject) => {
    const received: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => resolve({ socket, received }));
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.on('error', reject);
  });
}

/** The value stops changing for `quietMs`: whatever produces it has stalled. */
async function settled(read: () => number, quietMs = 400): Promise<number> {
  for (;;) {
    const before = read();
    await new Promise((resolve) => setTimeout(resolve, quietMs));
    if (read() === before) return before;
  }
}

describe('large bodies and slow readers', () => {
  it('pauses a large response while the client does not read, then delivers every byte', async () => {
    const { socket, received } = await connectTo(gateway.port);
    socket.write(head('GET', '/big/download'));
    await readHead(socket, received);
    socket.pause();
    // Backpressure reaches the upstream: it stops well short of the whole body.
    const sentWhilePaused = await settled(() => big.sent);
    expect(sentWhilePaused).toBeLessThan(LARGE / 2);

    let bytes = Buffer.concat(received).length;
    received.length = 0;
    socket.removeAllListeners('data');
    socket.on('data', (chunk: Buffer) => (bytes += chunk.length));
    socket.resume();
    await eventually(() => big.sent === LARGE && bytes >= LARGE, 60_000);
    socket.destroy();
    expect(big.sent).toBe(LARGE);
  }, 90_000);

  it('pushes back on a client sending a large body while the upstream does not read, then delivers every byte', async () => {
    const { socket, received } = await connectTo(gateway.port);
    socket.write(head('POST', '/big/upload', `Content-Type: application/octet-stream\r\nContent-Length: ${LARGE}\r\n`));
    let written = 0;
    let writing = true;
    const writeAll = (async () => {
      while (written < LARGE) {
        const ok = socket.write(CHUNK);
        written += CHUNK.length;
        if (!ok) await once(socket, 'drain');
      }
      writing = false;
    })();
    // The client's writes stall: nothing in between buffers the body without bound.
    const writtenWhileBlocked = await settled(() => written);
    expect(writing).toBe(true);
    expect(writtenWhileBlocked).toBeLessThan(LARGE / 2);

    big.releaseReading();
    await writeAll;
    const answer = await readHead(socket, received);
    socket.destroy();
    expect(statusOf(answer)).toBe(200);
    expect(big.received).toBe(LARGE);
  }, 90_000);
});

describe('bodiless answers', () => {
  it.each([
    ['HEAD', '/echo/anything'],
    ['GET', '/big/no-content'],
    ['GET', '/big/not-modified'],
  ])('relays %s %s without a body, and the connection serves the next request', async (method, path) => {
    const answer = await rawRequest(gateway.port, head(method, path) + head('GET', '/echo/next', 'Connection: close\r\n'), 5_000);
    const responses = answer.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(responses).toHaveLength(2);
    const [first, second] = responses as [string, string];
    expect(first.endsWith('\r\n\r\n')).toBe(true);
    expect(statusOf(second)).toBe(200);
  });
});

describe('Expect: 100-continue', () => {
  it('invites the body only once the token is checked, then forwards it', async () => {
    const { socket, received } = await connectTo(gateway.port);
    socket.write(head('POST', '/echo/upload', 'Content-Type: text/plain\r\nContent-Length: 5\r\nExpect: 100-continue\r\n'));
    const interim = await readHead(socket, received);
    expect(interim).toMatch(/^HTTP\/1\.1 100 Continue\r\n/);
    received.length = 0;
    socket.write('hello');
    const answer = await readHead(socket, received);
    socket.destroy();
    expect(statusOf(answer)).toBe(200);
    expect(echo.received.at(-1)).toMatchObject({ method: 'POST', body: 'hello' });
    expect(echo.received.at(-1)!.headers.expect).toBeUndefined();
  });

  it('refuses a bad token without inviting the body, and closes the connection', async () => {
    const forwarded = echo.received.length;
    const answer = await rawRequest(
      gateway.port,
      'POST /echo/upload HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer not-a-token\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n',
      5_000,
    );
    expect(statusOf(answer)).toBe(401);
    expect(answer).not.toContain('100 Continue');
    expect(answer.toLowerCase()).toContain('connection: close');
    expect(echo.received.length).toBe(forwarded);
  });
});

describe('broken connections', () => {
  it('cancels the upstream request when the client goes away', async () => {
    const abandoned = big.abandoned;
    const { socket } = await connectTo(gateway.port);
    socket.write(head('GET', '/big/hang'));
    await eventually(() => big.hanging > 0);
    socket.destroy();
    await eventually(() => big.abandoned > abandoned, 5_000);
  });

  it('cuts the client response when the upstream resets mid-body, never sending a second status line', async () => {
    const answer = await rawRequest(gateway.port, head('GET', '/big/reset'), 5_000);
    expect(statusOf(answer)).toBe(200);
    expect(answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    expect(answer.length - answer.indexOf('\r\n\r\n') - 4).toBeLessThan(1_000);
  });

  it('cuts the client response when the upstream stops sending its body for longer than the route timeout', async () => {
    const started = Date.now();
    const answer = await rawRequest(gateway.port, head('GET', '/stall/partial'), 10_000);
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(statusOf(answer)).toBe(200);
    expect(answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);
  });
});

describe('header count', () => {
  it('puts the identity headers first, so an upstream that keeps only its first fields still sees them', async () => {
    const padding = Array.from({ length: 995 }, (_, index) => `X-Pad-${index}: ${index}\r\n`).join('');
    const answer = await rawRequest(gateway.port, head('GET', '/truncating/padded', padding), 3_000);
    expect(statusOf(answer)).toBe(200);
    const kept = truncating.kept.at(-1)!;
    // The upstream dropped the last of the ~1,000 fields; the gateway's are not among them.
    expect(kept.has('x-pad-994')).toBe(false);
    expect(Object.fromEntries(['x-auth-user-id', 'x-auth-client-id', 'x-auth-token-kind'].map((name) => [name, kept.get(name)]))).toEqual({
      'x-auth-user-id': 'user-42',
      'x-auth-client-id': 'client-web',
      'x-auth-token-kind': 'user',
    });
  });

  it('refuses more header fields than server.maxHeaders with 431 before any check', async () => {
    const forwarded = echo.received.length;
    const padding = Array.from({ length: 1001 }, (_, index) => `X-Pad-${index}: ${index}\r\n`).join('');
    const answer = await rawRequest(gateway.port, `GET /echo/x HTTP/1.1\r\nHost: gateway\r\n${padding}\r\n`, 3_000);
    expect(statusOf(answer)).toBe(431);
    expect(echo.received.length).toBe(forwarded);
  });
});

/** The upstream of the tests above; each path is one behaviour. */
async function startBigUpstream(): Promise<BigUpstream & { hanging: number }> {
  let release: () => void = () => {};
  const reading = new Promise<void>((resolve) => (release = resolve));
  const state = {
    sent: 0,
    received: 0,
    abandoned: 0,
    hanging: 0,
    releaseReading: () => release(),
  };
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const path = request.url ?? '';
    if (path.endsWith('/download')) return void sendLarge(response, state);
    if (path.endsWith('/upload')) {
      request.pause();
      void reading.then(() => {
        request.on('data', (chunk: Buffer) => (state.received += chunk.length));
        request.on('end', () => response.end('stored'));
        request.resume();
      });
      return;
    }
    if (path.endsWith('/no-content')) return void response.writeHead(204).end();
    if (path.endsWith('/not-modified')) return void response.writeHead(304, { etag: '"v1"' }).end();
    if (path.endsWith('/hang')) {
      state.hanging += 1;
      response.on('close', () => {
        if (!response.writableFinished) state.abandoned += 1;
      });
      return;
    }
    if (path.endsWith('/reset')) {
      response.writeHead(200, { 'content-length': '1000' });
      response.write(Buffer.alloc(100, 'r'));
      setTimeout(() => request.socket.destroy(), 50);
      return;
    }
    if (path.endsWith('/partial')) {
      response.writeHead(200, { 'content-length': '1000' });
      response.write(Buffer.alloc(100, 'p'));
      return;
    }
    response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(state, { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
}

/** Writes LARGE bytes as fast as the connection takes them, and no faster. */
async function sendLarge(response: ServerResponse, state: { sent: number }): Promise<void> {
  state.sent = 0;
  response.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(LARGE) });
  while (state.sent < LARGE) {
    const ok = response.write(CHUNK);
    state.sent += CHUNK.length;
    if (!ok) await once(response, 'drain');
  }
  response.end();
}

interface TruncatingUpstream {
  server: NetServer;
  url: string;
  /** Of each request, the header fields the upstream kept (lower-cased names). */
  kept: Array<Map<string, string>>;
}

/**
 * An upstream that, like many, keeps only the first `limit` header fields of a request and
 * drops the rest (Node's own server refuses such a request with 431 since Node 22).
 */
async function startTruncatingUpstream(limit: number): Promise<TruncatingUpstream> {
  const kept: Array<Map<string, string>> = [];
  const server = createNetServer((socket) => {
    let head = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      head += chunk;
      const end = head.indexOf('\r\n\r\n');
      if (end === -1) return;
      const fields = head
        .slice(0, end)
        .split('\r\n')
        .slice(1, limit + 1);
      kept.push(new Map(fields.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()])));
      socket.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, kept, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}
