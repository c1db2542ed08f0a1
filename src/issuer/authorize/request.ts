import type { IssuerConfig } from '../../config/schema.js';
import { TokengateError } from '../../errors.js';
import { isMetadataClient, isMetadataClientId, MAX_CLIENT_ID_URL_LENGTH } from '../../client-metadata/client-id.js';
import type { ApplicationRecord } from '../../store/store.js';
import { grantAudience } from '../../resource/audience.js';
import type { ResourceRegistry } from '../../resource/registry.js';
import { resolveScopes } from '../../token/scope.js';
import type { FindClient } from '../clients.js';

/**
 * The authorization request (RFC 6749 4.1.1 with PKCE, RFC 7636), checked in the order RFC 6749
 * 4.1.2.1 demands: until the client and its redirect_uri are known to be registered, an error is
 * a page shown to the user (TokengateError); after that, it goes back to the application as
 * `redirect_uri?error=...` (AuthorizationRedirectError). Never the other way round: redirecting
 * to an unchecked redirect_uri would make this an open redirector.
 */

const PARAMETERS = [
  'client_id',
  'redirect_uri',
  'response_type',
  'scope',
  'state',
  'code_challenge',
  'code_challenge_method',
  'dpop_jkt',
  'prompt',
  // OpenID Connect Core 1.0 section 3.1.2.1
  'nonce',
  'max_age',
  'login_hint',
  'id_token_hint',
] as const;
/** The `prompt` values of OpenID Connect Core 1.0 section 3.1.2.1. */
export const PROMPT_VALUES = ['none', 'login', 'consent', 'select_account'] as const;
export type Prompt = (typeof PROMPT_VALUES)[number];
type ParameterName = (typeof PARAMETERS)[number];

/**
 * The request's parameters as sent, one value each but `resource`, which may repeat (RFC 8707);
 * kept in the session and checked again on approval.
 */
export type AuthorizationParameters = Partial<Record<ParameterName, string>> & { resource?: string[] };

export interface AuthorizationRequest {
  application: ApplicationRecord;
  redirectUri: string;
  state: string | undefined;
  scopes: string[];
  /** The resources the code's tokens will be for (RFC 8707). */
  audience: string[];
  codeChallenge: string | null;
  codeChallengeMethod: 'S256' | null;
  /** `dpop_jkt` (RFC 9449 section 10): the thumbprint of the key the code's tokens will be bound to; null when not sent. */
  dpopJkt: string | null;
  /** `prompt`'s values (none alone, or any of the others). */
  prompts: ReadonlySet<Prompt>;
  /** `max_age` in seconds: a sign-in older than this is made again; null when not sent. */
  maxAge: number | null;
  parameters: AuthorizationParameters;
}

/** An error the application hears about on its (registered) redirect_uri. */
export class AuthorizationRedirectError extends Error {
  constructor(
    readonly failure: TokengateError,
    readonly redirectUri: string,
    readonly state: string | undefined,
  ) {
    super(failure.description);
    this.name = 'AuthorizationRedirectError';
  }
}

/** RFC 7636 4.2: the S256 challenge is base64url; 43 to 128 characters as for a verifier. */
const CODE_CHALLENGE = /^[A-Za-z0-9_-]{43,128}$/;
/** An RFC 7638 SHA-256 thumbprint, base64url: 43 characters. */
const JWK_THUMBPRINT = /^[A-Za-z0-9_-]{43}$/;
/** Longer client ids are not ours: refused without a store call. */
const MAX_CLIENT_ID_LENGTH = 200;

/**
 * The longest value each parameter may have, in characters. The request is carried in the
 * sign-in form and kept in a signed-in session while it waits for consent, and `state` comes
 * back in a redirect: each of those stays small whatever a client sends. Generous for real
 * requests (a state is a random value or a short encoded blob; a redirect URI is registered).
 */
export const PARAMETER_LIMITS: Readonly<Record<ParameterName | 'resource', number>> = {
  client_id: MAX_CLIENT_ID_URL_LENGTH,
  redirect_uri: 2048,
  state: 2048,
  scope: 1024,
  response_type: 256,
  code_challenge: 256,
  code_challenge_method: 256,
  dpop_jkt: 256,
  prompt: 256,
  nonce: 512,
  max_age: 16,
  login_hint: 320,
  // An ID token of this issuer is about 1 KiB; the hint is carried in the sign-in form and the session like the rest.
  id_token_hint: 4096,
  resource: 512,
};
/** `resource` may repeat (RFC 8707), up to this many times. */
export const MAX_RESOURCES = 5;

