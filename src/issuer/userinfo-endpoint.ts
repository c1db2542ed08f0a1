import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../context.js';
import { DPOP_SIGNING_ALGORITHMS } from '../dpop/algorithms.js';
import { checkResourceProof, type PresentedToken } from '../dpop/resource-proof.js';
import { bearerChallenge, dpopChallenge, ERRORS, TokengateError } from '../errors.js';
import { MALFORMED_BEARER, parseBearer, parseDpopAuthorization } from '../http/bearer.js';
import { findAccessToken } from './find-token.js';
import { OPENID_SCOPE, userClaims } from './id-token.js';
import { noCache } from './oauth-request.js';

export const USERINFO_ENDPOINT_PATH = '/oauth/userinfo';

/**
 * GET and POST /oauth/userinfo (OpenID Connect Core 1.0 section 5.3): the claims of the scopes
 * an access token with `openid` grants, for the token in the Authorization header, Bearer or
 * DPoP with its proof (RFC 9449 section 7, as the gateway checks it). Refusals are RFC 6750's,
 * each with its WWW-Authenticate challenge: 401 `invalid_token` for a token that is unknown,
 * expired or revoked (or a proof that fails), 403 `insufficient_scope` for one without `openid`.
 */
export function registerUserInfoEndpoint(scope: FastifyInstance, context: TokengateContext): void {
  const handler = async function userInfoEndpoint(request: FastifyRequest, reply: FastifyReply) {
    const presented = presentedToken(request);
    const found = await findAccessToken(context, presented.token);
    if (found === null) throw refuse(reply, context, presented, 'INVALID_TOKEN');
    const { record } = found;
    const subject = { method: request.method, protocol: request.protocol, host: request.host, url: request.url };
    const refusal = await checkResourceProof(context.dpop, false, presented, record, subject);
    if (refusal !== null) {
      const description =
        refusal === 'dpop_token_as_bearer'
          ? 'This access token is DPoP-bound: present it with Authorization: DPoP and a proof.'
          : 'The DPoP proof is missing or invalid.';
      throw refuse(reply, context, presented, 'INVALID_TOKEN', description);
    }
    if (record.userId === null || !record.scopes.includes(OPENID_SCOPE))
      throw refuse(reply, context, presented, 'INSUFFICIENT_SCOPE', 'The access token was not granted the openid scope.');
    return userClaims(context, record.userId, record.scopes, undefined);
  };
  scope.get(USERINFO_ENDPOINT_PATH, { onRequest: noCache }, handler);
  scope.post(USERINFO_ENDPOINT_PATH, { onRequest: noCache }, handler);
}

/** The token of the Authorization header, Bearer or DPoP (with the request's one DPoP header). */
function presentedToken(request: FastifyRequest): PresentedToken {
  const authorization = request.headers.authorization;
  if (authorization === undefined) throw new TokengateError('TOKEN_MISSING', { description: 'An access token is required in the Authorization header.' });
  const bearer = parseBearer(authorization);
  if (typeof bearer === 'string') return { token: bearer, scheme: 'bearer', proof: undefined };
  const dpop = bearer === null ? parseDpopAuthorization(authorization) : MALFORMED_BEARER;
  if (typeof dpop !== 'string')
    throw new TokengateError('INVALID_REQUEST', { description: 'The Authorization header is not a valid Bearer or DPoP credential.' });
  const proof = request.headers.dpop;
  return { token: dpop, scheme: 'dpop', proof: typeof proof === 'string' ? proof : undefined };
}

/** The refusal, its challenge set in the scheme the token came in (RFC 6750 section 3, RFC 9449 section 7.1). */
function refuse(reply: FastifyReply, context: TokengateContext, presented: PresentedToken, code: 'INVALID_TOKEN' | 'INSUFFICIENT_SCOPE', description?: string) {
  const failure = { error: ERRORS[code].error, description: description ?? ERRORS[code].description };
  const realm = context.config.gateway.realm;
  const scopes = code === 'INSUFFICIENT_SCOPE' ? [OPENID_SCOPE] : [];
  reply.header(
    'www-authenticate',
    presented.scheme === 'dpop' ? dpopChallenge(realm, DPOP_SIGNING_ALGORITHMS, failure, scopes) : bearerChallenge(realm, failure, scopes),
  );
  return new TokengateError(code, { description: failure.description });
}
