import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { jsonErrorHandler } from '../errors.js';
import { auditAdminCalls, guardAdminRequests } from './admin-auth.js';
import { registerApplicationRoutes } from './applications.js';
import { registerClientMetadataRoutes } from './client-metadata.js';
import { registerKeyRoutes, registerOpenIdKeyRoutes } from './keys.js';
import { registerIdentityProviderRoutes, registerTokenRoutes } from './tokens.js';
import { ADMIN_PREFIX } from './paths.js';
import { registerUserRoutes } from './users.js';

/**
 * The admin API under /admin on the ops listener, as one encapsulated plugin: its checks of the
 * caller and its audit lines cover these routes only, so /healthz, /readyz and /metrics stay
 * open to probes and scrapers. `token`: the admin token (the config's, or the one `serve` made);
 * empty, every call is refused.
 */
export async function registerAdmin(ops: FastifyInstance, context: TokengateContext, token: string): Promise<void> {
  await ops.register(
    async function adminApi(scope) {
      scope.setErrorHandler(jsonErrorHandler(`${context.config.gateway.realm} admin`));
      auditAdminCalls(scope);
      guardAdminRequests(scope, token, context.config.admin.host);
      registerApplicationRoutes(scope, context);
      registerUserRoutes(scope, context);
      registerTokenRoutes(scope, context);
      registerClientMetadataRoutes(scope, context);
      registerKeyRoutes(scope, context);
      registerOpenIdKeyRoutes(scope, context);
      registerIdentityProviderRoutes(scope, context);
    },
    { prefix: ADMIN_PREFIX },
  );
}
