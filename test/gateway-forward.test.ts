import { once } from 'node:events';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket } from 'undici';
import { WebSocketServer } from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APPLICATION_TOKEN, closeServer, startUpstream, type Received, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { freePort } from './support/ports.js';

/**
 * What the upstream actually receives: never the credential (header, query or body) nor a
 * client's own identity or forwarding headers; the gateway's identity headers, X-Forwarded-*
 * and request id instead; bodies streamed both ways; 502, 504 and WebSocket upgrades.
 */

const BODY_LIMIT = 65_536;
const IDENTITY = ['x-auth-user-id', 'x-auth-client-id', 'x-auth-scope', 'x-auth-token-kind'];

let userApi: Upstream;
let organizerApi: Upstream;
let slowApi: Upstream;
let streamApi: Server;
let streamControl: { requestChunk: Promise<void>; releaseResponse: () => void; responseReleased: Promise<void> };
let webSocketApi: { server: Server; url: string; handshakes: Array<{ url: string; headers: IncomingHttpHeaders }> };
let closedPort: number;
let gateway: RunningTokengate;

beforeAll(async () => {
  [userApi, organizerApi] = await Promise.all([startUpstream(), startUpstream()]);
  slowApi = await startUpstream((_request, response) => {
    setTimeout(() => response.end('late'), 5_000).unref();
  });
  streamApi = await startStreamingUpstream();
  webSocketApi = await startWebSocketUpstream();
  closedPort = await freePort();
  const user = userApi.url;
  gateway = await startTokengate('gateway-forward', {
    config: {
      server: { bodyLimit: BODY_LIMIT },
      routes: [
        { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', upstream: user },
        { path: '/api/public/tickets', token: 'user', upstream: user },
        { path: '/api/public/events', token: 'application', upstream: organizerApi.url },
        { path: '/api/stream', token: 'user', upstream: `http://127.0.0.1:${(streamApi.address() as AddressInfo).port}` },
        { path: '/api/slow', token: 'user', upstream: slowApi.url, timeoutMs: 200 },
        { path: '/api/down', token: 'user', upstream: `http://127.0.0.1:${closedPort}` },
        { path: '/api/live', methods: ['GET'], token: 'user', upstream: webSocketApi.url },
      ],
    },
  });
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all([
    userApi?.close(),
    organizerApi?.close(),
    slowApi?.close(),
    streamApi && closeServer(streamApi),
    webSocketApi && closeServer(webSocketApi.server),
  ]);
});

/** Sends a request with exactly these raw headers (repeats and case kept) and resolves with the answer. */
function send(
  path: string,
  options: { method?: string; headers?: string[]; body?: string | Buffer } = {},
): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const headers = options.headers ?? [];
    if (!headers.some((name, index) => index % 2 === 0 && name.toLowerCase() === 'host')) headers.push('Host', `127.0.0.1:${gateway.port}`);
    // Host, port and path given apart: a URL string would have its dot segments resolved by the client.
    const outgoing = httpRequest({ hostname: '127.0.0.1', port: gateway.port, path, method: options.method ?? 'GET', headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks).toString('latin1') }));
    });
    outgoing.on('error', reject);
    outgoing.end(options.body);
  });
}

function lastReceived(upstream: Upstream = userApi): Received {
  return upstream.received.at(-1)!;
}

