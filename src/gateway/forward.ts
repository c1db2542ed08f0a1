import { request as httpRequest, ServerResponse, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import replyFrom, { type FastifyReplyFromHooks } from '@fastify/reply-from';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Counter, Histogram } from 'prom-client';
import type { TokengateContext } from '../context.js';
import type { AccessTokenRecord } from '../store/store.js';
import { deny, type Denial } from './denials.js';
import type { Credential } from './extract-credential.js';
import type { TargetFactory } from './route-table.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The verified token of the request being forwarded; the header rewrite reads it. */
    gatewayGrant: AccessTokenRecord | null;
    /** The query string the upstream receives (without `?`): the request's minus access_token. */
    gatewayQuery: string;
  }
}

/** One upstream of one route, compiled at start; requests only read it. */
export interface ForwardTarget {
  /** `http://host:port`: the request path is appended as is. */
  readonly origin: string;
  readonly url: URL;
  readonly timeoutMs: number;
  /** Options of every reply.from() to this target, built once (no per-request closures). */
  readonly replyOptions: FastifyReplyFromHooks;
  readonly forwarded: Counter.Internal;
  readonly duration: Histogram.Internal<'route'>;
  readonly unreachable: Denial;
  readonly timedOut: Denial;
}

export interface Forwarder {
  readonly createTarget: TargetFactory<ForwardTarget>;
  /** Sends the request to the target: normalized path, cleaned query, headers and body; streams both ways. */
  forward(request: FastifyRequest, reply: FastifyReply, target: ForwardTarget, path: string, credential: Credential, grant: AccessTokenRecord): FastifyReply;
  /** Opens the WebSocket to the target and joins the two connections; the check has already passed. */
  forwardUpgrade(
    request: FastifyRequest,
    reply: FastifyReply,
    target: ForwardTarget,
    path: string,
    credential: Credential,
    grant: AccessTokenRecord,
  ): FastifyReply;
}

