import { TokengateError } from '../errors.js';
import type { IssuerConfig } from '../config/schema.js';
import type { ApplicationRecord } from '../store/store.js';
import { ROUTE_POLICY } from '../ratelimit/config-checks.js';
import { isScopeToken } from '../token/scope.js';
import { redirectUriProblem } from '../http/redirect-uri.js';

/**
 * Input checks of the admin API. Each refusal is a 400 `invalid_request` whose description
 * names the field and what it needs, so the CLI can print it as it is.
 */

export interface ApplicationInput {
  name: string;
  redirectUris: string[];
  scopes: string[];
  confidential: boolean;
  /** Empty: every registered resource. */
  resources: string[];
  /** The algorithm of its ID tokens; absent: RS256. */
  idTokenSignedResponseAlg?: 'RS256' | 'ES256';
  logout: LogoutSettings;
}

/** How an application hears of sign-out (OpenID Connect RP-Initiated and Back-Channel Logout 1.0). */
export type LogoutSettings = Pick<ApplicationRecord, 'postLogoutRedirectUris' | 'backchannelLogoutUri' | 'backchannelLogoutSessionRequired'>;

export interface UserInput {
  email: string;
  password: string;
}

export type RevocationTarget = { userId: string } | { clientId: string } | { identityProvider: string; subject: string };

export const MIN_PASSWORD_LENGTH = 8;
/** scrypt's cost does not grow with the password, but there is no reason to accept a novel. */
const MAX_PASSWORD_LENGTH = 1024;
const MAX_NAME_LENGTH = 100;
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

type IssuerScopes = Pick<IssuerConfig, 'scopes' | 'defaultScopes'>;

/** `idTokenAlgorithms`: those of `openidConnect.algorithms` (none while it is off). */
export function readApplicationInput(
  body: unknown,
  issuer: IssuerScopes,
  registeredResources: readonly string[],
  idTokenAlgorithms: readonly string[] = [],
): ApplicationInput {
  const fields = asObject(body);
  const name = readName(requiredString(fields, 'name'));
  const redirectUris = readRedirectUris(stringList(fields, 'redirect_uris') ?? []);
  const scopes = readScopes(stringList(fields, 'scopes') ?? [...issuer.defaultScopes], issuer);
  const confidential = fields.confidential ?? true;
  if (typeof confidential !== 'boolean') throw invalid('confidential must be true or false');
  const resources = readResources(stringList(fields, 'resources') ?? [], registeredResources);
  const alg = fields.id_token_signed_response_alg === undefined ? undefined : readIdTokenAlgorithm(fields.id_token_signed_response_alg, idTokenAlgorithms);
  const { backchannelLogoutUri, ...logout } = readLogoutSettings(fields);
  return {
    name,
    redirectUris,
    scopes,
    confidential,
    resources,
    ...(alg === undefined ? {} : { idTokenSignedResponseAlg: alg }),
    logout: { ...logout, ...(backchannelLogoutUri === undefined || backchannelLogoutUri === null ? {} : { backchannelLogoutUri }) },
  };
}

/**
 * The settings an operator may change on a registered application (`PATCH
 * /admin/applications/:clientId`, `tokengate apps update`): each field given replaces the
 * application's, each field left out keeps it. Whether it is confidential cannot change (its
 * secret, or the lack of one, is what its clients were handed).
 */
export type ApplicationPatch = Partial<
  Pick<ApplicationRecord, 'name' | 'redirectUris' | 'scopes' | 'dpop' | 'resources' | 'rateLimit' | 'tokenExchange' | 'idTokenSignedResponseAlg'>
> &
  LogoutPatch;

/** `backchannelLogoutUri: null` takes the URI away. */
type LogoutPatch = { postLogoutRedirectUris?: string[]; backchannelLogoutUri?: string | null; backchannelLogoutSessionRequired?: boolean };

const LOGOUT_FIELDS = ['post_logout_redirect_uris', 'backchannel_logout_uri', 'backchannel_logout_session_required'];

