import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeServer } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { eventually } from './support/wait.js';

/**
 * Open-ended answers through the gateway: an event stream's head reaches its client when the
 * upstream sends it, not with the first event; an event stream idle past its bound ends as an
 * event stream may; a chunked body idle past the route's timeout is cut; and an MCP client's
 * standalone stream, quiet for longer than the route's timeoutMs, still brings the server's
 * notification.
 */

const TIMEOUT_MS = 1_000;
const STREAM_IDLE_MS = 1_500;
/** A bound for a hang: what it waits for comes at once on the fixed code. */
const HANG_BOUND_MS = 10_000;

/** Resolves with `promise`, or rejects naming `what` once HANG_BOUND_MS passed without it. */
function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const bound = new Promise<never>((_resolve, reject) => (timer = setTimeout(() => reject(new Error(`no ${what} within ${HANG_BOUND_MS} ms`)), HANG_BOUND_MS)));
  return Promise.race([promise, bound]).finally(() => clearTimeout(timer));
}

/** An upstream that sends a head at once and each chunk of its body only when the test says so. */
function startHeldUpstream() {
  const held: Array<{ response: ServerResponse; path: string }> = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const eventStream = request.url!.startsWith('/events');
    response.writeHead(200, { 'content-type': eventStream ? 'text/event-stream' : 'application/octet-stream', 'cache-control': 'no-store' });
    response.flushHeaders();
    held.push({ response, path: request.url! });
  });
  return {
    server,
    held,
    async listen(): Promise<string> {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
  };
}

/** A stateful MCP server (sessions, the standalone GET stream) that tells when a client opened its stream. */
function startStreamingMcpServer() {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const servers: McpServer[] = [];
  let streamOpenedAt: number | null = null;
  const server = createServer((request, response) => {
    void (async () => {
      const sessionId = request.headers['mcp-session-id'];
      let transport = typeof sessionId === 'string' ? transports.get(sessionId) : undefined;
      if (transport === undefined) {
        const mcp = new McpServer({ name: 'announcements', version: '1.0.0' }, { capabilities: { logging: {} } });
        const created: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
          sessionIdGenerator: randomUUID,
          onsessioninitialized: (id) => void transports.set(id, created),
        });
        await mcp.connect(created);
        servers.push(mcp);
        transport = created;
      }
      if (request.method === 'GET') streamOpenedAt = Date.now();
      await transport.handleRequest(request, response);
    })();
  });
  return {
    server,
    servers,
    streamOpenedAt: () => streamOpenedAt,
    async listen(): Promise<string> {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
  };
}

const upstream = startHeldUpstream();
const mcp = startStreamingMcpServer();
let gateway: RunningTokengate;
let token: string;

beforeAll(async () => {
  const [heldUrl, mcpUrl] = await Promise.all([upstream.listen(), mcp.listen()]);
  gateway = await startTokengate('gateway-event-streams', {
    config: {
      routes: [
        { path: '/events', token: 'user', upstream: heldUrl, timeoutMs: TIMEOUT_MS, streamIdleTimeoutMs: STREAM_IDLE_MS },
        { path: '/chunks', token: 'user', upstream: heldUrl, timeoutMs: TIMEOUT_MS },
        { path: '/mcp', token: 'user', upstream: mcpUrl, timeoutMs: TIMEOUT_MS },
      ],
    },
  });
  token = await gateway.issue();
});

afterAll(async () => {
  await gateway?.close();
  for (const held of upstream.held) held.response.destroy();
  await Promise.all(mcp.servers.map((server) => server.close()));
  await Promise.all([closeServer(upstream.server), closeServer(mcp.server)]);
});

const get = (path: string, accept: string) => fetch(`${gateway.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}`, accept } });

describe('an event stream through the gateway', () => {
  it('reaches its client with its head when the upstream sends it, before any event', async () => {
    const answer = await within(get('/events/head', 'text/event-stream'), 'response head before the first event');
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('text/event-stream');
    const reader = answer.body!.getReader();
    await eventually(() => upstream.held.some((held) => held.path === '/events/head'));
    upstream.held.find((held) => held.path === '/events/head')!.response.write('data: first\n\n');
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: first\n\n');
    await reader.cancel();
  });

  it('ends, as an event stream may, once it is quiet past streamIdleTimeoutMs, and not at timeoutMs', async () => {
    const started = Date.now();
    const answer = await within(get('/events/quiet', 'text/event-stream'), 'response head');
    expect(answer.status).toBe(200);
    // Read to its end: no error (a cut connection would reject), and not before the stream's own bound.
    const body = await within(answer.text(), 'end of the quiet stream');
    expect(body).toBe('');
    expect(Date.now() - started).toBeGreaterThanOrEqual(STREAM_IDLE_MS);
  });
});

describe('a chunked body through the gateway', () => {
  it('reaches its client with its head at once, and is cut, never completed, once quiet past timeoutMs', async () => {
    const answer = await within(get('/chunks/quiet', '*/*'), 'response head');
    expect(answer.status).toBe(200);
    await expect(within(answer.arrayBuffer(), 'end of the quiet body')).rejects.toThrow(/terminated|aborted|closed|reset/i);
  });
});

describe("an MCP client's standalone stream through the gateway", () => {
  it('stays open past the route timeoutMs, and brings a notification the server sends after it', async () => {
    const client = new Client({ name: 'listener', version: '1.0.0' });
    const notified = new Promise<unknown>((resolve) =>
      client.setNotificationHandler(LoggingMessageNotificationSchema, (message) => resolve(message.params.data)),
    );
    const errors: string[] = [];
    client.onerror = (error) => errors.push(error.message);
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${gateway.baseUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }),
    );
    try {
      await eventually(() => mcp.streamOpenedAt() !== null);
      // The stream has been quiet for longer than the route's timeoutMs.
      await eventually(() => Date.now() - mcp.streamOpenedAt()! > TIMEOUT_MS + 500, HANG_BOUND_MS);
      await mcp.servers.at(-1)!.server.sendLoggingMessage({ level: 'info', data: 'the doors open at eight' });
      expect(await within(notified, 'notification on the standalone stream')).toBe('the doors open at eight');
      expect(errors).toEqual([]);
    } finally {
      await client.close();
    }
  });
});
