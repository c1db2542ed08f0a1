import { TokengateError } from '../../errors.js';
import { grantAudience } from '../../resource/audience.js';
import { resourceRegistry } from '../../resource/registry.js';
import { resolveScopes } from '../../token/scope.js';
import { issueTokens } from '../issue-tokens.js';
import type { GrantType } from './grant-type.js';

/** RFC 6749 section 4.4: an application acting for itself. Confidential clients only; never a refresh token. */
export const clientCredentials: GrantType = {
  type: 'client_credentials',
  allowsPublicClients: false,
  async issue({ parameters, requestedResources, client, context, dpopJkt, trace }) {
    const { scopes, defaultScopes } = context.config.issuer;
    const resolution = resolveScopes(parameters.scope, client.application.scopes, scopes, defaultScopes);
    if (!resolution.ok) throw new TokengateError('INVALID_SCOPE', { description: resolution.reason });
    const audience = grantAudience(requestedResources, client.application, resourceRegistry(context.config));
    return issueTokens(context, { kind: 'application', clientId: client.application.clientId, scopes: resolution.scopes, audience, jkt: dpopJkt }, trace);
  },
};
