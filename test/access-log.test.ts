import { randomBytes } from 'node:crypto';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APPLICATION_TOKEN, closeServer, startUpstream, type Upstream } from './support/gateway.js';
import { basicAuthorization, postForm, registerApplication, startTokengate, type RunningTokengate, type StartOptions } from './support/instance.js';
import { accessLines, captureLog, type CapturedLog } from './support/log.js';
import { freePort } from './support/ports.js';
import { eventually } from './support/wait.js';

/**
 * The access log: one line per completed request (gateway, issuer, admin API) with `logging.requests`
 * deciding which, never a secret, and upstream failures at warn with their error code.
 */

const ADMIN_TOKEN = `admin-${randomBytes(16).toString('hex')}`;
let upstream: Upstream;
let deadUpstream: string;
/** Accepts WebSocket handshakes on /api/public/ws/accept, declines them (403) elsewhere. */
let upgrades: Server;
const tunnels = new Set<Duplex>();

beforeAll(async () => {
  // /cut answers a head and part of a body, then drops the connection; /slow never answers.
  upstream = await startUpstream((request, response, received) => {
    if (request.url!.startsWith('/api/public/me/cut')) {
      response.writeHead(200, { 'content-length': '1000' });
      response.write('partial');
      setTimeout(() => response.socket?.destroy(), 20);
    } else if (!request.url!.startsWith('/api/public/me/slow')) {
      response.setHeader('content-type', 'application/json');
      response.end(JSON.stringify(received));
    }
  });
  deadUpstream = `http://127.0.0.1:${await freePort()}`;
  upgrades = createServer();
  upgrades.on('upgrade', (request, socket) => {
    tunnels.add(socket);
    socket.on('error', () => {});
    if (request.url === '/api/public/ws/accept') socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
    else socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
  });
  await new Promise<void>((resolve) => upgrades.listen(0, '127.0.0.1', resolve));
});
afterAll(async () => {
  await upstream?.close();
  // Upgraded sockets are no longer the server's: they are ended here.
  for (const socket of tunnels) socket.destroy();
  if (upgrades !== undefined) await closeServer(upgrades);
});

