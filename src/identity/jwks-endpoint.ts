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

/** A published key set: its path, how long holders may keep it, and its current body. */
export interface PublishedKeySet {
  readonly path: string;
  readonly maxAgeSeconds: number;
  jwksBody(): string;
}

/**
 * GET a key set: the keys published now (a new one long before it signs, an old one until the
 * last token it signed has expired), cacheable for `maxAgeSeconds`, which the rotation timeline
 * is built around (docs/gateway.md#key-rotation). Each signer's keys get an endpoint of their own.
 */
export async function registerKeySet(app: FastifyInstance, keySet: PublishedKeySet, observed: { metrics: Metrics; requestLog: RequestLog }): Promise<void> {
  const cacheControl = `public, max-age=${keySet.maxAgeSeconds}`;
  await app.register(async function publishedKeySet(scope) {
    observeRequests(scope, 'public', observed.metrics, observed.requestLog);
    scope.get(keySet.path, async (_request, reply) =>
      reply
        .header('content-type', 'application/jwk-set+json')
        .header('cache-control', cacheControl)
        .header('access-control-allow-origin', '*')
        .send(keySet.jwksBody()),
    );
  });
}

/** The identity assertions' keys at JWKS_PATH. */
export function registerJwks(app: FastifyInstance, identity: SignedIdentity, observed: { metrics: Metrics; requestLog: RequestLog }): Promise<void> {
  return registerKeySet(app, { path: JWKS_PATH, maxAgeSeconds: identity.jwksMaxAgeSeconds, jwksBody: () => identity.ring.jwksBody() }, observed);
}
