import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import { observeRequests, type RequestLog } from '../observability/requests.js';
import type { OpenIdConnect } from './index.js';

/** Where applications fetch the keys that sign ID tokens (the discovery document's `jwks_uri`): the conventional path, since these are the issuer's token-signing keys. */
export const OPENID_JWKS_PATH = '/.well-known/jwks.json';

/** GET the JWKS: every algorithm's keys published now (a new one long before it signs), cacheable for `jwksMaxAgeSeconds`. */
export async function registerOpenIdJwks(app: FastifyInstance, openid: OpenIdConnect, observed: { metrics: Metrics; requestLog: RequestLog }): Promise<void> {
  const cacheControl = `public, max-age=${openid.jwksMaxAgeSeconds}`;
  await app.register(async function openIdJwks(scope) {
    observeRequests(scope, 'public', observed.metrics, observed.requestLog);
    scope.get(OPENID_JWKS_PATH, async (_request, reply) =>
      reply
        .header('content-type', 'application/jwk-set+json')
        .header('cache-control', cacheControl)
        .header('access-control-allow-origin', '*')
        .send(openid.keys.jwksBody()),
    );
  });
}