async function loggingTokengate(log: CapturedLog, logging: Record<string, string> = {}, options: StartOptions = {}): Promise<RunningTokengate> {
  return startTokengate('access-log', {
    logger: log.logger,
    ...options,
    config: {
      admin: { token: ADMIN_TOKEN },
      routes: [
        { path: '/api/public/me', upstream: upstream.url },
        { path: '/api/public/tickets', upstream: deadUpstream },
        { path: '/api/public/events', token: 'application', upstream: upstream.url },
        { path: '/api/public/ws', upstream: `http://127.0.0.1:${(upgrades.address() as AddressInfo).port}` },
      ],
      ...(Object.keys(logging).length > 0 ? { logging: { level: 'silent', ...logging } } : {}),
    },
  });
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('with logging.requests: all', () => {
  const log = captureLog('info');
  let running: RunningTokengate;
  beforeAll(async () => {
    running = await loggingTokengate(log, { requests: 'all' });
  });
  afterAll(() => running?.close());

  it('writes one line per gateway request with route, method, status, duration, request id, token kind and client id', async () => {
    const user = await running.issue();
    const application = await running.issue({ ...APPLICATION_TOKEN, scopes: ['public'] });
    const requestId = `req-${randomBytes(8).toString('hex')}`;
    expect((await fetch(`${running.baseUrl}/api/public/me/tickets?page=2`, { headers: { ...bearer(user), 'x-request-id': requestId } })).status).toBe(200);
    expect((await fetch(`${running.baseUrl}/api/public/events`, { method: 'POST', headers: bearer(application), body: 'x' })).status).toBe(200);
    await eventually(() => accessLines(log).length >= 2);
    const [forwarded, posted] = accessLines(log);
    expect(forwarded).toEqual({
      level: 30,
      time: expect.any(Number),
      pid: process.pid,
      hostname: expect.any(String),
      listener: 'public',
      reqId: requestId,
      route: '/api/public/me',
      method: 'GET',
      status: 200,
      durationMs: expect.any(Number),
      tokenKind: 'user',
      clientId: 'client-web',
      msg: 'request completed',
    });
    expect(forwarded!.durationMs).toBeGreaterThan(0);
    expect(posted).toMatchObject({ route: '/api/public/events', method: 'POST', status: 200, tokenKind: 'application', clientId: 'client-organizer' });
  });

  it('writes refusals with their reason, and requests that match no route under the route (none), at info', async () => {
    log.lines.length = 0;
    const forged = randomBytes(32).toString('base64url');
    expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(forged) })).status).toBe(401);
    expect((await fetch(`${running.baseUrl}/nowhere/${randomBytes(4).toString('hex')}`)).status).toBe(404);
    expect((await fetch(`${running.baseUrl}/api/public/me`, { method: 'OPTIONS' })).status).toBe(405);
    expect(accessLines(log)).toEqual([
      expect.objectContaining({ level: 30, route: '/api/public/me', method: 'GET', status: 401, reason: 'forged_token' }),
      expect.objectContaining({ level: 30, route: '(none)', method: 'GET', status: 404, reason: 'not_found' }),
      expect.objectContaining({ level: 30, route: '/api/public/me', method: 'OPTIONS', status: 405, reason: 'method_not_allowed' }),
    ]);
    for (const line of accessLines(log)) expect(line).not.toHaveProperty('clientId');
  });

  it("writes the issuer's and the admin API's requests under their endpoint's path pattern, with the error of a refusal", async () => {
    log.lines.length = 0;
    const application = await registerApplication(running.store);
    const token = `${running.baseUrl}/oauth/token`;
    expect(
      (await postForm(token, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(application.clientId, application.clientSecret!) }))
        .status,
    ).toBe(200);
    expect((await postForm(token, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(application.clientId, 'wrong') })).status).toBe(
      401,
    );
    expect((await fetch(`${running.opsUrl}/admin/applications/${application.clientId}`, { method: 'DELETE', headers: bearer(ADMIN_TOKEN) })).status).toBe(200);
    expect((await fetch(`${running.opsUrl}/admin/users/no-such-user`, { method: 'DELETE', headers: bearer(ADMIN_TOKEN) })).status).toBe(404);
    // Probes and scrapes are not requests of the admin API: no line.
    expect((await fetch(`${running.opsUrl}/healthz`)).status).toBe(200);
    await eventually(() => accessLines(log).length >= 4);
    expect(accessLines(log)).toEqual([
      expect.objectContaining({ listener: 'public', route: '/oauth/token', method: 'POST', status: 200 }),
      expect.objectContaining({ listener: 'public', route: '/oauth/token', method: 'POST', status: 401, reason: 'invalid_client' }),
      expect.objectContaining({ listener: 'ops', route: '/admin/applications/:clientId', method: 'DELETE', status: 200 }),
      expect.objectContaining({ listener: 'ops', route: '/admin/users/:id', method: 'DELETE', status: 404, reason: 'resource_not_found' }),
    ]);
  });

  it('writes an upstream failure at warn with its error code and no stack trace', async () => {
    log.lines.length = 0;
    const user = await running.issue();
    expect((await fetch(`${running.baseUrl}/api/public/tickets`, { headers: bearer(user) })).status).toBe(502);
    expect(accessLines(log)).toEqual([
      expect.objectContaining({ level: 40, route: '/api/public/tickets', status: 502, reason: 'upstream_unreachable', error: 'ECONNREFUSED' }),
    ]);
    expect(log.text()).not.toMatch(/"err"|"stack"|\n\s+at /);
  });

  it('writes a response the upstream cut short at warn with its status and error code, and a client that left before the answer as 499', async () => {
    log.lines.length = 0;
    const user = await running.issue();
    const cut = await fetch(`${running.baseUrl}/api/public/me/cut`, { headers: bearer(user) })
      .then((response) => response.text())
      .catch((error: Error) => error.message);
    expect(cut).toBe('terminated');
    await eventually(() => accessLines(log).length >= 1);
    expect(accessLines(log)).toEqual([
      expect.objectContaining({ level: 40, route: '/api/public/me', status: 200, error: 'UND_ERR_SOCKET', tokenKind: 'user' }),
    ]);

    log.lines.length = 0;
    const socket = connect(running.port, '127.0.0.1');
    socket.write(`GET /api/public/me/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${user}\r\n\r\n`);
    await eventually(() => upstream.received.some((received) => received.url === '/api/public/me/slow'));
    socket.destroy();
    await eventually(() => accessLines(log).length >= 1);
    expect(accessLines(log)).toEqual([expect.objectContaining({ level: 30, route: '/api/public/me', status: 499, tokenKind: 'user' })]);
  });

  it('writes a WebSocket handshake when the tunnel opens (101), or with the answer of an upstream that declines it', async () => {
    log.lines.length = 0;
    const user = await running.issue();
    const handshake = (path: string) =>
      new Promise<number>((resolve, reject) => {
        const outgoing = httpRequest({
          port: running.port,
          host: '127.0.0.1',
          path,
          headers: {
            ...bearer(user),
            connection: 'Upgrade',
            upgrade: 'websocket',
            'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
            'sec-websocket-version': '13',
          },
        });
        outgoing.on('upgrade', (response, socket) => {
          socket.destroy();
          resolve(response.statusCode!);
        });
        outgoing.on('response', (response) => {
          response.resume();
          resolve(response.statusCode!);
        });
        outgoing.on('error', reject);
        outgoing.end();
      });
    expect(await handshake('/api/public/ws/accept')).toBe(101);
    expect(await handshake('/api/public/ws/decline')).toBe(403);
    await eventually(() => accessLines(log).length >= 2);
    expect(accessLines(log)).toEqual([
      expect.objectContaining({ level: 30, route: '/api/public/ws', method: 'GET', status: 101, tokenKind: 'user', clientId: 'client-web' }),
      expect.objectContaining({ level: 30, route: '/api/public/ws', method: 'GET', status: 403, tokenKind: 'user' }),
    ]);
    const timed = await running.tokengate.context.metrics.upstreamDuration.get();
    const counts = timed.values.filter((value) => value.metricName?.endsWith('_count') && value.labels.route === '/api/public/ws');
    expect(counts.map((value) => [value.labels.status_class, value.value])).toEqual([
      ['1xx', 1],
      ['4xx', 1],
    ]);
  });

  it('never writes a token, client secret, admin token, password, code or cookie', async () => {
    const user = await running.issue();
    const application = await registerApplication(running.store);
    const password = `pw-${randomBytes(12).toString('hex')}`;
    const cookie = `session=${randomBytes(16).toString('hex')}`;
    const code = randomBytes(32).toString('base64url');
    await fetch(`${running.baseUrl}/api/public/me?access_token=${user}`, { headers: { cookie } });
    await fetch(`${running.baseUrl}/api/public/me`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie },
      body: `access_token=${user}`,
    });
    await fetch(`${running.baseUrl}/api/public/tickets`, { headers: { ...bearer(user), cookie } });
    await postForm(`${running.baseUrl}/oauth/token`, {
      grant_type: 'authorization_code',
      code,
      redirect_uri: application.redirectUri,
      client_id: application.clientId,
      client_secret: application.clientSecret,
    });
    await postForm(`${running.baseUrl}/oauth/authorize/login`, { email: 'someone@example.com', password }, { cookie });
    await fetch(`${running.opsUrl}/admin/users`, {
      method: 'POST',
      headers: { ...bearer(ADMIN_TOKEN), 'content-type': 'application/json' },
      body: JSON.stringify({ email: `${randomBytes(4).toString('hex')}@example.com`, password }),
    });
    await fetch(`${running.opsUrl}/admin/users`, { headers: bearer(`${ADMIN_TOKEN}x`) });
    await eventually(() => accessLines(log).filter((line) => line.listener === 'ops' && line.route === '/admin/users').length >= 2);
    const text = log.text();
    expect(text).toContain('request completed');
    for (const secret of [user, application.clientSecret!, ADMIN_TOKEN, password, code, cookie.split('=')[1]!])
      expect(text, 'a secret reached the log').not.toContain(secret);
  });
});

