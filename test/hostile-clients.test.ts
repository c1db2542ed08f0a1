import { randomUUID } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressKey } from '../src/http/client-address.js';
import { timeoutCheckIntervalMs } from '../src/listeners/guard.js';
import { loggerOptions } from '../src/observability/logger.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, TEST_ADMIN_TOKEN, type RunningTokengate } from './support/instance.js';
import { valueOf } from './support/metrics.js';
import { eventually, sleep } from './support/wait.js';

/**
 * Clients that hold sockets, send slowly, pipeline garbage behind a valid request or ask for a
 * tunnel, on both listeners, over raw sockets (a client library would normalize what they send).
 * Every one gets a 4xx with the JSON error body or a bounded close, and none makes tokengate log
 * an error or answer a 5xx of its own.
 */

const REQUEST_TIMEOUT_MS = 1_000;
/** Room for a loaded machine: the tests assert the bound holds, never how precisely. */
const LOAD_MARGIN_MS = 4_000;
const TIMEOUT_BOUND_MS = REQUEST_TIMEOUT_MS + timeoutCheckIntervalMs(REQUEST_TIMEOUT_MS) + LOAD_MARGIN_MS;

const logLines: Array<{ level: number; msg: string }> = [];
const errorLines = () => logLines.filter((line) => line.level >= 50);
const logSink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString().split('\n').filter(Boolean)) logLines.push(JSON.parse(line) as { level: number; msg: string });
    done();
  },
});

let upstream: Upstream;
let gateway: RunningTokengate;
let token: string;

beforeAll(async () => {
  // Answers after ?delay= milliseconds, with the URL it received.
  upstream = await startUpstream((_request, response, received) => {
    const delay = Number(new URL(received.url, 'http://upstream.test').searchParams.get('delay') ?? 0);
    setTimeout(() => {
      response.setHeader('content-type', 'application/json');
      response.end(JSON.stringify({ url: received.url }));
    }, delay).unref();
  });
  gateway = await startTokengate('hostile-clients', {
    logger: pino(loggerOptions('info'), logSink),
    config: {
      server: { requestTimeoutMs: REQUEST_TIMEOUT_MS },
      admin: { requestTimeoutMs: REQUEST_TIMEOUT_MS },
      routes: [{ path: '/api/public/tickets', token: 'user', upstream: upstream.url }],
    },
    beforeListen(tokengate) {
      // An answer written straight to node's response after hijack(), in two parts, as a forwarder may write one.
      tokengate.app.get('/test/raw-answer', (_request, reply) => {
        reply.hijack();
        setTimeout(() => {
          reply.raw.writeHead(200, { 'content-type': 'text/plain' });
          reply.raw.write('first part, ');
          setTimeout(() => reply.raw.end('second part'), 200).unref();
        }, 200).unref();
      });
    },
  });
  token = await gateway.issue();
});

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
});

const opsPort = () => Number(new URL(gateway.opsUrl).port);
const portOf = (listener: 'public' | 'ops') => (listener === 'public' ? gateway.port : opsPort());

interface Connection {
  readonly socket: Socket;
  /** What the server has sent so far. */
  received(): string;
  /** Resolves when the connection has closed: everything the server sent, and the time since connecting. */
  readonly closed: Promise<{ answer: string; elapsedMs: number }>;
}

/** A raw TCP connection to a listener, from `localAddress` (any 127.x address reaches the loopback). */
function open(port: number, localAddress = '127.0.0.1'): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    const chunks: Buffer[] = [];
    const received = () => Buffer.concat(chunks).toString('latin1');
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    // A reset shows as a missing or cut answer in the assertions.
    socket.on('error', () => {});
    const closed = new Promise<{ answer: string; elapsedMs: number }>((done) =>
      socket.on('close', () => done({ answer: received(), elapsedMs: Date.now() - started })),
    );
    socket.once('connect', () => resolve({ socket, received, closed }));
    socket.once('error', reject);
    // Never leave a socket behind a failed assertion.
    setTimeout(() => socket.destroy(), 30_000).unref();
  });
}

