import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { isMetadataClientId } from '../client-metadata/client-id.js';
import { TokengateError } from '../errors.js';
import { clientSecretDigest } from '../issuer/client-auth.js';
import { resourceRegistry } from '../resource/registry.js';
import { deleteApplicationAndTokens } from '../store/deletions.js';
import type { ApplicationRecord } from '../store/store.js';
import { recordAdminChange } from './admin-auth.js';
import { readApplicationInput, readApplicationPatch, type LogoutSettings } from './validate.js';

/** An application as the admin API shows it: never its secret, not even the digest. */
export interface ApplicationView {
  client_id: string;
  name: string;
  confidential: boolean;
  redirect_uris: string[];
  scopes: string[];
  /** `required`: the token endpoint issues it DPoP-bound tokens only; `allowed`: Bearer tokens too. */
  dpop: 'required' | 'allowed';
  /** Resources its tokens may be for; empty: every configured resource. */
  resources: string[];
  /** Its tier: the rate limit policy that meters it instead of its routes' own; null: theirs. */
  rate_limit: string | null;
  /** Whether it may exchange its users' tokens for tokens of other resources (RFC 8693). */
  token_exchange: boolean;
  /** Where RP-Initiated Logout may send the user after sign-out (exact strings). */
  post_logout_redirect_uris: string[];
  /** Where its Back-Channel Logout tokens are POSTed; null: it is not told. */
  backchannel_logout_uri: string | null;
  /** Every logout token it gets must name the session (`sid`). */
  backchannel_logout_session_required: boolean;
  /** The algorithm of its ID tokens (OpenID Connect). */
  id_token_signed_response_alg: 'RS256' | 'ES256';
  created_at: string;
}

function view(application: ApplicationRecord): ApplicationView {
  return {
    client_id: application.clientId,
    name: application.name,
    confidential: application.confidential,
    redirect_uris: application.redirectUris,
    scopes: application.scopes,
    dpop: application.dpop ?? 'allowed',
    resources: application.resources ?? [],
    rate_limit: application.rateLimit ?? null,
    token_exchange: application.tokenExchange === true,
    post_logout_redirect_uris: application.postLogoutRedirectUris ?? [],
    backchannel_logout_uri: application.backchannelLogoutUri ?? null,
    backchannel_logout_session_required: application.backchannelLogoutSessionRequired === true,
    id_token_signed_response_alg: application.idTokenSignedResponseAlg ?? 'RS256',
    created_at: new Date(application.createdAt).toISOString(),
  };
}

/** The logout settings given at registration, left out of the record when empty. */
function withLogoutSettings(settings: LogoutSettings): Partial<ApplicationRecord> {
  return {
    ...(settings.postLogoutRedirectUris !== undefined && settings.postLogoutRedirectUris.length > 0
      ? { postLogoutRedirectUris: settings.postLogoutRedirectUris }
      : {}),
    ...(settings.backchannelLogoutUri !== undefined ? { backchannelLogoutUri: settings.backchannelLogoutUri } : {}),
    ...(settings.backchannelLogoutSessionRequired === true ? { backchannelLogoutSessionRequired: true } : {}),
  };
}

/** 32 random bytes, base64url: the shape of the ticketing service's (Doorkeeper's) uids and secrets. */
const randomCredential = () => randomBytes(32).toString('base64url');

/**
 * A new client id: a random credential that does not begin with `-`. Operators paste client ids
 * into command lines, where a word beginning with `-` is read as an option by most tools (one id
 * in 64 did); drawing again when it does costs 0.02 of its 256 bits. Ids made before still work
 * everywhere (the CLI takes them as they are).
 */
function newClientId(): string {
  for (;;) {
    const clientId = randomCredential();
    if (!clientId.startsWith('-')) return clientId;
  }
}

/** The algorithms an application's ID tokens may be signed with: none while OpenID Connect is off. */
function idTokenAlgorithms(context: TokengateContext): readonly string[] {
  return context.openid === null ? [] : context.config.openidConnect.algorithms;
}

