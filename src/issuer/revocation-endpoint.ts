import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { clientFinder } from './clients.js';
import { authenticateClient } from './client-auth.js';
import { findToken, type FoundToken } from './find-token.js';
import { backChannelRouteOptions, parseBody, rejectRepeatedParameters, requireParameter } from './oauth-request.js';

export const REVOCATION_ENDPOINT_PATH = '/oauth/revoke';

/**
 * POST /oauth/revoke (RFC 7009). The answer is 200 with an empty body whether or not anything
 * was revoked: unknown, expired and already revoked tokens included (section 2.2).
 */
export function registerRevocationEndpoint(scope: FastifyInstance, context: TokengateContext): void {
  const findClient = clientFinder(context);
  scope.post(REVOCATION_ENDPOINT_PATH, backChannelRouteOptions(context.config), async function revocationEndpoint(request, reply) {
    const parameters = rejectRepeatedParameters(parseBody(request));
    const client = await authenticateClient(request, parameters, findClient, { allowPublicClients: true });
    const token = requireParameter(parameters, 'token');
    const found = await findToken(context, token, parameters.token_type_hint);
    // A token of another client is not revoked, and the answer is the same 200, so that the
    // endpoint tells nobody which values are live tokens (RFC 7009 section 5).
    if (found !== null && found.record.clientId === client.application.clientId) {
      const revoked = await revoke(context, found);
      request.log.info({ clientId: client.application.clientId, tokenType: found.type, revoked }, 'token revoked');
    }
    return reply.code(200).send();
  });
}

/**
 * An access token goes alone. A refresh token takes its whole token family with it, the access
 * tokens issued from the same grant included (RFC 7009 section 2.1: SHOULD).
 */
function revoke(context: TokengateContext, found: FoundToken): Promise<number> {
  return found.type === 'access_token' ? context.store.tokens.revokeAccessToken(found.digest) : context.store.tokens.revokeFamily(found.record.familyId);
}