describe('with the default logging.requests (errors)', () => {
  it('logs only what the service failed to serve: a flood of refusals writes nothing, even at debug, but each 5xx is a warn line', async () => {
    const log = captureLog('debug');
    const running = await loggingTokengate(log);
    try {
      expect(running.tokengate.context.config.logging.requests).toBe('errors');
      for (let index = 0; index < 50; index += 1) {
        const forged = randomBytes(32).toString('base64url');
        expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(forged) })).status).toBe(401);
      }
      expect((await fetch(`${running.baseUrl}/api/public/me`)).status).toBe(401);
      expect((await fetch(`${running.baseUrl}/nowhere`)).status).toBe(404);
      const user = await running.issue();
      expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(user) })).status).toBe(200);
      expect((await fetch(`${running.baseUrl}/api/public/tickets`, { headers: bearer(user) })).status).toBe(502);
      expect(accessLines(log)).toEqual([expect.objectContaining({ level: 40, status: 502, reason: 'upstream_unreachable', error: 'ECONNREFUSED' })]);
      // Every refusal is still counted by reason.
      const counted = await running.tokengate.context.metrics.gatewayRequests.get();
      expect(counted.values.find((value) => value.labels.reason === 'forged_token')?.value).toBe(50);
    } finally {
      await running.close();
    }
  });
});

describe('with logging.requests: none', () => {
  it('writes no line per request, failures included', async () => {
    const log = captureLog('debug');
    const running = await loggingTokengate(log, { requests: 'none' });
    try {
      const user = await running.issue();
      expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(user) })).status).toBe(200);
      expect((await fetch(`${running.baseUrl}/api/public/tickets`, { headers: bearer(user) })).status).toBe(502);
      expect((await fetch(`${running.baseUrl}/api/public/me`)).status).toBe(401);
      expect(accessLines(log)).toEqual([]);
    } finally {
      await running.close();
    }
  });
});
