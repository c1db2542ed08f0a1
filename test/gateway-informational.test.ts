import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest, startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { startRawUpstream, type RawStep, type RawUpstream } from './support/raw-upstream.js';

/**
 * An upstream's informational answers: 103 Early Hints reach an HTTP/1.1 client with their Link
 * headers alone, before the final answer; 102 never reaches it, nor does an unasked-for 100
 * (ignored, RFC 9110 section 15.2: the answer that follows it is the answer); an HTTP/1.0 client
 * gets none. Read off a raw socket, which sees every status line the gateway writes, from
 * upstreams that write theirs byte for byte.
 */

const PRELOAD = '</assets/app.css>; rel=preload; as=style';
let hinting: Upstream;
let raw: RawUpstream;
let gateway: RunningTokengate;

const CONTINUE = 'HTTP/1.1 100 Continue\r\n\r\n';
const final = (body: string) => `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

/** What the raw upstream answers to /api/raw/<name>: each a sequence of writes. */
const SCRIPTS: Record<string, RawStep[]> = {
  continue: [CONTINUE, final('after continue')],
  'continue-bytewise': [...CONTINUE.split('').flatMap((byte) => [byte, { pauseMs: 1 }]), final('after a slow continue')],
  'continue-with-fields': ['HTTP/1.1 100 Continue\r\nX-Upstream: interim\r\nServer: raw\r\n\r\n', final('fields dropped')],
  'continue-hints-continue': [
    CONTINUE,
    `HTTP/1.1 103 Early Hints\r\nLink: ${'</assets/app.css>; rel=preload; as=style'}\r\n\r\n`,
    CONTINUE,
    'HTTP/1.1 102 Processing\r\n\r\n',
    final('after three'),
  ],
  'continue-in-one-write': [CONTINUE + CONTINUE + final('two continues, one write')],
  // A final answer whose body carries what looks like an interim answer: body bytes are never inspected.
  'lookalike-body': ['HTTP/1.1 200 OK\r\nContent-Length: 35\r\n\r\n', { pauseMs: 20 }, `${CONTINUE}after`, { pauseMs: 1 }, 'wards'],
  'continue-then-close': [CONTINUE, 'close'],
  'switching-protocols': ['HTTP/1.1 101 Switching Protocols\r\nUpgrade: other\r\nConnection: upgrade\r\n\r\n', final('never')],
};

beforeAll(async () => {
  hinting = await startUpstream((request, response) => {
    // Unasked for: the gateway strips Expect, so no upstream has a reason to send it.
    if (request.url === '/api/hints/continue') response.writeContinue();
    response.writeProcessing();
    if (request.url !== '/api/hints/none') response.writeEarlyHints({ link: [PRELOAD, '</assets/app.js>; rel=preload; as=script'], 'x-internal-host': 'db-7' });
    response.setHeader('content-type', 'text/plain');
    response.end('final');
  });
  raw = await startRawUpstream((request) => {
    if (request.method === 'POST') return [CONTINUE, final(`received ${request.body.length} bytes`)];
    return SCRIPTS[request.target.slice('/api/raw/'.length)] ?? [final('unscripted')];
  });
  gateway = await startTokengate('gateway-informational', {
    config: {
      routes: [
        { path: '/api/hints', token: 'user', upstream: hinting.url },
        { path: '/api/raw', token: 'user', upstream: raw.url },
      ],
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await hinting?.close();
  await raw?.close();
});

/** Everything the gateway writes back on a connection, until it closes it. */
function exchange(path: string, version: '1.0' | '1.1', token: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(gateway.port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.on('error', reject);
    socket.write(`GET ${path} HTTP/${version}\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`);
  });
}

const statusLines = (text: string) => text.split('\r\n').filter((line) => /^HTTP\/1\.\d \d{3}/.test(line));

describe('informational answers from the upstream', () => {
  it('relays 103 Early Hints to an HTTP/1.1 client, Link headers only, before the final answer; drops 102', async () => {
    const text = await exchange('/api/hints', '1.1', await gateway.issue());
    expect(statusLines(text)).toEqual(['HTTP/1.1 103 Early Hints', 'HTTP/1.1 200 OK']);
    const hints = text.slice(0, text.indexOf('\r\n\r\n'));
    expect(hints).toBe(`HTTP/1.1 103 Early Hints\r\nLink: ${PRELOAD}, </assets/app.js>; rel=preload; as=script`);
    expect(text).not.toContain('x-internal-host');
    expect(text.endsWith('final')).toBe(true);
  });

  it('sends no interim answer to an HTTP/1.0 client, nor hints without a Link', async () => {
    const token = await gateway.issue();
    expect(statusLines(await exchange('/api/hints', '1.0', token))).toEqual(['HTTP/1.1 200 OK']);
    expect(statusLines(await exchange('/api/hints/none', '1.1', token))).toEqual(['HTTP/1.1 200 OK']);
  });

  it('ignores a 100 Continue the upstream was not asked for, and relays the answer that follows it', async () => {
    const text = await exchange('/api/hints/continue', '1.1', await gateway.issue());
    expect(statusLines(text)).toEqual(['HTTP/1.1 103 Early Hints', 'HTTP/1.1 200 OK']);
    expect(text.endsWith('final')).toBe(true);
  });

  it('relays no hints to a request the gateway refuses', async () => {
    const text = await exchange('/api/hints', '1.1', 'not-a-token');
    expect(statusLines(text)).toEqual(['HTTP/1.1 401 Unauthorized']);
    expect(hinting.received.every((request) => !request.headers.authorization?.includes('not-a-token'))).toBe(true);
  });
});

describe('unsolicited interim answers, written byte for byte', () => {
  const body = (text: string) => text.slice(text.lastIndexOf('\r\n\r\n') + 4);

  it('drops every 100 Continue: alone, split byte by byte, with fields, several in one write, around 102 and 103', async () => {
    const token = await gateway.issue();
    const cases: Array<[string, string[], string]> = [
      ['continue', ['HTTP/1.1 200 OK'], 'after continue'],
      ['continue-bytewise', ['HTTP/1.1 200 OK'], 'after a slow continue'],
      ['continue-with-fields', ['HTTP/1.1 200 OK'], 'fields dropped'],
      ['continue-hints-continue', ['HTTP/1.1 103 Early Hints', 'HTTP/1.1 200 OK'], 'after three'],
      ['continue-in-one-write', ['HTTP/1.1 200 OK'], 'two continues, one write'],
      ['lookalike-body', ['HTTP/1.1 200 OK'], `${CONTINUE}afterwards`],
    ];
    for (const [script, lines, expected] of cases) {
      const text = await exchange(`/api/raw/${script}`, '1.1', token);
      expect({ script, lines: statusLines(text.slice(0, text.length - expected.length)), body: text.endsWith(expected) }).toEqual({
        script,
        lines,
        body: true,
      });
      expect(text).not.toContain('interim');
    }
  });

  it('keeps the upstream connection: the next request on it is read from its own first byte', async () => {
    const token = await gateway.issue();
    const before = raw.requests.length;
    for (let round = 0; round < 3; round += 1) {
      for (const script of ['continue', 'lookalike-body', 'continue-in-one-write']) {
        const text = await exchange(`/api/raw/${script}`, '1.1', token);
        expect({ script, lines: statusLines(text).slice(0, 1) }).toEqual({ script, lines: ['HTTP/1.1 200 OK'] });
      }
    }
    const used = new Set(raw.requests.slice(before).map((request) => request.connection));
    expect(used.size).toBe(1);
  });

  it('ignores a 100 sent before the request body is read, and forwards the body', async () => {
    const token = await gateway.issue();
    const payload = 'x'.repeat(100_000);
    const answer = await rawRequest(
      gateway.port,
      `POST /api/raw/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${payload.length}\r\nConnection: close\r\n\r\n${payload}`,
      5_000,
    );
    expect({ lines: statusLines(answer), body: body(answer) }).toEqual({ lines: ['HTTP/1.1 200 OK'], body: 'received 100000 bytes' });
  });

  it('answers 502 when nothing but a 100 comes before the upstream closes, or it switches protocols unasked', async () => {
    const token = await gateway.issue();
    for (const script of ['continue-then-close', 'switching-protocols']) {
      expect({ script, lines: statusLines(await exchange(`/api/raw/${script}`, '1.1', token)) }).toEqual({ script, lines: ['HTTP/1.1 502 Bad Gateway'] });
    }
  });
});