/** Sends `text` one character every `everyMs`, then an `a` every `everyMs`, until the server closes: busy, never done. */
function drip(connection: Connection, text: string, everyMs = 100): void {
  let index = 0;
  const timer = setInterval(() => {
    if (connection.socket.destroyed) clearInterval(timer);
    else connection.socket.write(index < text.length ? text[index++]! : 'a');
  }, everyMs);
  connection.socket.once('close', () => clearInterval(timer));
}

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Splits a raw byte stream into the HTTP/1.1 responses it holds (Content-Length or chunked bodies); `rest` is what is left, a cut response. */
function parseResponses(text: string): { responses: RawResponse[]; rest: string } {
  const responses: RawResponse[] = [];
  let rest = text;
  for (;;) {
    const headEnd = rest.indexOf('\r\n\r\n');
    if (headEnd === -1) return { responses, rest };
    const [statusLine, ...lines] = rest.slice(0, headEnd).split('\r\n');
    const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(statusLine!)?.[1] ?? NaN);
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    let body = '';
    let next = rest.slice(headEnd + 4);
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const sizeEnd = next.indexOf('\r\n');
        if (sizeEnd === -1) return { responses, rest };
        const size = parseInt(next.slice(0, sizeEnd), 16);
        if (next.length < sizeEnd + 2 + size + 2) return { responses, rest };
        body += next.slice(sizeEnd + 2, sizeEnd + 2 + size);
        next = next.slice(sizeEnd + 2 + size + 2);
        if (size === 0) break;
      }
    } else {
      const length = Number(headers['content-length'] ?? 0);
      if (next.length < length) return { responses, rest };
      body = next.slice(0, length);
      next = next.slice(length);
    }
    responses.push({ status, headers, body });
    rest = next;
  }
}

/** The responses of a closed connection; every byte must belong to a whole response. */
async function answersOf(connection: Connection): Promise<{ responses: RawResponse[]; elapsedMs: number }> {
  const { answer, elapsedMs } = await connection.closed;
  const { responses, rest } = parseResponses(answer);
  expect(rest, 'bytes after the last whole response').toBe('');
  return { responses, elapsedMs };
}

/** Sends `text` on a kept-alive connection and waits until `count` responses have arrived in all. */
async function ask(connection: Connection, text: string, count: number): Promise<RawResponse> {
  connection.socket.write(text);
  await eventually(() => parseResponses(connection.received()).responses.length >= count, 10_000);
  return parseResponses(connection.received()).responses[count - 1]!;
}

const jsonBody = (response: RawResponse) => JSON.parse(response.body) as unknown;
const TIMED_OUT = { error: 'invalid_request', error_description: 'The request was not received in time.' };
const MALFORMED = 'NOT HTTP AT ALL\r\n\r\n';
const ticketRequest = (query: string) => `GET /api/public/tickets?${query} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${token}\r\n\r\n`;
const upstreamSaw = (id: string) => upstream.received.filter((entry) => entry.url.includes(id)).length;

