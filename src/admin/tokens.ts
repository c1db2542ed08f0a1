import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { recordAdminChange } from './admin-auth.js';
import { readRevocationTarget } from './validate.js';

export function registerTokenRoutes(scope: FastifyInstance, context: TokengateContext): void {
  /** Every access and refresh token of one user (all applications) or of one application (all users). */
  scope.post('/tokens/revoke', async function revokeTokens(request) {
    const target = readRevocationTarget(request.body);
    const revoked =
      'userId' in target ? await context.store.tokens.revokeUserTokens(target.userId) : await context.store.tokens.revokeClientTokens(target.clientId);
    recordAdminChange(request, { action: 'tokens revoked by the operator', ...target, revoked });
    return { revoked };
  });
}
