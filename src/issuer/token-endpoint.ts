import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { tokenRequestBinding } from '../dpop/token-request.js';
import { toTokengateError } from '../errors.js';
import { TokengateError } from '../errors.js';
import { readResourceParameter } from '../resource/audience.js';
import { parseScope } from '../token/scope.js';
import { clientFinder } from './clients.js';
import { authenticateClient, type AuthenticatedClient } from './client-auth.js';
import { GRANT_TYPES, type GrantType } from './grant-types/index.js';
import type { TokenResponse } from './issue-tokens.js';
import { backChannelRouteOptions, parseBody, rejectRepeatedParameters, requireParameter, type OAuthParameters } from './oauth-request.js';

export const TOKEN_ENDPOINT_PATH = '/oauth/token';

/**
 * POST /oauth/token (RFC 6749 sections 3.2, 4.1.3, 4.4, 6). The handler is the ordered list of
 * steps a request goes through; each step either passes on what it established or throws the
 * error the request deserves, which the issuer's error handler renders.
 */
export function registerTokenEndpoint(scope: FastifyInstance, context: TokengateContext): void {
  const tokenEndpointUrl = `${context.config.issuer.issuerUrl.replace(/\/+$/, '')}${TOKEN_ENDPOINT_PATH}`;
  const findClient = clientFinder(context);
  scope.post(
    TOKEN_ENDPOINT_PATH,
    {
      ...backChannelRouteOptions(context.config),
      onError: async (_request, _reply, error) => {
        context.metrics.tokenErrors.inc({ error: toTokengateError(error).error });
      },
    },
    async function tokenEndpoint(request, reply) {
      // `resource` is the one parameter that may repeat (RFC 8707 section 2).
      const { resource, ...body } = parseBody(request);
      const requestedResources = readResourceParameter(resource);
      const parameters = rejectRepeatedParameters(body);
      const client = await authenticateClient(request, parameters, findClient, { allowPublicClients: true });
      const grantType = supportedGrantType(parameters);
      checkGrantTypeAllowed(grantType, client);
      const requestedScopes = parseScopeParameter(parameters);
      const dpopJkt = await tokenRequestBinding(request, reply, context.dpop, client.application, tokenEndpointUrl);
      const trace = request.trace ?? null;
      trace?.set('tokengate.grant_type', grantType.type);
      trace?.set('tokengate.client_id', client.application.clientId);
      const grant = trace?.child('tokengate.issuer.grant') ?? null;
      grant?.set('tokengate.grant_type', grantType.type);
      let response: TokenResponse;
      try {
        response = await grantType.issue({ parameters, requestedScopes, requestedResources, client, context, log: request.log, dpopJkt, trace });
      } catch (error) {
        grant?.end(toTokengateError(error).error);
        throw error;
      }
      grant?.end();
      context.metrics.tokensIssued.inc({ grant_type: grantType.type });
      return response;
    },
  );
}

function supportedGrantType(parameters: OAuthParameters): GrantType {
  const grantType = GRANT_TYPES.get(requireParameter(parameters, 'grant_type'));
  if (grantType === undefined) {
    throw new TokengateError('UNSUPPORTED_GRANT_TYPE', { description: `Supported grant types: ${[...GRANT_TYPES.keys()].join(', ')}.` });
  }
  return grantType;
}

function checkGrantTypeAllowed(grantType: GrantType, client: AuthenticatedClient): void {
  if (!client.application.confidential && !grantType.allowsPublicClients) {
    throw new TokengateError('UNAUTHORIZED_CLIENT', { description: `Public clients may not use the ${grantType.type} grant.` });
  }
}

function parseScopeParameter(parameters: OAuthParameters): string[] | undefined {
  if (parameters.scope === undefined) return undefined;
  const scopes = parseScope(parameters.scope);
  if (scopes === null || scopes.length === 0) throw new TokengateError('INVALID_SCOPE', { description: 'The scope parameter is malformed.' });
  return scopes;
}
