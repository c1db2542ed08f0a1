import type { FastifyInstance } from 'fastify';
import { registerKeySet } from '../identity/jwks-endpoint.js';
import type { Metrics } from '../observability/metrics.js';
import type { RequestLog } from '../observability/requests.js';
import type { OpenIdConnect } from './index.js';

/** Where applications fetch the keys that sign ID tokens (the discovery document's `jwks_uri`): the conventional path, since these are the issuer's token-signing keys. */
export const OPENID_JWKS_PATH = '/.well-known/jwks.json';

/** GET the JWKS: every algorithm's keys published now (a new one long before it signs), cacheable for `jwksMaxAgeSeconds`. */
export function registerOpenIdJwks(app: FastifyInstance, openid: OpenIdConnect, observed: { metrics: Metrics; requestLog: RequestLog }): Promise<void> {
  return registerKeySet(app, { path: OPENID_JWKS_PATH, maxAgeSeconds: openid.jwksMaxAgeSeconds, jwksBody: () => openid.keys.jwksBody() }, observed);
}