describe('the credential never reaches the upstream', () => {
  it('removes the Authorization header', async () => {
    const token = await gateway.issue();
    expect((await send('/api/public/me', { headers: ['Authorization', `Bearer ${token}`] })).status).toBe(200);
    const received = lastReceived();
    expect(received.headers.authorization).toBeUndefined();
    expect(JSON.stringify(received)).not.toContain(token);
  });

  it("keeps the sign-in session cookie (Path=/ over https) from the API, and the client's other cookies as sent", async () => {
    const token = await gateway.issue();
    for (const [cookie, forwarded] of [
      ['__Host-tokengate_session=abc; theme=dark; cart=1', 'theme=dark; cart=1'],
      ['theme=dark;__Host-tokengate_session=abc', 'theme=dark'],
      ['tokengate_session=abc', undefined],
      ['theme=dark; lang=en', 'theme=dark; lang=en'],
    ] as const) {
      expect((await send('/api/public/me', { headers: ['Authorization', `Bearer ${token}`, 'Cookie', cookie] })).status).toBe(200);
      expect(lastReceived().headers.cookie).toBe(forwarded);
    }
  });

  it('removes every access_token query parameter and keeps the rest of the query byte for byte', async () => {
    const token = await gateway.issue();
    for (const [query, forwarded] of [
      [`access_token=${token}`, ''],
      [`a=1&access_token=${token}&b=%20x+y&c`, 'a=1&b=%20x+y&c'],
      [`access%5Ftoken=${token}&z=%2F`, 'z=%2F'],
      [`q=access_token&access_token=${token}`, 'q=access_token'],
    ]) {
      expect((await send(`/api/public/me?${query}`)).status).toBe(200);
      expect(lastReceived().url).toBe(forwarded === '' ? '/api/public/me' : `/api/public/me?${forwarded}`);
      expect(JSON.stringify(lastReceived())).not.toContain(token);
    }
  });

  it('removes access_token from a form body, keeps the other pairs byte for byte, and sets Content-Length', async () => {
    const token = await gateway.issue();
    const answer = await send('/api/public/tickets', {
      method: 'POST',
      headers: ['Content-Type', 'application/x-www-form-urlencoded'],
      body: `event=7&access_token=${token}&note=caf%C3%A9+%26+more&seats=2`,
    });
    expect(answer.status).toBe(200);
    const received = lastReceived();
    expect(received.body).toBe('event=7&note=caf%C3%A9+%26+more&seats=2');
    expect(received.headers['content-length']).toBe(String(Buffer.byteLength(received.body)));
    expect(received.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(JSON.stringify(received)).not.toContain(token);
  });

  it('removes access_token from a JSON body, re-encoded with a correct Content-Length', async () => {
    const token = await gateway.issue();
    const answer = await send('/api/public/tickets', {
      method: 'POST',
      headers: ['Content-Type', 'application/json; charset=utf-8'],
      body: JSON.stringify({ access_token: token, event: 7, seats: ['A1', 'A2'], note: 'café' }),
    });
    expect(answer.status).toBe(200);
    const received = lastReceived();
    expect(JSON.parse(Buffer.from(received.body, 'latin1').toString('utf8'))).toEqual({ event: 7, seats: ['A1', 'A2'], note: 'café' });
    expect(received.headers['content-length']).toBe(String(Buffer.byteLength(received.body, 'latin1')));
    expect(received.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(JSON.stringify(received)).not.toContain(token);
  });

  it('forwards a form or JSON body that carries no token unchanged, byte for byte', async () => {
    const token = await gateway.issue();
    const json = '{ "event" : 7,\n  "big": 12345678901234567890 }';
    await send('/api/public/tickets', { method: 'POST', headers: ['Authorization', `Bearer ${token}`, 'Content-Type', 'application/json'], body: json });
    expect(lastReceived().body).toBe(json);
    await send('/api/public/tickets', {
      method: 'POST',
      headers: ['Authorization', `Bearer ${token}`, 'Content-Type', 'application/x-www-form-urlencoded'],
      body: 'a=%zz&b=1',
    });
    expect(lastReceived().body).toBe('a=%zz&b=1');
  });

  it('refuses a form or JSON body that does not parse as its Content-Type, or exceeds the body limit, without forwarding', async () => {
    const token = await gateway.issue();
    const before = userApi.received.length;
    const invalid = await send('/api/public/tickets', {
      method: 'POST',
      headers: ['Authorization', `Bearer ${token}`, 'Content-Type', 'application/json'],
      body: '{"event": 7',
    });
    expect(invalid.status).toBe(400);
    expect(JSON.parse(invalid.body)).toEqual({ error: 'invalid_request', error_description: 'The request body does not match its Content-Type.' });
    const tooLarge = await send('/api/public/tickets', {
      method: 'POST',
      headers: ['Authorization', `Bearer ${token}`, 'Content-Type', 'application/x-www-form-urlencoded'],
      body: `a=${'x'.repeat(BODY_LIMIT)}`,
    });
    expect(tooLarge.status).toBe(413);
    expect(tooLarge.headers['cache-control']).toBe('no-store');
    expect(userApi.received.length).toBe(before);
  });
});

describe('identity and forwarding headers', () => {
  it('strips every client-sent identity header (any case, repeated, "_" spellings) and adds the real ones', async () => {
    const token = await gateway.issue({ userId: 'user-42', clientId: 'client-web', scopes: ['public', 'tickets:write'] });
    const spoofed = [
      'X-Auth-User-Id',
      'admin',
      'x-auth-user-id',
      'root',
      'X-AUTH-SCOPE',
      'everything',
      'x_auth_user_id',
      'admin',
      'X_Auth_Client_Id',
      'evil',
      'x-auth-token-kind',
      'application',
      'x-Auth-Client-ID',
      'evil',
    ];
    expect((await send('/api/public/tickets', { headers: ['Authorization', `Bearer ${token}`, ...spoofed] })).status).toBe(200);
    const received = lastReceived();
    expect(received.headers['x-auth-user-id']).toBe('user-42');
    expect(received.headers['x-auth-client-id']).toBe('client-web');
    expect(received.headers['x-auth-scope']).toBe('public tickets:write');
    expect(received.headers['x-auth-token-kind']).toBe('user');
    // Each identity header arrives exactly once, with no other spelling beside it.
    const names = received.rawHeaders.filter((_, index) => index % 2 === 0).map((name) => name.toLowerCase().replaceAll('_', '-'));
    for (const name of IDENTITY) expect(names.filter((found) => found === name)).toHaveLength(1);
    expect(JSON.stringify(received.rawHeaders)).not.toMatch(/admin|root|everything|evil/);
  });

  it('sends no user id for an application token', async () => {
    const token = await gateway.issue(APPLICATION_TOKEN);
    await send('/api/public/events', { headers: ['Authorization', `Bearer ${token}`, 'X-Auth-User-Id', 'user-1'] });
    const received = lastReceived(organizerApi);
    expect(received.headers['x-auth-user-id']).toBeUndefined();
    expect(received.headers['x-auth-token-kind']).toBe('application');
    expect(received.headers['x-auth-client-id']).toBe('client-organizer');
  });

  it('replaces client-sent X-Forwarded-*, Forwarded and X-Real-IP with its own (server.trustProxy off)', async () => {
    const token = await gateway.issue();
    const forged = [
      'X-Forwarded-For',
      '10.9.9.9',
      'X-Forwarded-Host',
      'admin.internal',
      'X-Forwarded-Proto',
      'https',
      'Forwarded',
      'for=10.9.9.9',
      'X-Real-IP',
      '10.9.9.9',
      'X_Forwarded_For',
      '10.9.9.9',
    ];
    await send('/api/public/me', { headers: ['Authorization', `Bearer ${token}`, 'Host', 'api.example.com', ...forged] });
    const received = lastReceived();
    expect(received.headers['x-forwarded-for']).toBe('127.0.0.1');
    expect(received.headers['x-forwarded-proto']).toBe('http');
    expect(received.headers['x-forwarded-host']).toBe('api.example.com');
    expect(received.headers.forwarded).toBeUndefined();
    expect(received.headers['x-real-ip']).toBeUndefined();
    expect(JSON.stringify(received.rawHeaders)).not.toContain('10.9.9.9');
    expect(received.headers.host).toBe(new URL(userApi.url).host);
  });

  it('passes on only what the proxies server.trustProxy names wrote: by address, by hop count, and nothing from a peer it does not name', async () => {
    // A client wrote 198.51.100.1 itself; the proxies in front appended the rest, the nearest last.
    const sent = {
      'x-forwarded-for': '198.51.100.1, 203.0.113.9, 10.0.0.2',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'api.example.com',
      'x-real-ip': '198.51.100.1',
    };
    const fromProxy = { proto: 'https', host: 'api.example.com', realIp: '198.51.100.1' };
    const cases: Array<{ trustProxy: unknown; forwardedFor: string; proto: string; host: string | null; realIp: string | undefined }> = [
      // The peer (127.0.0.1) is a named proxy; 10.0.0.2, which it says sent the request, is not: the client.
      { trustProxy: ['loopback'], forwardedFor: '10.0.0.2, 127.0.0.1', ...fromProxy },
      { trustProxy: ['127.0.0.1', '10.0.0.0/8'], forwardedFor: '203.0.113.9, 10.0.0.2, 127.0.0.1', ...fromProxy },
      // Two proxies in front: the peer and the one before it.
      { trustProxy: 2, forwardedFor: '203.0.113.9, 10.0.0.2, 127.0.0.1', ...fromProxy },
      // The peer is none of the named proxies: every forwarding header is the client's, replaced (host null: the request's own Host).
      { trustProxy: ['192.0.2.0/24'], forwardedFor: '127.0.0.1', proto: 'http', host: null, realIp: undefined },
    ];
    for (const { trustProxy, ...expected } of cases) {
      const trusting = await startTokengate('gateway-trust', {
        config: { server: { trustProxy }, routes: [{ path: '/api', token: 'user', upstream: userApi.url }] },
      });
      try {
        const token = await trusting.issue();
        expect((await fetch(`${trusting.baseUrl}/api/x`, { headers: { authorization: `Bearer ${token}`, ...sent } })).status).toBe(200);
        const received = lastReceived().headers;
        expect(
          {
            forwardedFor: received['x-forwarded-for'],
            proto: received['x-forwarded-proto'],
            host: received['x-forwarded-host'],
            realIp: received['x-real-ip'],
          },
          JSON.stringify(trustProxy),
        ).toEqual({ ...expected, host: expected.host ?? new URL(trusting.baseUrl).host });
      } finally {
        await trusting.close();
      }
    }
  });

  it('keeps a client request id, or generates one, and sends the same id upstream and back', async () => {
    const token = await gateway.issue();
    const kept = await send('/api/public/me', { headers: ['Authorization', `Bearer ${token}`, 'X-Request-Id', 'trace-7'] });
    expect(kept.headers['x-request-id']).toBe('trace-7');
    expect(lastReceived().headers['x-request-id']).toBe('trace-7');
    const generated = await send('/api/public/me', { headers: ['Authorization', `Bearer ${token}`] });
    expect(generated.headers['x-request-id']).toMatch(/^[A-Za-z0-9_-]{16}-[0-9a-z]+$/);
    expect(lastReceived().headers['x-request-id']).toBe(generated.headers['x-request-id']);
  });

  it('drops hop-by-hop headers, including those the client names in Connection, and handles Expect: 100-continue', async () => {
    const token = await gateway.issue();
    const answer = await send('/api/public/tickets', {
      method: 'POST',
      headers: [
        'Authorization',
        `Bearer ${token}`,
        'Connection',
        'keep-alive, X-Secret-Hop',
        'X-Secret-Hop',
        'v',
        'Keep-Alive',
        'timeout=5',
        'TE',
        'trailers',
        'Expect',
        '100-continue',
        'Content-Type',
        'application/octet-stream',
      ],
      body: 'payload',
    });
    expect(answer.status).toBe(200);
    const received = lastReceived();
    for (const name of ['x-secret-hop', 'keep-alive', 'te', 'expect']) expect(received.headers[name]).toBeUndefined();
    expect(received.body).toBe('payload');
  });
});

describe('streaming', () => {
  it('streams the request body to the upstream before the client has finished sending it', async () => {
    const token = await gateway.issue();
    const outgoing = httpRequest(`${gateway.baseUrl}/api/stream/upload`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'transfer-encoding': 'chunked' },
    });
    const answer = once(outgoing, 'response');
    outgoing.write('first-part;');
    // The upstream sees the first chunk while the request is still open: nothing buffers it.
    await withTimeout(streamControl.requestChunk, 'the upstream never saw the first chunk');
    outgoing.end('second-part');
    const [response] = (await answer) as [IncomingMessage];
    const chunks: Buffer[] = [];
    for await (const chunk of response) chunks.push(chunk as Buffer);
    expect(Buffer.concat(chunks).toString()).toBe('first-part;second-part');
  });

  it('streams the response to the client before the upstream has finished sending it', async () => {
    const token = await gateway.issue();
    const response = await fetch(`${gateway.baseUrl}/api/stream/download`, { headers: { authorization: `Bearer ${token}` } });
    const reader = response.body!.getReader();
    const first = await withTimeout(reader.read(), 'the client never got the first chunk');
    expect(new TextDecoder().decode(first.value)).toBe('first-part;');
    streamControl.releaseResponse();
    let rest = '';
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += new TextDecoder().decode(chunk.value);
    expect(rest).toBe('second-part');
  });

  it('streams bodies larger than the body limit when they are not token bodies', async () => {
    const token = await gateway.issue();
    const big = Buffer.alloc(BODY_LIMIT * 8, 'z');
    const answer = await send('/api/public/tickets', {
      method: 'PUT',
      headers: ['Authorization', `Bearer ${token}`, 'Content-Type', 'application/octet-stream', 'Content-Length', String(big.length)],
      body: big,
    });
    expect(answer.status).toBe(200);
    expect(lastReceived().body.length).toBe(big.length);
  });
});

