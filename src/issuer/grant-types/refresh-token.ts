import { TokengateError } from '../../errors.js';
import { narrowAudience, permittedResources } from '../../resource/audience.js';
import type { ResourceRegistry } from '../../resource/registry.js';
import type { ApplicationRecord } from '../../store/store.js';
import { resourceRegistry } from '../../resource/registry.js';
import { hasScopes } from '../../token/scope.js';
import { tokenDigest } from '../../token/token-value.js';
import { isOpenIdGrant, signIdToken } from '../id-token.js';
import { issueTokens } from '../issue-tokens.js';
import { requireParameter } from '../oauth-request.js';
import { confirmGrant, grantIdOf } from './grant-check.js';
import type { GrantType } from './grant-type.js';
import { invalidCredential, refuseLeakedCredential } from './single-use.js';

/**
 * RFC 6749 section 6 with rotation (RFC 9700 section 4.14.2): every use spends the refresh token
 * and issues a new one in the same family; a spent one presented again revokes the family.
 * `scope` and `resource` (RFC 8707) may narrow the new access token, never widen it; the new
 * refresh token keeps the grant's full scope and audience.
 *
 * The grant shrinks with the application: a refresh gives at most the scopes and resources the
 * application (or the allow-list entry of a metadata document client) may have now, and the new
 * refresh token keeps only those. Intersected rather than revoked: an operator who takes one
 * scope or API from an application should not sign every user of it out of the rest, which
 * they consented to. A grant with nothing left is revoked.
 */
export const refreshToken: GrantType = {
  type: 'refresh_token',
  allowsPublicClients: true,
  async issue(request) {
    const { parameters, requestedScopes, requestedResources, client, context, dpopJkt } = request;
    const registry = resourceRegistry(context.config);
    const refreshToken = requireParameter(parameters, 'refresh_token');
    if (!context.minter.hasValidTag(refreshToken)) throw invalidCredential('refresh token');
    const digest = tokenDigest(refreshToken);

    // Checked before the token is spent, so that neither a client's mistake nor a thief without
    // the key costs the grant: the scope, the resources, and the DPoP key of a bound refresh token.
    const current = await context.store.tokens.getRefreshToken(digest);
    if (current !== null && current.clientId === client.application.clientId) {
      const allowed = allowedNow(current, client.application, context.config.issuer.scopes, registry);
      if (allowed !== null) {
        narrowScopes(allowed.scopes, requestedScopes);
        narrowAudience(allowed.audience, requestedResources, client.application, registry);
      }
      checkBinding(current.jkt, dpopJkt);
    }

    const consumed = await context.store.tokens.consumeRefreshToken(digest);
    if (consumed === null) throw invalidCredential('refresh token');
    const { record, firstUse } = consumed;
    if (!firstUse) return refuseLeakedCredential(request, record.familyId, 'refresh token', 'replayed');
    if (record.clientId !== client.application.clientId)
      return refuseLeakedCredential(request, record.familyId, 'refresh token', 'presented by another client');
    checkBinding(record.jkt, dpopJkt);

    const allowed = allowedNow(record, client.application, context.config.issuer.scopes, registry);
    if (allowed === null) {
      const revoked = await context.store.tokens.revokeFamily(record.familyId);
      request.log.info({ clientId: record.clientId, familyId: record.familyId, revoked }, 'refresh of a grant the application may no longer have: revoked');
      throw new TokengateError('INVALID_GRANT', {
        description: 'The application may no longer be granted any of the scopes or resources of this grant; the user must authorize it again.',
      });
    }
    const audience = narrowAudience(allowed.audience, requestedResources, client.application, registry);
    const grantId = await grantIdOf(request, record);
    const scopes = narrowScopes(allowed.scopes, requestedScopes);
    // An OpenID Connect grant keeps its sign-in with each refresh token, and each refresh returns a new ID token (without the nonce).
    const signIn = record.openid !== undefined && isOpenIdGrant(context, allowed.scopes) ? record.openid : undefined;
    const response = await issueTokens(
      context,
      {
        kind: 'user',
        clientId: record.clientId,
        userId: record.userId,
        familyId: record.familyId,
        scopes,
        grantScopes: allowed.scopes,
        jkt: dpopJkt,
        // A bound refresh token stays bound to its key; an unbound one (a confidential client's) stays unbound.
        bindRefreshToken: record.jkt !== undefined,
        audience: audience.token,
        grantAudience: audience.grant,
        grantId,
        ...(signIn === undefined ? {} : { openid: signIn }),
      },
      request.trace,
    );
    // The user's grant bounds the refresh: disconnected, the application gets nothing more (./grant-check.ts).
    await confirmGrant(request, { userId: record.userId, clientId: record.clientId, grantId, familyId: record.familyId });
    if (signIn === undefined || !scopes.includes('openid')) return response;
    const idToken = await signIdToken(context, client.application, { userId: record.userId, scopes, signIn, accessToken: response.access_token });
    return { ...response, id_token: idToken };
  },
};

/**
 * What of a grant the application may still have: its scopes among the application's and the
 * issuer's, its audience among the resources the application may use now (a grant without an
 * audience, from before resources were configured, keeps none: the application's default then
 * applies). Null when no scope, or no resource of an audience it had, is left.
 */
function allowedNow(
  grant: { scopes: string[]; audience?: string[] | undefined },
  application: ApplicationRecord,
  issuerScopes: readonly string[],
  registry: ResourceRegistry,
): { scopes: string[]; audience: string[] | undefined } | null {
  const scopes = grant.scopes.filter((scope) => application.scopes.includes(scope) && issuerScopes.includes(scope));
  if (scopes.length === 0) return null;
  if (grant.audience === undefined || grant.audience.length === 0) return { scopes, audience: grant.audience };
  const permitted = permittedResources(application, registry);
  const audience = grant.audience.filter((resource) => permitted.includes(resource));
  return audience.length === 0 ? null : { scopes, audience };
}

/** RFC 9449 section 5: a DPoP-bound refresh token is used only with a proof by its key. */
function checkBinding(bound: string | undefined, proven: string | null): void {
  if (bound === undefined || bound === proven) return;
  throw new TokengateError('TOKEN_REQUEST_DPOP_PROOF', {
    description: 'This refresh token is DPoP-bound: refresh it with a DPoP proof by the key it is bound to.',
  });
}

function narrowScopes(granted: string[], requested: readonly string[] | undefined): string[] {
  if (requested === undefined) return granted;
  if (!hasScopes(granted, requested)) throw new TokengateError('INVALID_SCOPE', { description: 'The requested scope exceeds the scope originally granted.' });
  return [...requested];
}
