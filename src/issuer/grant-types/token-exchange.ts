import type { TokengateContext } from '../../context.js';
import { TokengateError } from '../../errors.js';
import { grantAudience } from '../../resource/audience.js';
import { resourceRegistry } from '../../resource/registry.js';
import type { AccessTokenRecord, ApplicationRecord } from '../../store/store.js';
import { tokenDigest } from '../../token/token-value.js';
import { issueTokens } from '../issue-tokens.js';
import { requireParameter, type OAuthParameters } from '../oauth-request.js';
import type { GrantType } from './grant-type.js';

export const TOKEN_EXCHANGE_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

/**
 * RFC 8693: a service behind the gateway, holding a user's access token (the subject token),
 * gets a token for another resource on that user's behalf. Allowed per application by the
 * operator (`token_exchange`), confidential clients only. The new token is the user's, issued to
 * the requesting client, records it as the actor (`act`), never has more scope than the subject
 * token, never outlives it, and is revoked with it: it is indexed under the subject token's
 * digest (and those it descends from), its token family, its user and its identity provider subject.
 */
export const tokenExchange: GrantType = {
  type: TOKEN_EXCHANGE_GRANT_TYPE,
  allowsPublicClients: false,
  async issue({ parameters, requestedScopes, requestedResources, client, context, dpopJkt, trace }) {
    const application = client.application;
    if (application.tokenExchange !== true)
      throw new TokengateError('UNAUTHORIZED_CLIENT', {
        description: 'This client is not allowed to exchange tokens (the operator turns token_exchange on per application).',
      });
    const subjectToken = requireParameter(parameters, 'subject_token');
    requireAccessTokenType(requireParameter(parameters, 'subject_token_type'), 'subject_token_type');
    const subjectDigest = tokenDigest(subjectToken);
    const subject = await liveAccessToken(context, subjectToken, 'subject_token');
    if (subject.kind !== 'user' || subject.userId === null) throw invalidGrant("The subject_token is not a user's token.");
    // A DPoP-bound token is worth nothing without its key: exchanging it takes a proof by that key.
    if (subject.jkt !== undefined && subject.jkt !== dpopJkt) throw invalidGrant('The subject_token is DPoP-bound: exchange it with a DPoP proof by its key.');
    await checkActor(context, parameters, application);
    const subjectApplication = await context.store.applications.get(subject.clientId);
    if (subjectApplication === null) throw invalidGrant('The application the subject_token was issued to no longer exists.');
    const audience = exchangedAudience(context, parameters, requestedResources, application, subjectApplication);
    const scopes = exchangedScopes(subject, requestedScopes, application);
    const response = await issueTokens(
      context,
      {
        kind: 'user',
        clientId: application.clientId,
        userId: subject.userId,
        // The subject's family: revoking the grant it came from revokes this token too.
        familyId: subject.familyId ?? subjectDigest,
        scopes,
        grantScopes: scopes,
        jkt: dpopJkt,
        bindRefreshToken: false,
        audience,
        grantAudience: audience,
        withRefreshToken: false,
        ...(subject.identity === undefined ? {} : { identity: subject.identity }),
        exchange: {
          act: { clientId: application.clientId, ...(subject.act === undefined ? {} : { act: subject.act }) },
          exchangedFrom: [subjectDigest, ...(subject.exchangedFrom ?? [])],
        },
        notAfter: subject.expiresAt,
      },
      trace,
    );
    return { ...response, issued_token_type: ACCESS_TOKEN_TYPE };
  },
};

function invalidGrant(description: string): TokengateError {
  return new TokengateError('INVALID_GRANT', { description });
}

function requireAccessTokenType(value: string, parameter: string): void {
  if (value !== ACCESS_TOKEN_TYPE)
    throw new TokengateError('INVALID_REQUEST', {
      description: `The ${parameter} must be ${ACCESS_TOKEN_TYPE}: only this issuer's access tokens are exchanged.`,
    });
}

/**
 * A live access token of this issuer: minted here, in the store, not expired. Read from the store
 * itself, not the token cache: the cache keeps neither the token's lineage nor its identity
 * provider subject, which the new token inherits, and may lag a revocation by the feed's delay.
 */
async function liveAccessToken(context: TokengateContext, token: string, parameter: string): Promise<AccessTokenRecord> {
  const digest = tokenDigest(token);
  const read = () => (context.cache === null ? context.store.tokens.getAccessToken(digest) : context.cache.storedAccessToken(digest));
  const record = context.minter.hasValidTag(token) ? await read() : null;
  if (record === null || record.expiresAt <= Date.now()) throw invalidGrant(`The ${parameter} is invalid, expired or revoked.`);
  return record;
}

/**
 * The actor token, when given, must be a live access token issued to the requesting client:
 * a service cannot name another one as the party that acted.
 */
async function checkActor(context: TokengateContext, parameters: OAuthParameters, application: ApplicationRecord): Promise<void> {
  const actorToken = parameters.actor_token;
  if (actorToken === undefined) {
    if (parameters.actor_token_type !== undefined)
      throw new TokengateError('INVALID_REQUEST', { description: 'The actor_token_type is given without an actor_token.' });
    return;
  }
  requireAccessTokenType(requireParameter(parameters, 'actor_token_type'), 'actor_token_type');
  const actor = await liveAccessToken(context, actorToken, 'actor_token');
  if (actor.clientId !== application.clientId) throw invalidGrant('The actor_token was not issued to the requesting client.');
}

/**
 * The resources of the new token: those of `resource` and `audience` (here a resource
 * identifier too), each one of this issuer's and one that both the requesting client and the
 * subject token's application may receive tokens for, so an exchange never reaches further
 * than the user's own application could. With resources configured one must be named.
 */
function exchangedAudience(
  context: TokengateContext,
  parameters: OAuthParameters,
  requestedResources: readonly string[] | undefined,
  application: ApplicationRecord,
  subjectApplication: ApplicationRecord,
): string[] {
  const registry = resourceRegistry(context.config);
  if (registry.identifiers.length === 0) return [];
  const requested = [...new Set([...(requestedResources ?? []), ...(parameters.audience === undefined ? [] : [parameters.audience])])];
  if (requested.length === 0) throw new TokengateError('INVALID_REQUEST', { description: 'Name the resource the new token is for (resource or audience).' });
  grantAudience(requested, subjectApplication, registry);
  return grantAudience(requested, application, registry);
}

/** The requested scopes, each one the subject token has and the requesting client may receive; by default all such. */
function exchangedScopes(subject: AccessTokenRecord, requested: readonly string[] | undefined, application: ApplicationRecord): string[] {
  if (requested !== undefined) {
    if (requested.some((scope) => !subject.scopes.includes(scope) || !application.scopes.includes(scope)))
      throw new TokengateError('INVALID_SCOPE', { description: "The requested scope exceeds the subject_token's scope or the client's." });
    return [...requested];
  }
  const scopes = subject.scopes.filter((scope) => application.scopes.includes(scope));
  if (scopes.length === 0) throw new TokengateError('INVALID_SCOPE', { description: "None of the subject_token's scopes is one this client may receive." });
  return scopes;
}
