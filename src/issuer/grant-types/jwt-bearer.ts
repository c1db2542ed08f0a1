import { randomUUID } from 'node:crypto';
import { refused, type IdentityAssertion } from '../../identity-providers/index.js';
import type { IdentityProviderConfig } from '../../config/schema.js';
import type { TokengateContext } from '../../context.js';
import { TokengateError } from '../../errors.js';
import { permittedResources } from '../../resource/audience.js';
import { resourceRegistry } from '../../resource/registry.js';
import type { ApplicationRecord } from '../../store/store.js';
import type { SharedSignals } from '../../shared-signals/index.js';
import { tokenDigest } from '../../token/token-value.js';
import { issueTokens, type TokenResponse } from '../issue-tokens.js';
import { requireParameter } from '../oauth-request.js';
import type { GrantType } from './grant-type.js';

export const JWT_BEARER_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:jwt-bearer';

/**
 * RFC 7523 section 2.1 with an Identity Assertion JWT Authorization Grant
 * (draft-ietf-oauth-identity-assertion-authz-grant): the company's identity provider vouches
 * that its user may use this client with one of this issuer's resources. The assertion is
 * checked whole before it is spent, so a refused request leaves it usable; the access token
 * is bound to the asserted resource, records the provider's subject (revocable at once), and
 * comes without a refresh token: the client asks its provider for a new assertion.
 */
export const jwtBearer: GrantType = {
  type: JWT_BEARER_GRANT_TYPE,
  // Public clients too: a client whose client_id is its metadata document has no secret, and
  // the assertion names it (`client_id`), which is what binds the grant to it.
  allowsPublicClients: true,
  async issue({ parameters, requestedScopes, requestedResources, client, context, dpopJkt, trace }) {
    const providers = context.identityProviders;
    if (!providers.enabled) throw new TokengateError('UNSUPPORTED_GRANT_TYPE', { description: 'This issuer trusts no identity provider.' });
    const application = client.application;
    const assertion = await providers.check(requireParameter(parameters, 'assertion'), {
      audience: context.config.issuer.issuerUrl.replace(/\/+$/, ''),
      clientId: application.clientId,
    });
    const audience = assertedAudience(context, assertion, requestedResources, application);
    const scopes = assertedScopes(context, assertion, requestedScopes, application);
    // A reload may have removed the provider while its keys were being fetched.
    const provider = providers.provider(assertion.issuer);
    if (provider === undefined) throw refused('iss', 'is not a trusted identity provider');
    const email = assertedEmail(assertion, provider);
    const signals = context.sharedSignals.watches(assertion.issuer) ? context.sharedSignals : null;
    await signals?.checkAssertion(assertion.issuer, assertion.subject, email, assertion.issuedAt);
    const userId = await subjectUser(context, email, provider);
    await providers.spend(assertion);
    const issued = await issueTokens(
      context,
      {
        kind: 'user',
        clientId: application.clientId,
        userId,
        familyId: randomUUID(),
        scopes,
        grantScopes: scopes,
        jkt: dpopJkt,
        bindRefreshToken: false,
        audience,
        grantAudience: audience,
        withRefreshToken: false,
        identity: { issuer: assertion.issuer, subject: assertion.subject, email },
      },
      trace,
    );
    if (signals !== null) await checkAfterSave(context, signals, assertion, email, issued);
    return issued;
  },
};

/**
 * The provider's word may have come while the token was being saved: a revocation that read
 * the subject's tokens before the save could not take this one, but it recorded itself first,
 * so the check after the save sees it and takes the token back.
 */
async function checkAfterSave(
  context: TokengateContext,
  signals: SharedSignals,
  assertion: IdentityAssertion,
  email: string,
  issued: TokenResponse,
): Promise<void> {
  try {
    await signals.checkAssertion(assertion.issuer, assertion.subject, email, assertion.issuedAt);
  } catch (refusal) {
    await context.store.tokens.revokeAccessToken(tokenDigest(issued.access_token));
    throw refusal;
  }
}

/**
 * The token's resources: those the assertion names (`resource`), each registered here and
 * permitted for the client, narrowed by the request's `resource` parameters. With resources
 * configured an assertion must name one: a token good for every resource is not what the
 * provider vouched for.
 */
function assertedAudience(
  context: TokengateContext,
  assertion: IdentityAssertion,
  requested: readonly string[] | undefined,
  application: ApplicationRecord,
): string[] {
  const registry = resourceRegistry(context.config);
  if (registry.identifiers.length === 0) return [];
  if (assertion.resources.length === 0) throw refused('resource', 'is missing');
  const permitted = permittedResources(application, registry);
  for (const resource of assertion.resources) {
    if (!registry.byIdentifier.has(resource)) throw refused('resource', 'is not a resource of this issuer');
    if (!permitted.includes(resource)) throw refused('resource', 'is not a resource this client may receive tokens for');
  }
  if (requested === undefined) return assertion.resources;
  if (requested.some((resource) => !assertion.resources.includes(resource)))
    throw new TokengateError('INVALID_TARGET', { description: 'A requested resource is not one the identity assertion names.' });
  return [...requested];
}

/** Requested ∩ asserted ∩ the client's: a scope asked for beyond the assertion is refused, never quietly dropped. */
function assertedScopes(
  context: TokengateContext,
  assertion: IdentityAssertion,
  requested: readonly string[] | undefined,
  application: ApplicationRecord,
): string[] {
  const { scopes: known, defaultScopes } = context.config.issuer;
  const asserted = assertion.scopes ?? defaultScopes;
  if (requested !== undefined && requested.some((scope) => !asserted.includes(scope))) throw refused('scope', 'does not include every scope requested');
  const issued = (requested ?? asserted).filter((scope) => known.includes(scope) && application.scopes.includes(scope));
  if (issued.length === 0) throw new TokengateError('INVALID_SCOPE', { description: 'None of the asserted scopes is one this client may receive.' });
  return issued;
}

/** The e-mail address (lower-cased) in the provider's user claim: who the assertion's subject is here. */
function assertedEmail(assertion: IdentityAssertion, provider: IdentityProviderConfig): string {
  const value = assertion.claims[provider.userClaim];
  if (typeof value !== 'string' || value === '') throw refused('sub', `has no ${provider.userClaim} claim to find its user by`);
  return value.toLowerCase();
}

/**
 * The tokengate user with the asserted e-mail address, created then when the operator turned
 * `jitUsers` on.
 */
async function subjectUser(context: TokengateContext, email: string, provider: IdentityProviderConfig): Promise<string> {
  const users = context.store.users;
  const existing = await users.findByEmail(email);
  if (existing !== null) return existing.id;
  if (!provider.jitUsers) throw refused('sub', `is no user of this service (by its ${provider.userClaim} claim)`);
  const id = randomUUID();
  // No password: such a user signs in through the provider only. Another request may create it first.
  if (await users.create({ id, email, passwordHash: '', createdAt: Date.now() })) return id;
  const created = await users.findByEmail(email);
  if (created === null) throw refused('sub', 'could not be given a user of this service');
  return created.id;
}
