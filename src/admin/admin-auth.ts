import type { FastifyReply, FastifyRequest } from 'fastify';
import { TokengateError } from '../errors.js';
import { parseBearer } from '../http/bearer.js';
import { constantTimeEqual } from '../token/constant-time.js';

/**
 * With `admin.token` set, every admin request carries it as a bearer token. Without it the API
 * is open, which config loading allows only on a loopback address.
 */
export function requireAdminToken(expected: string) {
  return async function checkAdminToken(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    // Responses carry client secrets and user data: no cache keeps them.
    reply.header('cache-control', 'no-store');
    if (expected === '') return;
    const authorization = request.headers.authorization;
    const presented = authorization === undefined ? null : parseBearer(authorization);
    if (typeof presented !== 'string' || !constantTimeEqual(presented, expected)) {
      throw new TokengateError('ADMIN_UNAUTHORIZED', { detail: typeof presented !== 'string' ? 'no admin token' : 'wrong admin token' });
    }
  };
}
