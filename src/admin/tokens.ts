import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { recordAdminChange } from './admin-auth.js';
import { readRevocationTarget } from './validate.js';

export function registerTokenRoutes(scope: FastifyInstance, context: TokengateContext): void {
  /**
   * Every access and refresh token of one user (all applications), of one application (all
   * users), or issued from the identity assertions of one subject of an identity provider.
   */
  scope.post('/tokens/revoke', async function revokeTokens(request) {
    const target = readRevocationTarget(request.body);
    const tokens = context.store.tokens;
    const revoked =
      'userId' in target
        ? await tokens.revokeUserTokens(target.userId)
        : 'clientId' in target
          ? await tokens.revokeClientTokens(target.clientId)
          : await tokens.revokeIdentityTokens(target.identityProvider, target.subject);
    recordAdminChange(request, { action: 'tokens revoked by the operator', ...target, revoked });
    return { revoked };
  });
}

/**
 * The identity providers trusted for identity assertions, as the config in effect lists them,
 * each with its shared signals receiver and that stream's state (as every sidecar shares it).
 */
export function registerIdentityProviderRoutes(scope: FastifyInstance, context: TokengateContext): void {
  scope.get('/identity-providers', async function listIdentityProviders() {
    const streams = new Map((await context.sharedSignals.list()).map((stream) => [stream.name, stream]));
    return {
      identityProviders: context.identityProviders.list().map((provider) => {
        const name = context.sharedSignals.nameOf(provider.issuer);
        const stream = name === undefined ? undefined : streams.get(name);
        return stream === undefined ? provider : { ...provider, sharedSignals: stream };
      }),
    };
  });
}
