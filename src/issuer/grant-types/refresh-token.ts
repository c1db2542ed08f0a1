import { TokengateError } from '../../errors.js';
import { narrowAudience } from '../../resource/audience.js';
import { resourceRegistry } from '../../resource/registry.js';
import { hasScopes } from '../../token/scope.js';
import { tokenDigest } from '../../token/token-value.js';
import { issueTokens } from '../issue-tokens.js';
import { requireParameter } from '../oauth-request.js';
import type { GrantType } from './grant-type.js';
import { invalidCredential, refuseLeakedCredential } from './single-use.js';

/**
 * RFC 6749 section 6 with rotation (RFC 9700 section 4.14.2): every use spends the refresh token
 * and issues a new one in the same family; a spent one presented again revokes the family.
 * `scope` and `resource` (RFC 8707) may narrow the new access token, never widen it; the new
 * refresh token keeps the grant's full scope and audience.
 */
export const refreshToken: GrantType = {
  type: 'refresh_token',
  allowsPublicClients: true,
  async issue(request) {
    const { parameters, requestedScopes, requestedResources, client, context } = request;
    const registry = resourceRegistry(context.config);
    const refreshToken = requireParameter(parameters, 'refresh_token');
    if (!context.minter.hasValidTag(refreshToken)) throw invalidCredential('refresh token');
    const digest = tokenDigest(refreshToken);

    if (requestedScopes !== undefined || requestedResources !== undefined) {
      // Checked before the token is spent too, so that a client's mistake does not cost it the grant.
      const current = await context.store.getRefreshToken(digest);
      if (current !== null && current.clientId === client.application.clientId) {
        narrowScopes(current.scopes, requestedScopes);
        narrowAudience(current.audience, requestedResources, client.application, registry);
      }
    }

    const consumed = await context.store.consumeRefreshToken(digest);
    if (consumed === null) throw invalidCredential('refresh token');
    const { record, firstUse } = consumed;
    if (!firstUse) return refuseLeakedCredential(request, record.familyId, 'refresh token', 'replayed');
    if (record.clientId !== client.application.clientId)
      return refuseLeakedCredential(request, record.familyId, 'refresh token', 'presented by another client');

    const audience = narrowAudience(record.audience, requestedResources, client.application, registry);
    return issueTokens(context, {
      kind: 'user',
      clientId: record.clientId,
      userId: record.userId,
      familyId: record.familyId,
      scopes: narrowScopes(record.scopes, requestedScopes),
      grantScopes: record.scopes,
      audience: audience.token,
      grantAudience: audience.grant,
    });
  },
};

function narrowScopes(granted: string[], requested: readonly string[] | undefined): string[] {
  if (requested === undefined) return granted;
  if (!hasScopes(granted, requested)) throw new TokengateError('INVALID_SCOPE', { description: 'The requested scope exceeds the scope originally granted.' });
  return [...requested];
}