type IssuerSettings = Pick<IssuerConfig, 'scopes' | 'defaultScopes'>;

export async function validateAuthorizationRequest(
  query: unknown,
  findClient: FindClient,
  issuer: IssuerSettings,
  resources: ResourceRegistry,
): Promise<AuthorizationRequest> {
  const { parameters, repeated, oversized } = readParameters(query);
  const application = await registeredApplication(findClient, parameters.client_id, repeated, oversized);
  const redirectUri = registeredRedirectUri(application, parameters.redirect_uri, repeated, oversized);
  refuseRepeatedParameters(repeated);
  refuseOversizedParameters(oversized);

  // From here on the redirect_uri is the application's own: errors go back to it.
  const sendBack = (code: 'INVALID_REQUEST' | 'UNSUPPORTED_RESPONSE_TYPE' | 'INVALID_SCOPE' | 'INVALID_TARGET', description: string) =>
    new AuthorizationRedirectError(new TokengateError(code, { description }), redirectUri, parameters.state);
  checkResponseType(parameters.response_type, sendBack);
  const pkce = checkPkce(parameters, application, sendBack);
  const scopes = resolveScopes(parameters.scope, application.scopes, issuer.scopes, issuer.defaultScopes);
  if (!scopes.ok) throw sendBack('INVALID_SCOPE', scopes.reason);
  const dpopJkt = parameters.dpop_jkt ?? null;
  if (dpopJkt !== null && !JWK_THUMBPRINT.test(dpopJkt))
    throw sendBack('INVALID_REQUEST', 'dpop_jkt must be the base64url SHA-256 JWK thumbprint of the DPoP key (RFC 7638).');
  const audience = requestedAudience(parameters.resource, application, resources, sendBack);
  const prompts = checkPrompt(parameters.prompt, sendBack);
  const maxAge = checkMaxAge(parameters.max_age, sendBack);

  return { application, redirectUri, state: parameters.state, scopes: scopes.scopes, audience, ...pkce, dpopJkt, prompts, maxAge, parameters };
}

/** The `resource` parameters checked as the token endpoint checks them; its invalid_target goes back to the application. */
function requestedAudience(
  requested: string[] | undefined,
  application: ApplicationRecord,
  resources: ResourceRegistry,
  sendBack: (code: 'INVALID_TARGET', description: string) => AuthorizationRedirectError,
): string[] {
  try {
    return grantAudience(requested, application, resources);
  } catch (error) {
    if (error instanceof TokengateError && error.code === 'INVALID_TARGET') throw sendBack('INVALID_TARGET', error.description);
    throw error;
  }
}

type SendBack = (code: 'INVALID_REQUEST' | 'UNSUPPORTED_RESPONSE_TYPE', description: string) => AuthorizationRedirectError;

/**
 * The known parameters, one value each; empty values count as absent. Unknown parameters are
 * ignored (RFC 6749 3.1). A value over its limit is not kept: its name is in `oversized`.
 */
function readParameters(query: unknown): { parameters: AuthorizationParameters; repeated: ParameterName[]; oversized: Array<ParameterName | 'resource'> } {
  const source = (typeof query === 'object' && query !== null ? query : {}) as Record<string, unknown>;
  const parameters: AuthorizationParameters = {};
  const repeated: ParameterName[] = [];
  const oversized: Array<ParameterName | 'resource'> = [];
  for (const name of PARAMETERS) {
    const value = source[name];
    if (Array.isArray(value)) repeated.push(name);
    else if (typeof value === 'string' && value.length > PARAMETER_LIMITS[name]) oversized.push(name);
    else if (typeof value === 'string' && value !== '') parameters[name] = value;
  }
  const resource = [source.resource].flat().filter((value): value is string => typeof value === 'string' && value !== '');
  if (resource.length > MAX_RESOURCES || resource.some((value) => value.length > PARAMETER_LIMITS.resource)) oversized.push('resource');
  else if (resource.length > 0) parameters.resource = [...new Set(resource)];
  return { parameters, repeated, oversized };
}

