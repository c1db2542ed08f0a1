import { isIP } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { TokengateError } from '../errors.js';
import { parseBearer } from '../http/bearer.js';
import { constantTimeEqual } from '../token/constant-time.js';

/**
 * Who may call the admin API, and the record of every call. Each request passes three checks,
 * in this order, before any route sees it:
 *
 * 1. No `Origin` header: browsers send one on every cross-origin request and on every POST,
 *    PATCH and DELETE; no operator tool does. A page the operator has open cannot call the API.
 * 2. A `Host` the ops listener answers to: an IP address, `localhost`, or `admin.host`. A page
 *    whose name an attacker re-points at 127.0.0.1 (DNS rebinding) reaches the listener with its
 *    own name as the Host, and is refused.
 * 3. The admin token as a bearer token, compared in constant time. There always is one: the
 *    config's `admin.token`, or the one `tokengate serve` made (./credential.ts).
 *
 * The first two are refused 403 whatever the token; the third 401.
 */
export function guardAdminRequests(scope: FastifyInstance, expected: string, listenerHost: string): void {
  const ownName = listenerHost.toLowerCase();
  scope.addHook('onRequest', async function checkAdminCaller(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    // Responses carry client secrets and user data: no cache keeps them.
    reply.header('cache-control', 'no-store');
    if (request.headers.origin !== undefined) {
      throw new TokengateError('ADMIN_FORBIDDEN', {
        description: 'The admin API does not answer requests made by a browser (an Origin header).',
        detail: 'origin header',
      });
    }
    if (!isListenerHost(request.headers.host, ownName)) {
      throw new TokengateError('ADMIN_FORBIDDEN', {
        description: 'The admin API answers only requests addressed to the ops listener by IP address, localhost or admin.host.',
        detail: 'foreign host',
      });
    }
    const authorization = request.headers.authorization;
    const presented = authorization === undefined ? null : parseBearer(authorization);
    // An instance built without a token (none configured, none made) refuses every call.
    if (typeof presented !== 'string' || expected === '' || !constantTimeEqual(presented, expected)) {
      throw new TokengateError('ADMIN_UNAUTHORIZED', { detail: typeof presented !== 'string' ? 'no admin token' : 'wrong admin token' });
    }
  });
}

/**
 * Whether a Host header names the ops listener as no rebound name can: an IP literal (a browser
 * sends the name it resolved, never the address), `localhost`, or the listener's own host name.
 * Any port: a port forward (kubectl, docker -p) changes it, and it tells nothing of the name.
 */
function isListenerHost(host: string | undefined, ownName: string): boolean {
  if (host === undefined) return false;
  const url = URL.parse(`http://${host}`);
  if (url === null || url.username !== '' || url.password !== '' || url.pathname !== '/' || url.search !== '' || url.hash !== '') return false;
  const name = url.hostname;
  if (name.startsWith('[')) return true;
  return isIP(name) === 4 || name === 'localhost' || name === ownName;
}

/** What an admin call changed, for its audit line: ids and the names of changed fields, never a secret. */
export interface AdminChange {
  readonly action: string;
  readonly [field: string]: string | number | boolean | readonly string[];
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by an admin route that changed something (recordAdminChange). */
    adminChange: AdminChange | null;
  }
}

/** Names what this admin call changed on its audit line. */
export function recordAdminChange(request: FastifyRequest, change: AdminChange): void {
  request.adminChange = change;
}

/**
 * One audit line per admin call, refused ones included, once it is answered: who called (the
 * peer's address and port: the ops listener trusts no forwarding header), the Host it named,
 * method, route, status, and what it changed. Never a header value, a body, or a token.
 */
export function auditAdminCalls(scope: FastifyInstance): void {
  scope.decorateRequest('adminChange', null);
  scope.addHook('onResponse', async function auditAdminCall(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const socket = request.raw.socket;
    request.log.info(
      {
        audit: {
          remoteAddress: socket.remoteAddress,
          remotePort: socket.remotePort,
          host: request.headers.host,
          method: request.method,
          route: request.routeOptions.url ?? request.url.split('?', 1)[0],
          status: reply.statusCode,
          ...(request.adminChange ?? {}),
        },
      },
      'admin call',
    );
  });
}