/** `registeredResources`: the resources an application may be limited to; `rateLimits`: the policies its tier may name. */
export function readApplicationPatch(
  body: unknown,
  issuer: IssuerScopes,
  registeredResources: readonly string[],
  rateLimits: Readonly<Record<string, unknown>>,
  idTokenAlgorithms: readonly string[] = [],
): ApplicationPatch {
  const fields = asObject(body);
  const known = new Set([
    'name',
    'redirect_uris',
    'scopes',
    'dpop',
    'resources',
    'rate_limit',
    'token_exchange',
    'id_token_signed_response_alg',
    ...LOGOUT_FIELDS,
  ]);
  const unknownFields = Object.keys(fields).filter((field) => !known.has(field));
  if (unknownFields.length > 0) throw invalid(`cannot update ${unknownFields.join(', ')} (an application's updatable fields: ${[...known].join(', ')})`);
  if (Object.keys(fields).length === 0) throw invalid(`give at least one field to update (${[...known].join(', ')})`);
  const patch: ApplicationPatch = {};
  const name = optionalString(fields, 'name');
  if (name !== undefined) patch.name = readName(name);
  const redirectUris = stringList(fields, 'redirect_uris');
  if (redirectUris !== undefined) patch.redirectUris = readRedirectUris(redirectUris);
  const scopes = stringList(fields, 'scopes');
  if (scopes !== undefined) patch.scopes = readScopes(scopes, issuer);
  const dpop = fields.dpop;
  if (dpop !== undefined) {
    if (dpop !== 'required' && dpop !== 'allowed') throw invalid('dpop must be "required" (DPoP-bound tokens only) or "allowed" (Bearer tokens too)');
    patch.dpop = dpop;
  }
  const resources = stringList(fields, 'resources');
  if (resources !== undefined) patch.resources = readResources(resources, registeredResources);
  if (fields.rate_limit !== undefined) patch.rateLimit = readTier(fields.rate_limit, rateLimits);
  const tokenExchange = fields.token_exchange;
  if (tokenExchange !== undefined) {
    if (typeof tokenExchange !== 'boolean') throw invalid("token_exchange must be true (it may exchange its users' tokens, RFC 8693) or false");
    patch.tokenExchange = tokenExchange;
  }
  if (fields.id_token_signed_response_alg !== undefined)
    patch.idTokenSignedResponseAlg = readIdTokenAlgorithm(fields.id_token_signed_response_alg, idTokenAlgorithms);
  return { ...patch, ...readLogoutSettings(fields) };
}

/**
 * The logout fields given, checked like redirect URIs (https, or http on the loopback for
 * development; no fragment, no credentials): a post-logout redirect URI is where a browser is
 * sent, and the back-channel URI is where this server POSTs from inside the deployment, so
 * neither may name a plain-http host elsewhere. `backchannel_logout_uri: null` removes it.
 */
function readLogoutSettings(fields: Record<string, unknown>): LogoutPatch {
  const settings: LogoutPatch = {};
  const postLogout = stringList(fields, 'post_logout_redirect_uris');
  if (postLogout !== undefined) settings.postLogoutRedirectUris = readUriList('post_logout_redirect_uris', postLogout);
  const backchannel = fields.backchannel_logout_uri;
  if (backchannel === null) settings.backchannelLogoutUri = null;
  else if (backchannel !== undefined) {
    if (typeof backchannel !== 'string' || backchannel === '') throw invalid('backchannel_logout_uri must be a URL, or null to remove it');
    [settings.backchannelLogoutUri] = readUriList('backchannel_logout_uri', [backchannel]);
  }
  const sessionRequired = fields.backchannel_logout_session_required;
  if (sessionRequired !== undefined) {
    if (typeof sessionRequired !== 'boolean')
      throw invalid('backchannel_logout_session_required must be true (every logout token must name the session, sid) or false');
    settings.backchannelLogoutSessionRequired = sessionRequired;
  }
  return settings;
}

/** `id_token_signed_response_alg` (OpenID Connect Dynamic Client Registration 1.0): one of the deployment's ID token algorithms. */
function readIdTokenAlgorithm(value: unknown, algorithms: readonly string[]): 'RS256' | 'ES256' {
  if (algorithms.length === 0) throw invalid('id_token_signed_response_alg needs OpenID Connect on (openidConnect.enabled)');
  if (typeof value !== 'string' || !algorithms.includes(value))
    throw invalid(`id_token_signed_response_alg must be one of ${algorithms.join(', ')} (openidConnect.algorithms)`);
  return value as 'RS256' | 'ES256';
}

/**
 * The resources an application's tokens may be for: identifiers of configured resources, or
 * none to allow every one. Tokens issued before a change keep the audience they were given.
 */
export function readResources(resources: string[], registered: readonly string[]): string[] {
  const unknown = resources.filter((resource) => !registered.includes(resource));
  if (unknown.length > 0) {
    const known = registered.length === 0 ? 'no resources are configured' : `configured resources: ${registered.join(' ')}`;
    throw invalid(`resources: unknown resource ${unknown.map((resource) => JSON.stringify(resource.slice(0, 200))).join(', ')} (${known})`);
  }
  return [...new Set(resources)];
}