/**
 * The application, or a page: an unknown client_id, and a metadata document URL the operator's
 * list does not allow or whose document cannot be used (CLIENT_NOT_ALLOWED and
 * CLIENT_METADATA_UNUSABLE from the finder, which say which).
 */
async function registeredApplication(
  findClient: FindClient,
  clientId: string | undefined,
  repeated: ParameterName[],
  oversized: ReadonlyArray<ParameterName | 'resource'>,
): Promise<ApplicationRecord> {
  if (repeated.includes('client_id')) throw new TokengateError('UNKNOWN_CLIENT', { detail: 'client_id repeated' });
  if (oversized.includes('client_id')) throw new TokengateError('UNKNOWN_CLIENT', { detail: 'client_id too long' });
  if (clientId === undefined) throw new TokengateError('UNKNOWN_CLIENT', { detail: 'client_id missing' });
  // A metadata document URL may be longer: its own checks bound it.
  const application = clientId.length <= MAX_CLIENT_ID_LENGTH || isMetadataClientId(clientId) ? await findClient(clientId) : null;
  if (application === null) throw new TokengateError('UNKNOWN_CLIENT', { detail: 'client_id unknown' });
  return application;
}

/** Exact, character-for-character comparison (RFC 9700 2.1): no prefix, no normalization, no wildcard. */
function registeredRedirectUri(
  application: ApplicationRecord,
  redirectUri: string | undefined,
  repeated: ParameterName[],
  oversized: ReadonlyArray<ParameterName | 'resource'>,
): string {
  if (repeated.includes('redirect_uri')) throw new TokengateError('INVALID_REDIRECT_URI', { detail: 'redirect_uri repeated' });
  if (oversized.includes('redirect_uri')) throw new TokengateError('INVALID_REDIRECT_URI', { detail: 'redirect_uri too long' });
  if (redirectUri === undefined) throw new TokengateError('INVALID_REDIRECT_URI', { detail: 'redirect_uri missing' });
  if (!application.redirectUris.includes(redirectUri)) {
    throw new TokengateError('INVALID_REDIRECT_URI', {
      ...(isMetadataClient(application)
        ? {
            description: `The application gave a redirect_uri that its own metadata document (${application.clientId}) does not list, so you cannot be sent back to it.`,
          }
        : {}),
      detail: `redirect_uri not registered for ${application.clientId}`,
    });
  }
  return redirectUri;
}

/**
 * RFC 6749 3.1: parameters MUST NOT repeat. A repeated `state` could not be echoed faithfully,
 * so the page is shown rather than guessing which value the application meant.
 */
function refuseRepeatedParameters(repeated: ParameterName[]): void {
  if (repeated.length > 0) {
    throw new TokengateError('INVALID_REQUEST', {
      description: `The application's request repeats the parameter ${repeated.join(', ')}.`,
      detail: `repeated: ${repeated.join(',')}`,
    });
  }
}

/**
 * A value over its limit is a page, never a redirect: an oversized `state` could not be sent
 * back whole, and the application's request is broken either way.
 */
function refuseOversizedParameters(oversized: ReadonlyArray<ParameterName | 'resource'>): void {
  if (oversized.length === 0) return;
  const limits = oversized.map((name) =>
    name === 'resource'
      ? `resource (at most ${MAX_RESOURCES}, of ${PARAMETER_LIMITS.resource} characters each)`
      : `${name} (at most ${PARAMETER_LIMITS[name]} characters)`,
  );
  throw new TokengateError('INVALID_REQUEST', {
    description: `The application's request has a parameter longer than this service accepts: ${limits.join(', ')}.`,
    detail: `oversized: ${oversized.join(',')}`,
  });
}

function checkResponseType(responseType: string | undefined, sendBack: SendBack): void {
  if (responseType === undefined) throw sendBack('INVALID_REQUEST', 'The response_type parameter is required.');
  if (responseType !== 'code') throw sendBack('UNSUPPORTED_RESPONSE_TYPE', 'Only response_type=code is supported.');
}