describe('a request must arrive whole within requestTimeoutMs, on both listeners', () => {
  const body = (head: string) => `${head}Content-Length: 10000\r\n\r\n`;
  const cases: Array<{ name: string; listener: 'public' | 'ops'; sent?: () => string; dripped?: () => string }> = [
    { name: 'a connection that sends nothing', listener: 'public' },
    { name: 'a connection that sends nothing', listener: 'ops' },
    { name: 'a head sent a byte at a time', listener: 'public', dripped: () => 'GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nX-Slow: ' },
    { name: 'a head sent a byte at a time', listener: 'ops', dripped: () => 'GET /healthz HTTP/1.1\r\nHost: ops.test\r\nX-Slow: ' },
    {
      name: 'a form body the gateway reads for its token, a byte at a time',
      listener: 'public',
      sent: () => body('POST /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: application/x-www-form-urlencoded\r\n'),
      dripped: () => 'access_token=',
    },
    {
      name: 'a body streamed to the upstream, a byte at a time',
      listener: 'public',
      sent: () =>
        body(
          `POST /api/public/tickets?id=streamed-slowly HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/octet-stream\r\n`,
        ),
    },
    {
      name: 'a /oauth/token body, a byte at a time',
      listener: 'public',
      sent: () => body('POST /oauth/token HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: application/x-www-form-urlencoded\r\n'),
      dripped: () => 'grant_type=client_credentials&scope=',
    },
    {
      name: 'a POST /healthz body, a byte at a time',
      listener: 'ops',
      sent: () => body('POST /healthz HTTP/1.1\r\nHost: ops.test\r\nContent-Type: application/json\r\n'),
      dripped: () => '{"a":"',
    },
    {
      name: 'an admin API body, a byte at a time',
      listener: 'ops',
      // Addressed and authorized as the admin API takes it: the body is read only then.
      sent: () =>
        body(`POST /admin/applications HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TEST_ADMIN_TOKEN}\r\nContent-Type: application/json\r\n`),
      dripped: () => '{"name":"',
    },
  ];

  for (const { name, listener, sent, dripped } of cases) {
    it.concurrent(`answers 408 and closes within the bound: ${name} (${listener} listener)`, async () => {
      const connection = await open(portOf(listener));
      if (sent !== undefined) connection.socket.write(sent());
      if (sent !== undefined || dripped !== undefined) drip(connection, dripped?.() ?? '');
      const { responses, elapsedMs } = await answersOf(connection);
      expect(responses.map((response) => response.status)).toEqual([408]);
      expect(jsonBody(responses[0]!)).toEqual(TIMED_OUT);
      expect(responses[0]!.headers['cache-control']).toBe('no-store');
      expect(elapsedMs).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50);
      expect(elapsedMs).toBeLessThan(TIMEOUT_BOUND_MS);
    });
  }

  it('never hands the upstream a request whose body timed out', async () => {
    await eventually(
      async () => (await valueOf(gateway.tokengate.context.metrics.clientErrors, { listener: 'public', reason: 'request_timeout' })) >= 5,
      15_000,
    );
    expect(upstreamSaw('streamed-slowly')).toBe(0);
    expect(await valueOf(gateway.tokengate.context.metrics.clientErrors, { listener: 'ops', reason: 'request_timeout' })).toBeGreaterThanOrEqual(4);
    expect(errorLines()).toEqual([]);
  });
});

