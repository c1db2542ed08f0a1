import { request as httpRequest, ServerResponse, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { VerifiedToken } from '../store/verified-token.js';
import { deny } from './denials.js';
import type { Credential } from './extract-credential.js';
import type { ForwardTarget } from './forward.js';
import type { HeaderRules } from './upstream-headers.js';

const kUpgrade = Symbol('tokengate.upgrade');
interface UpgradingRequest extends IncomingMessage {
  [kUpgrade]?: { socket: Duplex; head: Buffer };
}

/** The request came through the upgrade listener (it carries an Upgrade header). */
export function isUpgrade(request: FastifyRequest): boolean {
  return (request.raw as UpgradingRequest)[kUpgrade] !== undefined;
}

/** True for a WebSocket handshake (the only upgrade the gateway forwards). */
export function isWebSocketUpgrade(request: FastifyRequest): boolean {
  return request.method === 'GET' && request.headers.upgrade?.toLowerCase() === 'websocket';
}

export type UpgradeForwarder = (
  request: FastifyRequest,
  reply: FastifyReply,
  target: ForwardTarget,
  path: string,
  credential: Credential,
  token: VerifiedToken,
  assertion: string | null,
  identityHeaders: boolean,
) => void;

/**
 * WebSocket upgrades. Node hands upgrade requests to their own listener with the raw socket;
 * they are dispatched through the gateway's router like any request, so they meet the same
 * route and the same checks (./check.ts) before anything is opened upstream.
 * Every answer other than an accepted upgrade is an ordinary response, then the connection
 * ends. An accepted one becomes a byte tunnel between the two sockets.
 */
export function handleUpgrades(scope: FastifyInstance, rules: HeaderRules, requestIdHeader: string): UpgradeForwarder {
  // Client sockets of upgrade requests, checked or tunnelled: closing the app ends them.
  const upgrades = new Set<Duplex>();
  scope.server.on('upgrade', (raw: UpgradingRequest, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    upgrades.add(socket);
    socket.on('close', () => upgrades.delete(socket));
    raw[kUpgrade] = { socket, head };
    const response = new ServerResponse(raw);
    response.shouldKeepAlive = false;
    response.assignSocket(socket as Socket);
    response.on('finish', () => socket.end());
    scope.routing(raw, response);
  });
  scope.addHook('preClose', (done) => {
    for (const socket of upgrades) socket.destroy();
    done();
  });

  return function forwardUpgrade(request, reply, target, path, credential, token, assertion, identityHeaders) {
    const client = (request.raw as UpgradingRequest)[kUpgrade]!;
    const headers = headerObject(rules.request(request.raw, token, request.id, null, assertion, identityHeaders));
    headers.connection = 'Upgrade';
    headers.upgrade = request.headers.upgrade;
    const outgoing = (target.url.protocol === 'https:' ? httpsRequest : httpRequest)({
      hostname: target.url.hostname,
      port: target.url.port,
      method: 'GET',
      path: credential.query === '' ? path : `${path}?${credential.query}`,
      headers,
      agent: false,
      timeout: target.timeoutMs,
    });
    const sentAfterMs = reply.elapsedTime;
    const answered = (status: number) => {
      const elapsedMs = reply.elapsedTime;
      target.forwarded.inc();
      target.duration.observe(elapsedMs / 1000, request.trace);
      target.upstreamDuration.observe(status, (elapsedMs - sentAfterMs) / 1000);
    };
    outgoing.on('upgrade', (response: IncomingMessage, upstream: Socket, upstreamHead: Buffer) => {
      reply.hijack();
      answered(101);
      // The request is done when the tunnel opens; what flows through it is the upstream's.
      target.requests.completed(request, reply, 101, undefined, token);
      upstream.setTimeout(0);
      client.socket.write(switchingProtocolsHead(response, requestIdHeader, request.id));
      if (upstreamHead.length > 0) client.socket.write(upstreamHead);
      if (client.head.length > 0) upstream.write(client.head);
      join(client.socket, upstream);
    });
    // The upstream declined the upgrade: its answer goes back like any response.
    outgoing.on('response', (response: IncomingMessage) => {
      const status = response.statusCode ?? 502;
      answered(status);
      reply.hijack();
      reply.raw.writeHead(status, rules.response(response.rawHeaders, request.id));
      reply.raw.on('close', () => target.requests.completed(request, reply, status, undefined, token));
      response.pipe(reply.raw);
    });
    outgoing.on('timeout', () => outgoing.destroy(new UpstreamTimeout()));
    outgoing.on('error', (error) => {
      if (!reply.sent) deny(request, reply, error instanceof UpstreamTimeout ? target.timedOut : target.unreachable, requestIdHeader);
    });
    // A client that leaves (or an app that closes) before the upstream answered cancels the handshake.
    client.socket.on('close', () => outgoing.destroy());
    outgoing.end();
  };
}

class UpstreamTimeout extends Error {}

/** A flat header list as node:http's request options take it (repeated fields become arrays). */
function headerObject(list: readonly string[]): OutgoingHttpHeaders {
  const headers: Record<string, string | string[]> = {};
  for (let index = 0; index < list.length; index += 2) {
    const name = list[index]!.toLowerCase();
    const value = list[index + 1]!;
    const previous = headers[name];
    headers[name] = previous === undefined ? value : [...(Array.isArray(previous) ? previous : [previous]), value];
  }
  return headers;
}

/** The upstream's 101 response head, relayed as the upstream sent it, plus the request id. */
function switchingProtocolsHead(response: IncomingMessage, requestIdHeader: string, requestId: string): string {
  let head = `HTTP/1.1 101 ${response.statusMessage ?? 'Switching Protocols'}\r\n`;
  for (let index = 0; index < response.rawHeaders.length; index += 2) {
    if (response.rawHeaders[index]!.toLowerCase() !== requestIdHeader) head += `${response.rawHeaders[index]}: ${response.rawHeaders[index + 1]}\r\n`;
  }
  return `${head}${requestIdHeader}: ${requestId}\r\n\r\n`;
}

/** Pipes two sockets into each other until either side closes or fails; then both go. */
function join(client: Duplex, upstream: Socket): void {
  const close = () => {
    client.destroy();
    upstream.destroy();
  };
  for (const socket of [client, upstream]) {
    socket.on('error', close);
    socket.on('close', close);
  }
  client.pipe(upstream);
  upstream.pipe(client);
}
