import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import { observeRequests, type RequestLog } from '../observability/requests.js';
import type { SignedIdentity } from './index.js';

/**
 * Where resource services fetch the keys that sign identity assertions. A path of its own rather
 * than `/.well-known/jwks.json`: these keys vouch only for assertions to upstreams, and a client
 * or service that takes the conventional path for an issuer's token-signing keys must not find
 * them there and trust them for anything else.
 */
export const JWKS_PATH = '/.well-known/tokengate-identity-jwks.json';

/**
 * GET the JWKS: the keys published now (a new one long before it signs, an old one until its last
 * assertion has expired), cacheable for `jwksMaxAgeSeconds`, which the rotation timeline is built
 * around (docs/gateway.md#key-rotation).
 */
export async function registerJwks(app: FastifyInstance, identity: SignedIdentity, observed: { metrics: Metrics; requestLog: RequestLog }): Promise<void> {
  const cacheControl = `public, max-age=${identity.jwksMaxAgeSeconds}`;
  await app.register(async function identityJwks(scope) {
    observeRequests(scope, 'public', observed.metrics, observed.requestLog);
    scope.get(JWKS_PATH, async (_request, reply) =>
      reply
        .header('content-type', 'application/jwk-set+json')
        .header('cache-control', cacheControl)
        .header('access-control-allow-origin', '*')
        .send(identity.ring.jwksBody()),
    );
  });
}
