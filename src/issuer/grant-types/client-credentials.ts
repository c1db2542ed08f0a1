import { TokengateError } from '../../errors.js';
import { resolveScopes } from '../../token/scope.js';
import { issueTokens } from '../issue-tokens.js';
import type { GrantType } from './grant-type.js';

/** RFC 6749 section 4.4: an application acting for itself. Confidential clients only; never a refresh token. */
export const clientCredentials: GrantType = {
  type: 'client_credentials',
  allowsPublicClients: false,
  async issue({ parameters, client, context, dpopJkt }) {
    const { scopes, defaultScopes } = context.config.issuer;
    const resolution = resolveScopes(parameters.scope, client.application.scopes, scopes, defaultScopes);
    if (!resolution.ok) throw new TokengateError('INVALID_SCOPE', { description: resolution.reason });
    return issueTokens(context, { kind: 'application', clientId: client.application.clientId, scopes: resolution.scopes, jkt: dpopJkt });
  },
};