describe('upstream failures', () => {
  it('answers 502 JSON when the upstream refuses the connection', async () => {
    const token = await gateway.issue();
    const answer = await send('/api/down/x', { headers: ['Authorization', `Bearer ${token}`] });
    expect(answer.status).toBe(502);
    expect(answer.headers['cache-control']).toBe('no-store');
    expect(JSON.parse(answer.body)).toEqual({ error: 'bad_gateway', error_description: 'The upstream service could not be reached.' });
  });

  it('answers 504 JSON when the upstream does not answer within the route timeout', async () => {
    const token = await gateway.issue();
    // The upstream would answer 200 after 5 s; the route allows it 200 ms.
    const answer = await send('/api/slow', { headers: ['Authorization', `Bearer ${token}`] });
    expect(answer.status).toBe(504);
    expect(JSON.parse(answer.body)).toEqual({ error: 'gateway_timeout', error_description: 'The upstream service did not answer in time.' });
    expect(answer.headers['cache-control']).toBe('no-store');
  });
});

describe('WebSocket upgrades', () => {
  it('refuses an upgrade without a valid token before anything is opened upstream', async () => {
    const before = webSocketApi.handshakes.length;
    const missing = await handshake('/api/live/feed', {});
    expect(missing.status).toBe(401);
    expect(missing.headers['www-authenticate']).toBe('Bearer realm="tokengate", DPoP realm="tokengate", algs="ES256 EdDSA Ed25519 RS256 PS256"');
    expect(JSON.parse(missing.body)).toEqual({ error: 'invalid_token', error_description: 'An access token is required.' });
    const forged = await handshake(`/api/live/feed?access_token=${'A'.repeat(43)}`, {});
    expect(forged.status).toBe(401);
    const application = await gateway.issue(APPLICATION_TOKEN);
    expect((await handshake('/api/live/feed', { authorization: `Bearer ${application}` })).status).toBe(403);
    expect((await handshake('/api/live/../public/me', {})).status).toBe(400);
    expect(webSocketApi.handshakes.length).toBe(before);
  });

  it('refuses upgrades to other protocols', async () => {
    const token = await gateway.issue();
    const answer = await handshake('/api/live/feed', { authorization: `Bearer ${token}`, upgrade: 'h2c' });
    expect(answer.status).toBe(400);
  });

  it('joins an authorized WebSocket to the upstream, without the credential and with identity headers', async () => {
    const token = await gateway.issue({ userId: 'user-ws' });
    const socket = new WebSocket(`${gateway.baseUrl.replace('http', 'ws')}/api/live/feed?room=7&access_token=${token}`);
    const message = new Promise<string>((resolve, reject) => {
      socket.addEventListener('message', (event) => resolve(String(event.data)));
      socket.addEventListener('error', () => reject(new Error('websocket error')));
    });
    await withTimeout(once(socket, 'open'), 'the websocket never opened');
    socket.send('hello upstream');
    const echoed = JSON.parse(await withTimeout(message, 'no message came back')) as { echo: string; url: string; headers: IncomingHttpHeaders };
    socket.close();
    expect(echoed.echo).toBe('hello upstream');
    expect(echoed.url).toBe('/api/live/feed?room=7');
    expect(echoed.headers['x-auth-user-id']).toBe('user-ws');
    expect(echoed.headers['x-auth-token-kind']).toBe('user');
    expect(echoed.headers.authorization).toBeUndefined();
    expect(JSON.stringify(echoed)).not.toContain(token);
  });
});

