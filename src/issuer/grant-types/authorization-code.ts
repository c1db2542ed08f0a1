import { TokengateError } from '../../errors.js';
import { narrowAudience } from '../../resource/audience.js';
import { resourceRegistry } from '../../resource/registry.js';
import { tokenDigest } from '../../token/token-value.js';
import { isOpenIdGrant, signIdToken } from '../id-token.js';
import { issueTokens } from '../issue-tokens.js';
import { requireParameter } from '../oauth-request.js';
import { isWellFormedCodeVerifier, verifyCodeVerifier } from '../pkce.js';
import { confirmGrant, grantIdOf } from './grant-check.js';
import type { GrantType } from './grant-type.js';
import { invalidCredential, refuseLeakedCredential } from './single-use.js';

/** RFC 6749 section 4.1.3, with PKCE (RFC 7636). Codes are minted and stored by /oauth/authorize. */
export const authorizationCode: GrantType = {
  type: 'authorization_code',
  allowsPublicClients: true,
  async issue(request) {
    const { parameters, client, context, dpopJkt } = request;
    const code = requireParameter(parameters, 'code');
    const redirectUri = requireParameter(parameters, 'redirect_uri');
    const verifier = parameters.code_verifier;
    // Syntax first: a malformed request must not spend the code.
    if (verifier !== undefined && !isWellFormedCodeVerifier(verifier)) {
      throw new TokengateError('INVALID_REQUEST', { description: 'The code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~ (RFC 7636).' });
    }
    // A value this deployment did not mint is refused without a store call.
    if (!context.minter.hasValidTag(code)) throw invalidCredential('authorization code');

    const consumed = await context.store.codes.consume(tokenDigest(code));
    if (consumed === null) throw invalidCredential('authorization code');
    const { record, firstUse } = consumed;
    if (!firstUse) return refuseLeakedCredential(request, record.familyId, 'authorization code', 'replayed');
    if (record.clientId !== client.application.clientId)
      return refuseLeakedCredential(request, record.familyId, 'authorization code', 'presented by another client');

    if (redirectUri !== record.redirectUri) {
      throw new TokengateError('INVALID_GRANT', { description: 'The redirect_uri does not match the one of the authorization request.' });
    }
    verifyCodeVerifier(record, verifier, !client.application.confidential);
    // RFC 9449 section 10: a code asked for with dpop_jkt is redeemed only with a proof by that key.
    if (record.jkt !== undefined && record.jkt !== dpopJkt) {
      throw new TokengateError('INVALID_GRANT', {
        description: 'The authorization code is bound to a DPoP key (dpop_jkt): redeem it with a DPoP proof by that key.',
      });
    }
    const audience = narrowAudience(record.audience, request.requestedResources, client.application, resourceRegistry(context.config));
    // Users kept in the store can be deleted while their code is in flight; deleting a user
    // revokes their tokens, but a code is not a token yet.
    if (context.config.issuer.users.source === 'store' && (await context.store.users.get(record.userId)) === null) {
      throw new TokengateError('INVALID_GRANT', { description: 'The user who authorized this code no longer exists.' });
    }
    const grantId = await grantIdOf(request, record);
    // The code was consumed above, once: a replay never reaches this line, so never gets a second ID token.
    const signIn = record.openid !== undefined && isOpenIdGrant(context, record.scopes) ? record.openid : undefined;
    const response = await issueTokens(
      context,
      {
        kind: 'user',
        clientId: record.clientId,
        userId: record.userId,
        familyId: record.familyId,
        scopes: record.scopes,
        grantScopes: record.scopes,
        jkt: dpopJkt,
        bindRefreshToken: !client.application.confidential,
        audience: audience.token,
        grantAudience: audience.grant,
        grantId,
        ...(signIn === undefined ? {} : { openid: signIn }),
      },
      request.trace,
    );
    await confirmGrant(request, { userId: record.userId, clientId: record.clientId, grantId, familyId: record.familyId });
    if (signIn === undefined) return response;
    const idToken = await signIdToken(context, client.application, {
      userId: record.userId,
      scopes: record.scopes,
      signIn,
      accessToken: response.access_token,
    });
    return { ...response, id_token: idToken };
  },
};
