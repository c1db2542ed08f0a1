import type { FastifyReply, FastifyRequest } from 'fastify';
import { TokengateError } from '../errors.js';
import { constantTimeEqual } from '../token/constant-time.js';

const BEARER = /^Bearer +(\S+) *$/i;

/**
 * With `admin.token` set, every admin request carries it as a bearer token. Without it the API
 * is open, which config loading allows only on a loopback address.
 */
export function requireAdminToken(expected: string) {
  return async function checkAdminToken(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    // Responses carry client secrets and user data: no cache keeps them.
    reply.header('cache-control', 'no-store');
    if (expected === '') return;
    const presented = BEARER.exec(request.headers.authorization ?? '')?.[1];
    if (presented === undefined || !constantTimeEqual(presented, expected)) {
      throw new TokengateError('ADMIN_UNAUTHORIZED', { detail: presented === undefined ? 'no admin token' : 'wrong admin token' });
    }
  };
}
