import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { TokengateError } from '../errors.js';
import { MALFORMED_BEARER, parseBearer } from '../http/bearer.js';
import { findAccessToken } from './find-token.js';
import { noCache } from './oauth-request.js';

export const TOKEN_INFO_ENDPOINT_PATH = '/oauth/token/info';

/** Doorkeeper's token info: what a client written for the ticketing service may call to inspect its access token. */
interface TokenInfo {
  resource_owner_id: string | null;
  scope: string[];
  expires_in: number;
  application: { uid: string };
  created_at: number;
}

/**
 * GET /oauth/token/info, Doorkeeper's shape. The access token comes in the Authorization header
 * (RFC 6750 section 2.1); no token is a 401 with a bare Bearer challenge, an unknown, expired,
 * revoked or refresh token a 401 `invalid_token` (section 3.1).
 */
export function registerTokenInfoEndpoint(scope: FastifyInstance, context: TokengateContext): void {
  scope.get(TOKEN_INFO_ENDPOINT_PATH, { onRequest: noCache }, async function tokenInfoEndpoint(request): Promise<TokenInfo> {
    const authorization = request.headers.authorization;
    const token = authorization === undefined ? null : parseBearer(authorization);
    if (token === MALFORMED_BEARER) throw new TokengateError('INVALID_REQUEST', { description: 'The Authorization header is not a valid bearer credential.' });
    if (token === null) throw new TokengateError('TOKEN_MISSING', { description: 'An access token is required in the Authorization header (Bearer).' });
    const found = await findAccessToken(context, token);
    if (found === null) throw new TokengateError('INVALID_TOKEN');
    // Sent as Bearer, a DPoP-bound token proves nothing about its key: the gateway refuses it too.
    if (found.record.jkt !== undefined) {
      throw new TokengateError('INVALID_TOKEN', { description: 'This access token is DPoP-bound: this endpoint takes Bearer tokens only.' });
    }
    const { record } = found;
    return {
      resource_owner_id: record.userId,
      scope: record.scopes,
      expires_in: Math.max(0, Math.round((record.expiresAt - Date.now()) / 1000)),
      application: { uid: record.clientId },
      created_at: Math.floor(record.issuedAt / 1000),
    };
  });
}
