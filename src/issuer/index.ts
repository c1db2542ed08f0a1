import formbody from '@fastify/formbody';
import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { jsonErrorHandler } from '../errors.js';
import { registerIntrospectionEndpoint } from './introspection-endpoint.js';
import { registerMetadataEndpoint } from './metadata-endpoint.js';
import { registerRevocationEndpoint } from './revocation-endpoint.js';
import { registerTokenEndpoint } from './token-endpoint.js';
import { registerTokenInfoEndpoint } from './token-info-endpoint.js';
import { registerUserInfoEndpoint } from './userinfo-endpoint.js';

/**
 * The issuer's back-channel endpoints on the public listener, as one encapsulated plugin: the
 * form parser and the error handler registered here apply to these routes and nothing else.
 */
export async function registerIssuer(app: FastifyInstance, context: TokengateContext): Promise<void> {
  await app.register(async function issuerEndpoints(scope) {
    // Bodies are forms or JSON, the two encodings clients use (docs/design.md#wire-format); anything
    // else, text included, is a 415 rather than a guess.
    await scope.register(formbody);
    scope.removeContentTypeParser('text/plain');
    scope.setErrorHandler(jsonErrorHandler(context.config.gateway.realm));
    registerTokenEndpoint(scope, context);
    registerRevocationEndpoint(scope, context);
    registerIntrospectionEndpoint(scope, context);
    registerTokenInfoEndpoint(scope, context);
    registerMetadataEndpoint(scope, context);
    if (context.openid !== null) registerUserInfoEndpoint(scope, context);
  });
}
