import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { jsonErrorHandler } from '../errors.js';
import { requireAdminToken } from './admin-auth.js';
import { registerApplicationRoutes } from './applications.js';
import { registerClientMetadataRoutes } from './client-metadata.js';
import { registerKeyRoutes } from './keys.js';
import { registerIdentityProviderRoutes, registerTokenRoutes } from './tokens.js';
import { ADMIN_PREFIX } from './paths.js';
import { registerUserRoutes } from './users.js';

/**
 * The admin API under /admin on the ops listener, as one encapsulated plugin: its token check
 * covers these routes only, so /healthz, /readyz and /metrics stay open to probes and scrapers.
 */
export async function registerAdmin(ops: FastifyInstance, context: TokengateContext): Promise<void> {
  await ops.register(
    async function adminApi(scope) {
      scope.setErrorHandler(jsonErrorHandler(`${context.config.gateway.realm} admin`));
      scope.addHook('onRequest', requireAdminToken(context.config.admin.token));
      registerApplicationRoutes(scope, context);
      registerUserRoutes(scope, context);
      registerTokenRoutes(scope, context);
      registerClientMetadataRoutes(scope, context);
      registerKeyRoutes(scope, context);
      registerIdentityProviderRoutes(scope, context);
    },
    { prefix: ADMIN_PREFIX },
  );
}