describe('pipelining: an answer of its own for each whole request, in order, before any error answer', () => {
  it('delivers the answer of a slow upstream, then 400 for the malformed request behind it', async () => {
    const id = randomUUID();
    const connection = await open(gateway.port);
    connection.socket.write(ticketRequest(`delay=400&id=${id}`) + MALFORMED);
    const { responses } = await answersOf(connection);
    expect(responses.map((response) => response.status)).toEqual([200, 400]);
    expect(jsonBody(responses[0]!)).toEqual({ url: `/api/public/tickets?delay=400&id=${id}` });
    expect(jsonBody(responses[1]!)).toEqual({ error: 'invalid_request', error_description: expect.any(String) });
    expect(upstreamSaw(id)).toBe(1);
  });

  it('delivers an answer written straight to the response after hijack(), whole, then the 400', async () => {
    const connection = await open(gateway.port);
    connection.socket.write(`GET /test/raw-answer HTTP/1.1\r\nHost: gateway.test\r\n\r\n${MALFORMED}`);
    const { responses } = await answersOf(connection);
    expect(responses.map((response) => response.status)).toEqual([200, 400]);
    expect(responses[0]!.body).toBe('first part, second part');
  });

  it('answers every whole request before the malformed one, each in its turn', async () => {
    const [slow, fast] = [randomUUID(), randomUUID()];
    const connection = await open(gateway.port);
    connection.socket.write(ticketRequest(`delay=300&id=${slow}`) + ticketRequest(`id=${fast}`) + MALFORMED);
    const { responses } = await answersOf(connection);
    expect(responses.map((response) => response.status)).toEqual([200, 200, 400]);
    expect(jsonBody(responses[0]!)).toEqual({ url: `/api/public/tickets?delay=300&id=${slow}` });
    expect(jsonBody(responses[1]!)).toEqual({ url: `/api/public/tickets?id=${fast}` });
  });

  it('answers the ops listener in order too', async () => {
    const connection = await open(opsPort());
    connection.socket.write(`GET /healthz HTTP/1.1\r\nHost: ops.test\r\n\r\n${MALFORMED}`);
    const { responses } = await answersOf(connection);
    expect(responses.map((response) => response.status)).toEqual([200, 400]);
    expect(jsonBody(responses[0]!)).toEqual({ status: 'ok' });
  });

  it('answers a CONNECT behind a slow request with 405 after that request’s answer', async () => {
    const id = randomUUID();
    const connection = await open(gateway.port);
    connection.socket.write(`${ticketRequest(`delay=300&id=${id}`)}CONNECT upstream.test:443 HTTP/1.1\r\nHost: upstream.test:443\r\n\r\n`);
    const { responses } = await answersOf(connection);
    expect(responses.map((response) => response.status)).toEqual([200, 405]);
    expect(jsonBody(responses[0]!)).toEqual({ url: `/api/public/tickets?delay=300&id=${id}` });
  });

  it('handles a WebSocket upgrade behind a slow request once that request is answered', async () => {
    const [slow, upgrade] = [randomUUID(), randomUUID()];
    const connection = await open(gateway.port);
    connection.socket.write(
      ticketRequest(`delay=300&id=${slow}`) +
        `GET /api/public/tickets?id=${upgrade} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${token}\r\n` +
        'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
    const { responses } = await answersOf(connection);
    // The upstream is no WebSocket server: it answers the upgrade as a plain request, and the gateway relays that.
    expect(responses.map((response) => response.status)).toEqual([200, 200]);
    expect(jsonBody(responses[0]!)).toEqual({ url: `/api/public/tickets?delay=300&id=${slow}` });
    expect(jsonBody(responses[1]!)).toEqual({ url: `/api/public/tickets?id=${upgrade}` });
  });

  it('survives a client that resets its connection while its pipelined upgrade waits, and aborts the request in progress', async () => {
    const slow = randomUUID();
    const connection = await open(gateway.port);
    connection.socket.write(
      ticketRequest(`delay=300&id=${slow}`) +
        `GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${token}\r\n` +
        'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
    await eventually(() => upstreamSaw(slow) === 1);
    connection.socket.resetAndDestroy();
    // Past the upstream's answer to the request in progress (300 ms after it arrived), which must
    // meet a request aborted like any whose client left, not a response nobody closed: no error.
    await sleep(1_000);
    expect(errorLines()).toEqual([]);
    expect((await fetch(`${gateway.baseUrl}/.well-known/oauth-authorization-server`)).status).toBe(200);
  });

  it('times out a head that never ends behind a slow request, and answers 408 after that request’s answer', async () => {
    const id = randomUUID();
    const delay = REQUEST_TIMEOUT_MS + 500;
    const connection = await open(gateway.port);
    connection.socket.write(`${ticketRequest(`delay=${delay}&id=${id}`)}GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\n`);
    const { responses, elapsedMs } = await answersOf(connection);
    expect(responses.map((response) => response.status)).toEqual([200, 408]);
    expect(jsonBody(responses[0]!)).toEqual({ url: `/api/public/tickets?delay=${delay}&id=${id}` });
    expect(jsonBody(responses[1]!)).toEqual(TIMED_OUT);
    expect(elapsedMs).toBeLessThan(delay + TIMEOUT_BOUND_MS);
    expect(errorLines()).toEqual([]);
  });
});

describe('CONNECT', () => {
  for (const [listener, allow] of [
    ['public', 'GET, HEAD, POST, PUT, PATCH, DELETE'],
    ['ops', 'GET, HEAD, POST, DELETE'],
  ] as const) {
    it(`is answered 405 with Allow and the JSON error body on the ${listener} listener, then the connection closes`, async () => {
      const before = await valueOf(gateway.tokengate.context.metrics.clientErrors, { listener, reason: 'connect' });
      const connection = await open(portOf(listener));
      connection.socket.write('CONNECT upstream.test:443 HTTP/1.1\r\nHost: upstream.test:443\r\n\r\n');
      const { responses } = await answersOf(connection);
      expect(responses.map((response) => response.status)).toEqual([405]);
      expect(responses[0]!.headers.allow).toBe(allow);
      expect(responses[0]!.headers['cache-control']).toBe('no-store');
      expect(jsonBody(responses[0]!)).toEqual({ error: 'method_not_allowed', error_description: 'This server does not accept CONNECT.' });
      expect(await valueOf(gateway.tokengate.context.metrics.clientErrors, { listener, reason: 'connect' })).toBe(before + 1);
    });
  }
});

describe('malformed requests', () => {
  const texts: Array<[string, string]> = [
    ['not HTTP', MALFORMED],
    ['an unknown HTTP version', 'GET / HTTP/9.9\r\nHost: t\r\n\r\n'],
    ['a space in a header name', 'GET / HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n'],
    ['a NUL in a header value', 'GET / HTTP/1.1\r\nHost: t\r\nX-Note: a\x00b\r\n\r\n'],
    ['Content-Length with Transfer-Encoding', 'POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
    ['a Content-Length that is not a number', 'POST / HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n'],
    ['a chunk size that is not hex', 'POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n'],
    ['bare LF line ends', 'GET / HTTP/1.1\nHost: t\n\n'],
    ['a head over the size limit', `GET / HTTP/1.1\r\nHost: t\r\nX-Padding: ${'p'.repeat(20_000)}\r\n\r\n`],
    ['a request line of control characters', '\x01\x02\x03 / HTTP/1.1\r\n\r\n'],
  ];

  for (const listener of ['public', 'ops'] as const) {
    it(`are answered 4xx with the JSON error body on the ${listener} listener, never 5xx, never logged as errors`, async () => {
      for (const [shape, text] of texts) {
        const connection = await open(portOf(listener));
        connection.socket.write(text);
        const { responses } = await answersOf(connection);
        expect(responses.length, shape).toBe(1);
        expect(responses[0]!.status, shape).toBeGreaterThanOrEqual(400);
        expect(responses[0]!.status, shape).toBeLessThan(500);
        expect(jsonBody(responses[0]!), shape).toEqual({ error: expect.any(String), error_description: expect.any(String) });
      }
      // A client that stops halfway through a head and closes its side.
      const halfClosed = await open(portOf(listener));
      halfClosed.socket.end('GET / HTTP/1.1\r\nHo');
      const { responses } = await answersOf(halfClosed);
      expect(responses.map((response) => response.status)).toEqual([400]);

      const metrics = gateway.tokengate.context.metrics;
      expect(await valueOf(metrics.clientErrors, { listener, reason: 'headers_too_large' })).toBeGreaterThanOrEqual(1);
      expect(await valueOf(metrics.clientErrors, { listener, reason: 'malformed' })).toBeGreaterThanOrEqual(texts.length - 2);
      expect(errorLines()).toEqual([]);
    });
  }
});

describe('connection limits', () => {
  let limited: RunningTokengate;
  beforeAll(async () => {
    limited = await startTokengate('hostile-clients-limits', {
      config: { server: { maxConnections: 3, maxConnectionsPerAddress: 2 }, admin: { maxConnections: 2 } },
    });
  });
  afterAll(async () => {
    await limited?.close();
  });

  const metadataRequest = 'GET /.well-known/oauth-authorization-server HTTP/1.1\r\nHost: gateway.test\r\n\r\n';
  const openConnections = (listener: string) => valueOf(limited.tokengate.context.metrics.openConnections, { listener });
  const refused = (listener: string, reason: string) => valueOf(limited.tokengate.context.metrics.refusedConnections, { listener, reason });

  /** A refused connection: the client sends its request at once and still reads the whole answer, then the close. */
  async function refusal(port: number, localAddress: string): Promise<RawResponse> {
    const connection = await open(port, localAddress);
    connection.socket.write(metadataRequest);
    const { responses } = await answersOf(connection);
    expect(responses).toHaveLength(1);
    return responses[0]!;
  }

  it('answers a connection over the per-address limit 429 and one over the listener limit 503, and keeps serving the admitted ones', async () => {
    const first = await open(limited.port, '127.0.0.1');
    expect((await ask(first, metadataRequest, 1)).status).toBe(200);
    const second = await open(limited.port, '127.0.0.1');
    await eventually(async () => (await openConnections('public')) === 2);

    const perAddress = await refusal(limited.port, '127.0.0.1');
    expect(perAddress.status).toBe(429);
    expect(perAddress.headers['retry-after']).toBe('1');
    expect(jsonBody(perAddress)).toEqual({ error: 'too_many_requests', error_description: expect.stringContaining('from your address') });
    expect(await refused('public', 'max_connections_per_address')).toBe(1);

    // Another address is still welcome, up to the listener's limit.
    const third = await open(limited.port, '127.0.0.2');
    expect((await ask(third, metadataRequest, 1)).status).toBe(200);
    const overall = await refusal(limited.port, '127.0.0.3');
    expect(overall.status).toBe(503);
    expect(overall.headers['retry-after']).toBe('1');
    expect(jsonBody(overall)).toEqual({ error: 'temporarily_unavailable', error_description: expect.stringContaining('too many open connections') });
    expect(await refused('public', 'max_connections')).toBe(1);
    expect(await openConnections('public')).toBe(3);

    // The admitted connections are served as before, and a closed one makes room.
    expect((await ask(first, metadataRequest, 2)).status).toBe(200);
    expect((await ask(second, metadataRequest, 1)).status).toBe(200);
    second.socket.destroy();
    await eventually(async () => (await openConnections('public')) === 2);
    const fourth = await open(limited.port, '127.0.0.1');
    expect((await ask(fourth, metadataRequest, 1)).status).toBe(200);
    for (const connection of [first, third, fourth]) connection.socket.destroy();
    await eventually(async () => (await openConnections('public')) === 0);
  });

  it('limits the ops listener on its own, and still serves metrics on an admitted connection', async () => {
    const port = Number(new URL(limited.opsUrl).port);
    const held = [await open(port), await open(port)];
    await eventually(async () => (await openConnections('ops')) === 2);
    const over = await refusal(port, '127.0.0.1');
    expect(over.status).toBe(503);
    expect(await refused('ops', 'max_connections')).toBe(1);

    const scrape = await ask(held[0]!, 'GET /metrics HTTP/1.1\r\nHost: ops.test\r\n\r\n', 1);
    expect(scrape.status).toBe(200);
    expect(scrape.body).toContain('tokengate_open_connections{listener="ops"} 2');
    expect(scrape.body).toContain('tokengate_refused_connections_total{listener="ops",reason="max_connections"} 1');
    for (const connection of held) connection.socket.destroy();
  });
});

describe('the address a per-address limit counts', () => {
  it('is an IPv4 address as is, IPv4-mapped IPv6 included', () => {
    expect(addressKey('192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey('::FFFF:192.0.2.7')).toBe('192.0.2.7');
  });

  it('is the /64 network of an IPv6 address, however it is written', () => {
    expect(addressKey('2001:db8:0:1::1')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:0db8:0000:0001:ffff:ffff:ffff:ffff')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('2001:db8:0:2::1')).not.toBe(addressKey('2001:db8:0:1::1'));
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey('64:ff9b::192.0.2.7')).toBe('64:ff9b:0:0::/64');
  });
});
