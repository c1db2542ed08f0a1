import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import type { ActingParty } from '../store/store.js';
import { formatScope } from '../token/scope.js';
import { clientFinder } from './clients.js';
import { authenticateClient } from './client-auth.js';
import { findToken, type FoundToken } from './find-token.js';
import { backChannelRouteOptions, parseBody, rejectRepeatedParameters, requireParameter } from './oauth-request.js';

export const INTROSPECTION_ENDPOINT_PATH = '/oauth/introspect';

interface IntrospectionResponse {
  active: boolean;
  scope?: string;
  client_id?: string;
  token_type?: 'Bearer' | 'DPoP';
  exp?: number;
  iat?: number;
  sub?: string;
  /** RFC 9449 section 6.2: the thumbprint of the key a DPoP-bound token is bound to. */
  cnf?: { jkt: string };
  aud?: string[];
  /** RFC 8693 section 4.1: the party acting for the user, for a token from a token exchange. */
  act?: ActClaim;
}

interface ActClaim {
  client_id: string;
  act?: ActClaim;
}

function actClaim(party: ActingParty): ActClaim {
  return { client_id: party.clientId, ...(party.act === undefined ? {} : { act: actClaim(party.act) }) };
}

const INACTIVE: IntrospectionResponse = { active: false };

/**
 * POST /oauth/introspect (RFC 7662). The caller authenticates as a confidential client and
 * learns about its own tokens only: a token issued to another client answers
 * `{"active":false}`, like an unknown one. Resource servers behind tokengate never need more,
 * since the gateway verifies tokens against the store itself; so a leaked token value does not
 * also make every registered client an oracle for its user and scopes.
 */
export function registerIntrospectionEndpoint(scope: FastifyInstance, context: TokengateContext): void {
  const findClient = clientFinder(context);
  scope.post(INTROSPECTION_ENDPOINT_PATH, backChannelRouteOptions(context.config), async function introspectionEndpoint(request) {
    const parameters = rejectRepeatedParameters(parseBody(request));
    const client = await authenticateClient(request, parameters, findClient, { allowPublicClients: false });
    const token = requireParameter(parameters, 'token');
    const found = await findToken(context, token, parameters.token_type_hint);
    if (found === null || found.record.clientId !== client.application.clientId) return INACTIVE;
    return describe(found);
  });
}

function describe(found: FoundToken): IntrospectionResponse {
  const { record } = found;
  return {
    active: true,
    scope: formatScope(record.scopes),
    client_id: record.clientId,
    // token_type names an access token type (RFC 7662 section 2.2 via RFC 6749 section 7.1); a refresh token has none.
    ...(found.type === 'access_token' ? { token_type: record.jkt === undefined ? ('Bearer' as const) : ('DPoP' as const) } : {}),
    exp: Math.floor(record.expiresAt / 1000),
    iat: Math.floor(record.issuedAt / 1000),
    ...(record.userId === null ? {} : { sub: record.userId }),
    ...(record.jkt === undefined ? {} : { cnf: { jkt: record.jkt } }),
    // The resources the token is for (RFC 8707); a refresh token's, those of its whole grant.
    ...(record.audience === undefined || record.audience.length === 0 ? {} : { aud: [...record.audience] }),
    ...('act' in record && record.act !== undefined ? { act: actClaim(record.act) } : {}),
  };
}
