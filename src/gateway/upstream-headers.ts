import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { GatewayConfig } from '../config/schema.js';
import { HOP_BY_HOP, namedByConnection } from '../http/hop-by-hop.js';
import { withoutSessionCookie } from '../http/session-cookie.js';
import { forwardedChain, lastForwardedValue, type ProxyTrust } from '../http/trusted-proxies.js';
import type { VerifiedToken } from '../store/verified-token.js';

/** Forwarding headers a client could forge; passed on only from a proxy server.trustProxy names. */
const FORWARDING = ['forwarded', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-port', 'x-forwarded-prefix', 'x-real-ip'];
/** The forwarding headers the gateway (re)writes itself, from the connection or, when trusted, the inbound ones. */
const REWRITTEN_FORWARDING = ['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host'];

/**
 * The header rewrite of a forwarded request, compiled at start. Both directions are flat
 * `[name, value, name, value...]` lists built in one pass over the message's raw headers: no
 * header object is copied per request, and repeated fields keep their order.
 */
export interface HeaderRules {
  /**
   * The request headers the upstream receives: the identity of the verified token and the
   * request id first (an upstream that keeps only the first N fields still sees who is calling),
   * the forwarding headers, then the client's own fields without the credential, any spelling
   * of the identity headers, untrusted forwarding headers and hop-by-hop fields. `bodyLength`:
   * the length of a body the gateway re-encoded; null when no body is forwarded; undefined when
   * the client's body streams through with its own framing. `assertion`: the signed identity, sent
   * first; `identityHeaders`: false on a route that sends it instead of them.
   */
  request(
    request: IncomingMessage,
    token: VerifiedToken,
    requestId: string,
    bodyLength: number | null | undefined,
    assertion?: string | null,
    identityHeaders?: boolean,
  ): string[];
  /** The upstream's response headers for the client: without hop-by-hop fields, with the request id. */
  response(rawHeaders: ReadonlyArray<Buffer | string>, requestId: string): string[];
  /** The identity headers alone (the decision listener answers with them). */
  identity(token: VerifiedToken, requestId: string): string[];
}

/**
 * `trust`: the proxies server.trustProxy names (null: none), whose forwarding headers are passed
 * on. `assertionHeader`: the signed identity's header (`signedIdentity.header`), which no client
 * may send on, whether the feature is on or not.
 */
export function compileHeaderRules(gateway: GatewayConfig, trust: ProxyTrust | null, assertionHeader: string): HeaderRules {
  const requestIdHeader = gateway.requestIdHeader.toLowerCase();
  const userIdHeader = gateway.identityHeaders.userId.toLowerCase();
  const clientIdHeader = gateway.identityHeaders.clientId.toLowerCase();
  const scopeHeader = gateway.identityHeaders.scope.toLowerCase();
  const tokenKindHeader = gateway.identityHeaders.tokenKind.toLowerCase();
  const actorClientIdHeader = gateway.identityHeaders.actorClientId.toLowerCase();
  // Everything a client may not send on: identity headers and, unless a trusted proxy sent the
  // request, forwarding headers, in every spelling; CGI-style servers read "x_auth_user_id" as
  // "x-auth-user-id".
  const identityHeader = assertionHeader.toLowerCase();
  const identityNames = [userIdHeader, clientIdHeader, scopeHeader, tokenKindHeader, actorClientIdHeader, identityHeader];
  const spoofableFromProxy = new Set(identityNames);
  const spoofableFromClient = new Set([...identityNames, ...FORWARDING]);
  const alwaysDropped = [
    ...HOP_BY_HOP,
    ...REWRITTEN_FORWARDING,
    requestIdHeader,
    'authorization',
    'proxy-authorization',
    // The DPoP proof is a credential too (RFC 9449): it goes no further than the check.
    'dpop',
    // The upstream's own host comes from its origin; the client's goes in X-Forwarded-Host.
    'host',
    // Answered by the gateway itself once the request is checked (see the gateway's handler).
    'expect',
  ];
  const droppedFromProxy = new Set([...spoofableFromProxy, ...alwaysDropped]);
  const droppedFromClient = new Set([...spoofableFromClient, ...alwaysDropped]);

  function identity(token: VerifiedToken, requestId: string): string[] {
    const headers =
      token.userId === null
        ? [clientIdHeader, token.clientId, scopeHeader, token.scope, tokenKindHeader, token.kind, requestIdHeader, requestId]
        : [userIdHeader, token.userId, clientIdHeader, token.clientId, scopeHeader, token.scope, tokenKindHeader, token.kind, requestIdHeader, requestId];
    // A token from a token exchange: the service acting for the user.
    if (token.act !== undefined) headers.push(actorClientIdHeader, token.act.clientId);
    return headers;
  }

  return {
    identity,

    request(request, token, requestId, bodyLength, assertion = null, identityHeaders = true) {
      const headers = identityHeaders ? identity(token, requestId) : [requestIdHeader, requestId];
      if (assertion !== null) headers.unshift(identityHeader, assertion);
      const inbound = request.headers;
      const peer = request.socket.remoteAddress ?? '';
      const fromProxy = trust !== null && trust(peer, 0);
      // From the client's address to the peer: what a trusted proxy wrote, never what the client
      // did, so that the upstream may take the leftmost entry as the client's address.
      headers.push('x-forwarded-for', fromProxy ? forwardedChain(request, trust).reverse().join(', ') : peer);
      const ownProtocol = (request.socket as TLSSocket).encrypted === true ? 'https' : 'http';
      // The values fastify reads for the request's protocol and host (DPoP, cookies): the last a proxy wrote.
      headers.push('x-forwarded-proto', (fromProxy ? lastForwardedValue(inbound['x-forwarded-proto']) : undefined) ?? ownProtocol);
      const host = (fromProxy ? lastForwardedValue(inbound['x-forwarded-host']) : undefined) ?? inbound.host;
      if (host !== undefined && host !== '') headers.push('x-forwarded-host', host);
      const dropped = fromProxy ? droppedFromProxy : droppedFromClient;
      const spoofable = fromProxy ? spoofableFromProxy : spoofableFromClient;
      if (bodyLength !== undefined && bodyLength !== null) headers.push('content-length', String(bodyLength));

      const named = namedByConnection(inbound.connection);
      const raw = request.rawHeaders;
      for (let index = 0; index < raw.length; index += 2) {
        const name = raw[index]!;
        const lower = name.toLowerCase();
        if (dropped.has(lower)) continue;
        if (lower === 'content-length' && bodyLength !== undefined) continue;
        if (lower.includes('_') && spoofable.has(lower.replaceAll('_', '-'))) continue;
        if (named !== null && named.has(lower)) continue;
        if (lower === 'cookie') {
          // The sign-in session is the issuer's: over https its cookie has Path=/ (__Host-), and no API gets it.
          const cookie = withoutSessionCookie(raw[index + 1]!);
          if (cookie !== null) headers.push(name, cookie);
          continue;
        }
        headers.push(name, raw[index + 1]!);
      }
      return headers;
    },

    response(rawHeaders, requestId) {
      const headers: string[] = [];
      let named: ReadonlySet<string> | null = null;
      for (let index = 0; index < rawHeaders.length; index += 2) {
        const name = latin1(rawHeaders[index]!);
        const lower = name.toLowerCase();
        if (HOP_BY_HOP.has(lower)) {
          if (lower === 'connection') named = namedByConnection(latin1(rawHeaders[index + 1]!));
          continue;
        }
        if (lower === requestIdHeader) continue;
        headers.push(name, latin1(rawHeaders[index + 1]!));
      }
      if (named !== null) removeNamed(headers, named);
      headers.push(requestIdHeader, requestId);
      return headers;
    },
  };
}

/** undici gives header bytes, node:http strings: latin1 keeps every byte as the upstream sent it. */
function latin1(value: Buffer | string): string {
  return typeof value === 'string' ? value : value.toString('latin1');
}

/** Removes in place the fields a `Connection` header named (rare: only then is the list scanned twice). */
function removeNamed(headers: string[], named: ReadonlySet<string>): void {
  let kept = 0;
  for (let index = 0; index < headers.length; index += 2) {
    if (named.has(headers[index]!.toLowerCase())) continue;
    headers[kept] = headers[index]!;
    headers[kept + 1] = headers[index + 1]!;
    kept += 2;
  }
  headers.length = kept;
}