/** `prompt`: known values, space-separated; `none` only alone (OpenID Connect Core 1.0 section 3.1.2.1). */
function checkPrompt(prompt: string | undefined, sendBack: SendBack): ReadonlySet<Prompt> {
  const values = new Set((prompt ?? '').split(' ').filter((value) => value !== ''));
  const unknown = [...values].filter((value) => !(PROMPT_VALUES as readonly string[]).includes(value));
  if (unknown.length > 0) throw sendBack('INVALID_REQUEST', `prompt may be ${PROMPT_VALUES.join(', ')}; ${unknown.join(', ')} is not supported.`);
  if (values.has('none') && values.size > 1) throw sendBack('INVALID_REQUEST', 'prompt=none cannot be combined with other prompt values.');
  return values as Set<Prompt>;
}

/** `max_age`: a whole number of seconds, 0 or more. */
function checkMaxAge(maxAge: string | undefined, sendBack: SendBack): number | null {
  if (maxAge === undefined) return null;
  if (!/^\d{1,10}$/.test(maxAge)) throw sendBack('INVALID_REQUEST', 'max_age must be a whole number of seconds.');
  return Number(maxAge);
}

/**
 * The request as it continues after the user signed in on its sign-in page: a sign-in just made
 * is what `prompt=login`, `max_age` and `id_token_hint` asked for, so they are not asked again.
 */
export function afterSignIn(parameters: AuthorizationParameters): AuthorizationParameters {
  const { max_age: _maxAge, id_token_hint: _hint, prompt, ...rest } = parameters;
  const remaining = (prompt ?? '')
    .split(' ')
    .filter((value) => value !== '' && value !== 'login' && value !== 'select_account')
    .join(' ');
  return remaining === '' ? rest : { ...rest, prompt: remaining };
}

/**
 * Only S256: `plain` (also what a challenge without a method means, RFC 7636 4.3) would give
 * an eavesdropper on the authorization response the verifier itself. Public clients cannot keep
 * a secret, so for them PKCE is what binds the code to the client that asked for it.
 */
function checkPkce(
  parameters: AuthorizationParameters,
  application: ApplicationRecord,
  sendBack: SendBack,
): Pick<AuthorizationRequest, 'codeChallenge' | 'codeChallengeMethod'> {
  const { code_challenge: challenge, code_challenge_method: method } = parameters;
  if (challenge === undefined) {
    if (method !== undefined) throw sendBack('INVALID_REQUEST', 'code_challenge_method was given without a code_challenge.');
    if (!application.confidential)
      throw sendBack('INVALID_REQUEST', 'This application must use PKCE: code_challenge and code_challenge_method=S256 are required.');
    return { codeChallenge: null, codeChallengeMethod: null };
  }
  if (method !== 'S256') throw sendBack('INVALID_REQUEST', 'code_challenge_method must be S256.');
  if (!CODE_CHALLENGE.test(challenge)) throw sendBack('INVALID_REQUEST', 'code_challenge must be 43 to 128 characters of base64url.');
  return { codeChallenge: challenge, codeChallengeMethod: 'S256' };
}

/**
 * `redirectUri` with `parameters` appended to its query, keeping the query it already has
 * (RFC 6749 3.1.2) exactly as registered. A fragment, which a registered URI should not have,
 * stays at the end where it belongs.
 */
export function redirectUriWith(redirectUri: string, parameters: Record<string, string | undefined>): string {
  const hashAt = redirectUri.indexOf('#');
  const base = hashAt === -1 ? redirectUri : redirectUri.slice(0, hashAt);
  const fragment = hashAt === -1 ? '' : redirectUri.slice(hashAt);
  const added = new URLSearchParams(Object.entries(parameters).filter((entry): entry is [string, string] => entry[1] !== undefined)).toString();
  if (added === '') return redirectUri;
  // The query is what follows the first "?": a later "?" (`?return=/x?`) is part of its last pair.
  const queryAt = base.indexOf('?');
  const separator = queryAt === -1 ? '?' : queryAt === base.length - 1 || base.endsWith('&') ? '' : '&';
  return `${base}${separator}${added}${fragment}`;
}

/** The query string that starts this request again (after signing in, or switching account). */
export function authorizationPath(parameters: AuthorizationParameters): string {
  const { resource, ...single } = parameters;
  const query = new URLSearchParams(single as Record<string, string>);
  for (const value of resource ?? []) query.append('resource', value);
  return `/oauth/authorize?${query.toString()}`;
}
