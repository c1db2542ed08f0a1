import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';

/**
 * An upstream's informational answers: 103 Early Hints reach an HTTP/1.1 client with their Link
 * headers alone, before the final answer; 102 never reaches it, nor does an unasked-for 100
 * (undici fails the request: 502); an HTTP/1.0 client gets none. Read off a raw socket, which sees every status line the gateway writes.
 */

const PRELOAD = '</assets/app.css>; rel=preload; as=style';
let hinting: Upstream;
let gateway: RunningTokengate;

beforeAll(async () => {
  hinting = await startUpstream((request, response) => {
    // Unasked for: the gateway strips Expect, so no upstream has a reason to send it.
    if (request.url === '/api/hints/continue') response.writeContinue();
    response.writeProcessing();
    if (request.url !== '/api/hints/none') response.writeEarlyHints({ link: [PRELOAD, '</assets/app.js>; rel=preload; as=script'], 'x-internal-host': 'db-7' });
    response.setHeader('content-type', 'text/plain');
    response.end('final');
  });
  gateway = await startTokengate('gateway-informational', { config: { routes: [{ path: '/api/hints', token: 'user', upstream: hinting.url }] } });
});

afterAll(async () => {
  await gateway?.close();
  await hinting?.close();
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

  it('answers 502 when the upstream sends a 100 Continue it was not asked for (undici refuses it as a bad response)', async () => {
    const text = await exchange('/api/hints/continue', '1.1', await gateway.issue());
    expect(statusLines(text)).toEqual(['HTTP/1.1 502 Bad Gateway']);
  });

  it('relays no hints to a request the gateway refuses', async () => {
    const text = await exchange('/api/hints', '1.1', 'not-a-token');
    expect(statusLines(text)).toEqual(['HTTP/1.1 401 Unauthorized']);
    expect(hinting.received.every((request) => !request.headers.authorization?.includes('not-a-token'))).toBe(true);
  });
});