/** Sends a WebSocket handshake and resolves with the (non-101) answer. */
function handshake(path: string, headers: Record<string, string>): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest({
      hostname: '127.0.0.1',
      port: gateway.port,
      path,
      headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13', ...headers },
    });
    outgoing.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks).toString() }));
    });
    outgoing.on('upgrade', (response, socket) => {
      socket.destroy();
      resolve({ status: response.statusCode!, headers: response.headers, body: '' });
    });
    outgoing.on('error', reject);
    outgoing.end();
  });
}

/** An upstream whose /upload reports the first request chunk and echoes the body, and whose /download sends one chunk, then the rest on release. */
async function startStreamingUpstream(): Promise<Server> {
  let sawChunk!: () => void;
  let release!: () => void;
  streamControl = {
    requestChunk: new Promise<void>((resolve) => (sawChunk = resolve)),
    responseReleased: new Promise<void>((resolve) => (release = resolve)),
    releaseResponse: () => release(),
  };
  const server = createServer((request, response) => {
    if (request.url === '/api/stream/upload') {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        sawChunk();
      });
      request.on('end', () => response.end(Buffer.concat(chunks)));
      return;
    }
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.write('first-part;');
    void streamControl.responseReleased.then(() => response.end('second-part'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

/** A WebSocket upstream that records handshakes and answers each message with what it saw. */
async function startWebSocketUpstream(): Promise<{ server: Server; url: string; handshakes: Array<{ url: string; headers: IncomingHttpHeaders }> }> {
  const server = createServer((_request, response) => response.end('not a websocket'));
  const handshakes: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
  const sockets = new WebSocketServer({ server });
  sockets.on('connection', (socket, request) => {
    const seen = { url: request.url!, headers: request.headers };
    handshakes.push(seen);
    socket.on('message', (data: Buffer) => socket.send(JSON.stringify({ echo: data.toString(), ...seen })));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, handshakes };
}

function withTimeout<T>(promise: Promise<T>, message: string, ms = 2_000): Promise<T> {
  return Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(message)), ms).unref())]);
}