export function registerApplicationRoutes(scope: FastifyInstance, context: TokengateContext): void {
  scope.post('/applications', async function createApplication(request, reply) {
    const input = readApplicationInput(request.body, context.config.issuer, resourceRegistry(context.config).identifiers, idTokenAlgorithms(context));
    const clientSecret = input.confidential ? randomCredential() : null;
    const application: ApplicationRecord = {
      clientId: newClientId(),
      name: input.name,
      secretDigest: clientSecret === null ? null : clientSecretDigest(clientSecret),
      redirectUris: input.redirectUris,
      scopes: input.scopes,
      confidential: input.confidential,
      createdAt: Date.now(),
      ...(input.resources.length > 0 ? { resources: input.resources } : {}),
      ...withLogoutSettings(input.logout),
      ...(input.idTokenSignedResponseAlg === undefined ? {} : { idTokenSignedResponseAlg: input.idTokenSignedResponseAlg }),
    };
    await context.store.applications.put(application);
    recordAdminChange(request, { action: 'application created', clientId: application.clientId, confidential: application.confidential });
    // The only time the secret is shown: the store keeps its digest alone.
    const { client_id, ...rest } = view(application);
    return reply.code(201).send({ client_id, ...(clientSecret === null ? {} : { client_secret: clientSecret }), ...rest });
  });

  scope.get('/applications', async function listApplications() {
    const applications = await context.store.applications.list();
    return { applications: applications.sort((a, b) => a.createdAt - b.createdAt).map(view) };
  });

  scope.patch<{ Params: { clientId: string } }>('/applications/:clientId', async function updateApplication(request) {
    const { clientId } = request.params;
    const patch = readApplicationPatch(
      request.body,
      context.config.issuer,
      resourceRegistry(context.config).identifiers,
      context.config.rateLimits,
      idTokenAlgorithms(context),
    );
    const application = await context.store.applications.get(clientId);
    if (application === null) throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'No application has this client_id.' });
    const { backchannelLogoutUri, ...rest } = patch;
    const updated: ApplicationRecord = { ...application, ...rest };
    if (backchannelLogoutUri === null) delete updated.backchannelLogoutUri;
    else if (backchannelLogoutUri !== undefined) updated.backchannelLogoutUri = backchannelLogoutUri;
    await context.store.applications.put(updated);
    recordAdminChange(request, { action: 'application updated', clientId, fields: Object.keys(patch) });
    return view(updated);
  });

  // What an application may still send, every sidecar together: its tier's policy, or each policy its routes name.
  scope.get<{ Params: { clientId: string } }>('/applications/:clientId/rate-limit', async function applicationRateLimit(request) {
    const { clientId } = request.params;
    const tier = await tierOf(context, clientId);
    const { routes, rateLimits } = context.config;
    const names =
      tier !== null && Object.hasOwn(rateLimits, tier)
        ? [tier]
        : [...new Set(routes.flatMap((route) => (route.rateLimit === undefined ? [] : [route.rateLimit])))];
    return { client_id: clientId, rate_limit: tier, budgets: await context.rateLimiter.budget(clientId, names) };
  });

  scope.delete<{ Params: { clientId: string } }>('/applications/:clientId', async function deleteApplication(request) {
    const { clientId } = request.params;
    if (!(await deleteApplicationAndTokens(context.store, clientId))) {
      throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'No application has this client_id.' });
    }
    recordAdminChange(request, { action: 'application deleted, its tokens revoked', clientId });
    return { client_id: clientId, deleted: true };
  });
}

/** An application's tier; a metadata document client's is its entry's on the list. Throws 404 for a client id neither names. */
async function tierOf(context: TokengateContext, clientId: string): Promise<string | null> {
  if (context.clientMetadata !== null && isMetadataClientId(clientId)) {
    const entry = await context.clientMetadata.allowList.find(clientId);
    if (entry === null) throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'No entry of the client metadata list allows this client_id.' });
    return entry.rateLimit ?? null;
  }
  const application = await context.store.applications.get(clientId);
  if (application === null) throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'No application has this client_id.' });
  return application.rateLimit ?? null;
}