/** Hop-by-hop headers (RFC 9110 7.6.1) a proxy must not pass on; connection and transfer-encoding are reply-from's. */
const HOP_BY_HOP = ['keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade', 'http2-settings'];
/** Forwarding headers a client could forge; replaced by the gateway's own unless server.trustProxy. */
const FORWARDING = ['forwarded', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-forwarded-prefix', 'x-real-ip'];

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

/**
 * The forwarding stage: @fastify/reply-from over an undici keep-alive pool per upstream origin,
 * and a byte tunnel for WebSocket upgrades. Upgrade requests are routed through the same
 * fastify route (and so the same extract -> verify -> authorize steps) before anything is
 * opened upstream.
 */
export async function createForwarder(scope: FastifyInstance, context: TokengateContext): Promise<Forwarder> {
  const { gateway, server } = context.config;
  const requestIdHeader = gateway.requestIdHeader.toLowerCase();
  const identity = {
    userId: gateway.identityHeaders.userId.toLowerCase(),
    clientId: gateway.identityHeaders.clientId.toLowerCase(),
    scope: gateway.identityHeaders.scope.toLowerCase(),
    tokenKind: gateway.identityHeaders.tokenKind.toLowerCase(),
  };
  const trustProxy = server.trustProxy;
  // Everything a client may not send on: its credential, identity headers and (untrusted) forwarding headers.
  const spoofable = [...Object.values(identity), ...(trustProxy ? [] : FORWARDING)];
  const stripped = ['authorization', 'proxy-authorization', ...spoofable];
  const spoofableSpellings = new Set(spoofable);

  await scope.register(replyFrom, {
    disableRequestLogging: true,
    // Close the pool with the app, so no upstream socket outlives it.
    destroyAgent: true,
    undici: { connections: 128, pipelining: 1 },
  });

  /** The request headers the upstream receives. Mutates and returns `headers`, a copy of the request's. */
  function upstreamHeaders(request: FastifyRequest, headers: IncomingHttpHeaders): IncomingHttpHeaders {
    const grant = request.gatewayGrant!;
    for (const name of stripped) delete headers[name];
    // CGI-style servers read "x_auth_user_id" as "x-auth-user-id": strip those spellings too.
    for (const name in headers) {
      if (name.includes('_') && spoofableSpellings.has(name.replaceAll('_', '-'))) delete headers[name];
    }
    const peer = request.raw.socket.remoteAddress ?? '';
    const inboundFor = trustProxy ? headers['x-forwarded-for'] : undefined;
    headers['x-forwarded-for'] = inboundFor === undefined ? peer : `${String(inboundFor)}, ${peer}`;
    // fastify reads X-Forwarded-Proto/-Host only when server.trustProxy is on.
    headers['x-forwarded-proto'] = request.protocol;
    if (request.host !== '') headers['x-forwarded-host'] = request.host;
    if (grant.userId !== null) headers[identity.userId] = grant.userId;
    headers[identity.clientId] = grant.clientId;
    headers[identity.scope] = grant.scopes.join(' ');
    headers[identity.tokenKind] = grant.kind;
    headers[requestIdHeader] = request.id;
    return headers;
  }

  function upstreamHttpHeaders(request: FastifyRequest, headers: IncomingHttpHeaders): IncomingHttpHeaders {
    for (const name of HOP_BY_HOP) delete headers[name];
    // undici refuses Expect; node has already answered 100-continue to the client.
    delete headers.expect;
    // A GET or HEAD body is never forwarded, so its framing headers must not be either.
    if (request.method === 'GET' || request.method === 'HEAD') {
      delete headers['content-length'];
      delete headers['transfer-encoding'];
    }
    return upstreamHeaders(request, headers);
  }

  function clientResponseHeaders(headers: IncomingHttpHeaders, request?: FastifyRequest): IncomingHttpHeaders {
    delete headers.connection;
    for (const name of HOP_BY_HOP) delete headers[name];
    if (request !== undefined) headers[requestIdHeader] = request.id;
    return headers;
  }

  const forwardedQuery = ((_search: string | undefined, _url: string, request: FastifyRequest) => request.gatewayQuery) as FastifyReplyFromHooks['queryString'];
  const neverRetry = () => null;

  const createTarget: TargetFactory<ForwardTarget> = ({ route, label, upstream, denials }) => {
    const url = new URL(upstream);
    const forwarded = context.metrics.gatewayRequests.labels(label, 'forwarded', 'ok');
    const duration = context.metrics.gatewayDuration.labels(label);
    const target: ForwardTarget = {
      origin: url.origin,
      url,
      timeoutMs: route.timeoutMs,
      forwarded,
      duration,
      unreachable: denials.upstream_unreachable,
      timedOut: denials.upstream_timeout,
      replyOptions: {
        timeout: route.timeoutMs,
        queryString: forwardedQuery,
        rewriteRequestHeaders: upstreamHttpHeaders as FastifyReplyFromHooks['rewriteRequestHeaders'],
        rewriteHeaders: clientResponseHeaders as FastifyReplyFromHooks['rewriteHeaders'],
        // A gateway must not replay requests on its own (reply-from retries GETs on a 503).
        retryDelay: neverRetry,
        onResponse(request, reply, response) {
          forwarded.inc();
          duration.observe(reply.elapsedTime / 1000);
          reply.send(response.stream);
        },
        onError(reply, { error }) {
          deny(
            reply.request as FastifyRequest,
            reply as FastifyReply,
            (error as { statusCode?: number }).statusCode === 504 ? target.timedOut : target.unreachable,
          );
        },
      },
    };
    return target;
  };

  function forward(
    request: FastifyRequest,
    reply: FastifyReply,
    target: ForwardTarget,
    path: string,
    credential: Credential,
    grant: AccessTokenRecord,
  ): FastifyReply {
    request.gatewayGrant = grant;
    request.gatewayQuery = credential.query;
    const source = target.origin + path;
    if (credential.body === undefined) return reply.from(source, target.replyOptions);
    // The body was read to look for a token: send what is left of it (reply-from sets Content-Length).
    return reply.from(source, { ...target.replyOptions, body: credential.body, contentType: request.headers['content-type'] ?? 'application/octet-stream' });
  }

  scope.decorateRequest('gatewayGrant', null);
  scope.decorateRequest('gatewayQuery', '');

  // WebSocket: node hands upgrade requests to this listener with the raw socket. They are
  // dispatched through the router like any request, so they meet the same route and checks;
  // every answer other than an accepted upgrade is an ordinary response, then the connection ends.
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

  function forwardUpgrade(
    request: FastifyRequest,
    reply: FastifyReply,
    target: ForwardTarget,
    path: string,
    credential: Credential,
    grant: AccessTokenRecord,
  ): FastifyReply {
    const client = (request.raw as UpgradingRequest)[kUpgrade]!;
    request.gatewayGrant = grant;
    const headers = upstreamHeaders(request, withoutConnectionHeaders({ ...request.headers }));
    headers.host = target.url.host;
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
    outgoing.on('upgrade', (response: IncomingMessage, upstream: Socket, upstreamHead: Buffer) => {
      reply.hijack();
      target.forwarded.inc();
      target.duration.observe(reply.elapsedTime / 1000);
      upstream.setTimeout(0);
      client.socket.write(switchingProtocolsHead(response, requestIdHeader, request.id));
      if (upstreamHead.length > 0) client.socket.write(upstreamHead);
      if (client.head.length > 0) upstream.write(client.head);
      join(client.socket, upstream);
    });
    // The upstream declined the upgrade: its answer goes back like any response.
    outgoing.on('response', (response: IncomingMessage) => {
      target.forwarded.inc();
      target.duration.observe(reply.elapsedTime / 1000);
      reply
        .code(response.statusCode ?? 502)
        .headers(clientResponseHeaders({ ...response.headers }, request))
        .send(response);
    });
    outgoing.on('timeout', () => outgoing.destroy(new UpstreamTimeout()));
    outgoing.on('error', (error) => {
      if (!reply.sent) deny(request, reply, error instanceof UpstreamTimeout ? target.timedOut : target.unreachable);
    });
    // A client that leaves (or an app that closes) before the upstream answered cancels the handshake.
    client.socket.on('close', () => outgoing.destroy());
    outgoing.end();
    return reply;
  }

  return { createTarget, forward, forwardUpgrade };
}

class UpstreamTimeout extends Error {}

/** Removes Connection and the headers it names (hop-by-hop, RFC 9110 7.6.1). */
function withoutConnectionHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  for (const name of (headers.connection ?? '').split(',')) delete headers[name.trim().toLowerCase()];
  delete headers.connection;
  for (const name of HOP_BY_HOP) delete headers[name];
  delete headers.expect;
  delete headers['content-length'];
  delete headers['transfer-encoding'];
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
