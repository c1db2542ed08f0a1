import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/load-config.js';
import { closeServer } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { freePort } from './support/ports.js';

/**
 * DNS rebinding behind the gateway: the MCP conformance suite's `dns-rebinding-protection`
 * scenario (an initialize request whose Host and Origin name the attacker's site, then one whose
 * Host and Origin name the server) against an MCP server that checks its own Host, reached
 * through tokengate, where it sees only its own host; and the operator's lists of origins and hosts.
 */

const ATTACKER = 'evil.example.com';
const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'rebinding-check', version: '1.0.0' } },
});

/** A stateless MCP server with the SDK's own DNS rebinding protection on: it answers only its own Host. */
async function startProtectedMcpServer(): Promise<{ server: Server; url: string }> {
  let ownHost = '';
  const server = createServer((incoming, response) => {
    const mcp = new McpServer({ name: 'tickets', version: '1.0.0' });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableDnsRebindingProtection: true, allowedHosts: [ownHost] });
    response.on('close', () => void transport.close().then(() => mcp.close()));
    void mcp.connect(transport).then(() => transport.handleRequest(incoming, response));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  ownHost = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { server, url: `http://${ownHost}` };
}

let mcp: { server: Server; url: string };
let gateway: RunningTokengate;
let gatewayHost: string;
let token: string;

beforeAll(async () => {
  mcp = await startProtectedMcpServer();
  const port = await freePort();
  gatewayHost = `127.0.0.1:${port}`;
  const resource = `http://${gatewayHost}/mcp`;
  gateway = await startTokengate('gateway-origins', {
    port,
    config: {
      issuer: { issuerUrl: `http://${gatewayHost}` },
      resources: [{ identifier: resource }],
      routes: [
        { path: '/mcp', token: 'user', upstream: mcp.url, resource },
        { path: '/listed', token: 'user', upstream: mcp.url, allowedHosts: [gatewayHost, 'tickets.example'], allowedOrigins: ['https://app.example'] },
        { path: '/open', token: 'user', upstream: mcp.url },
      ],
    },
  });
  token = await gateway.issue({ audience: [resource] });
});

afterAll(async () => {
  await gateway?.close();
  if (mcp) await closeServer(mcp.server);
});

async function send(path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  const answer = await request(`${gateway.baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}`, ...headers },
    body: INITIALIZE,
  });
  return { status: answer.statusCode, body: await answer.body.text() };
}

describe("the MCP conformance suite's DNS rebinding scenario through the gateway", () => {
  it('refuses an initialize request whose Host and Origin name another site (4xx), though it carries a good token and the server sees only its own host', async () => {
    const attack = await send('/mcp', { host: ATTACKER, origin: `http://${ATTACKER}` });
    expect(attack.status).toBe(403);
    expect(JSON.parse(attack.body)).toMatchObject({ error: 'forbidden' });
  });

  it('answers the same request whose Host and Origin name the server (2xx)', async () => {
    const own = await send('/mcp', { host: gatewayHost, origin: `http://${gatewayHost}` });
    expect(own.status, own.body).toBe(200);
  });
});

describe("a route's lists of origins and hosts", () => {
  it('refuses a Host not on the list, with or without Origin, and a browser Origin not on it; answers the listed ones', async () => {
    expect((await send('/listed', { host: ATTACKER })).status).toBe(403);
    expect((await send('/listed', { host: 'tickets.example', origin: `http://${ATTACKER}` })).status).toBe(403);
    expect((await send('/listed', { host: 'TICKETS.example' })).status).toBe(200);
    expect((await send('/listed', { host: gatewayHost, origin: 'https://app.example' })).status).toBe(200);
    // A route without a resource or lists answers any, as before.
    expect((await send('/open', { host: ATTACKER, origin: `http://${ATTACKER}` })).status).toBe(200);
  });

  it('counts each refusal under its reason', async () => {
    await send('/listed', { host: ATTACKER });
    const metrics = await (await fetch(`${gateway.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/tokengate_gateway_requests_total\{[^}]*reason="foreign_host"[^}]*\} [1-9]/);
    expect(metrics).toMatch(/tokengate_gateway_requests_total\{[^}]*reason="foreign_origin"[^}]*\} [1-9]/);
  });

  it('are checked at load: each bad entry named by its key', () => {
    const text = JSON.stringify({
      routes: [
        { path: '/x', upstream: 'http://127.0.0.1:1', allowedOrigins: ['https://app.example/path', '*'], allowedHosts: ['bad host', 'ok.example:8443'] },
      ],
    });
    expect(() => parseConfig(text, 'origins.yaml', {})).toThrow(/routes\[0\]\.allowedOrigins\[0\][\s\S]*routes\[0\]\.allowedHosts\[0\]/);
  });
});