/** A tier: a policy of the config's rateLimits, or null (or "default") for the routes' own policies. */
export function readTier(value: unknown, rateLimits: Readonly<Record<string, unknown>>): string | null {
  if (value === null || value === ROUTE_POLICY) return null;
  const known = Object.keys(rateLimits);
  if (typeof value !== 'string' || !Object.hasOwn(rateLimits, value)) {
    throw invalid(
      `rate_limit must name a policy of the config's rateLimits (${known.length === 0 ? 'none is defined' : known.join(', ')}), or be null or "${ROUTE_POLICY}" for the routes' own policies`,
    );
  }
  return value;
}

function readName(value: string): string {
  const name = value.trim();
  if (name === '' || name.length > MAX_NAME_LENGTH || /[\x00-\x1f\x7f]/.test(name)) {
    throw invalid(`name must be 1 to ${MAX_NAME_LENGTH} printable characters`);
  }
  return name;
}

function readRedirectUris(redirectUris: string[]): string[] {
  if (redirectUris.length === 0) throw invalid('redirect_uris must list at least one callback URL');
  return readUriList('redirect_uris', redirectUris);
}

/** URIs tokengate sends a browser or a request to, each held to the redirect URI rule; duplicates dropped. */
function readUriList(field: string, uris: string[]): string[] {
  for (const uri of uris) {
    const problem = redirectUriProblem(uri);
    if (problem !== null) throw invalid(`${field}: ${JSON.stringify(uri.slice(0, 200))} ${problem}`);
  }
  return [...new Set(uris)];
}

export function readScopes(scopes: string[], issuer: IssuerScopes): string[] {
  if (scopes.length === 0) throw invalid("scopes must list at least one scope (or be left out for the issuer's default scopes)");
  const unknown = scopes.filter((scope) => !isScopeToken(scope) || !issuer.scopes.includes(scope));
  if (unknown.length > 0)
    throw invalid(`scopes: unknown scope ${unknown.map((scope) => JSON.stringify(scope)).join(', ')} (this issuer knows: ${issuer.scopes.join(' ')})`);
  return [...new Set(scopes)];
}

export function readUserInput(body: unknown): UserInput {
  const fields = asObject(body);
  const email = requiredString(fields, 'email').trim().toLowerCase();
  if (email.length > 254 || !EMAIL.test(email)) throw invalid('email must be an e-mail address such as ana@example.com');
  const password = requiredString(fields, 'password');
  if (password.length < MIN_PASSWORD_LENGTH) throw invalid(`password must be at least ${MIN_PASSWORD_LENGTH} characters`);
  if (password.length > MAX_PASSWORD_LENGTH) throw invalid(`password must be at most ${MAX_PASSWORD_LENGTH} characters`);
  return { email, password };
}

export function readRevocationTarget(body: unknown): RevocationTarget {
  const fields = asObject(body);
  const userId = optionalString(fields, 'user_id');
  const clientId = optionalString(fields, 'client_id');
  const identityProvider = optionalString(fields, 'identity_provider');
  const subject = optionalString(fields, 'subject');
  if ([userId, clientId, identityProvider].filter((value) => value !== undefined).length !== 1)
    throw invalid('give exactly one of user_id, client_id and identity_provider (with subject)');
  if ((identityProvider === undefined) !== (subject === undefined)) throw invalid('identity_provider and subject go together');
  if (identityProvider !== undefined) return { identityProvider, subject: subject! };
  return userId !== undefined ? { userId } : { clientId: clientId! };
}

export function asObject(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('the body must be a JSON object');
  return body as Record<string, unknown>;
}

function optionalString(fields: Record<string, unknown>, name: string): string | undefined {
  const value = fields[name];
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value === '') throw invalid(`${name} must be a non-empty string`);
  return value;
}

export function requiredString(fields: Record<string, unknown>, name: string): string {
  const value = optionalString(fields, name);
  if (value === undefined) throw invalid(`${name} is required`);
  return value;
}

export function stringList(fields: Record<string, unknown>, name: string): string[] | undefined {
  const value = fields[name];
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) throw invalid(`${name} must be a list of strings`);
  return value;
}

export function invalid(description: string): TokengateError {
  return new TokengateError('INVALID_REQUEST', { description });
}
