import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { DPOP_SIGNING_ALGORITHMS } from '../dpop/algorithms.js';
import { logoutMetadata } from '../logout/end-session.js';
import { CLIENT_AUTH_METHODS } from './client-auth.js';
import { ID_JAG_PROFILE } from '../identity-providers/index.js';
import { GRANT_TYPES, JWT_BEARER_GRANT_TYPE } from './grant-types/index.js';
import { INTROSPECTION_ENDPOINT_PATH } from './introspection-endpoint.js';
import { REVOCATION_ENDPOINT_PATH } from './revocation-endpoint.js';
import { TOKEN_ENDPOINT_PATH } from './token-endpoint.js';
import { OPENID_JWKS_PATH } from '../openid/jwks-endpoint.js';
import { PROMPT_VALUES } from './authorize/request.js';
import { CLAIMS_SUPPORTED } from './id-token.js';
import { USERINFO_ENDPOINT_PATH } from './userinfo-endpoint.js';

export const METADATA_PATH = '/.well-known/oauth-authorization-server';
export const AUTHORIZATION_ENDPOINT_PATH = '/oauth/authorize';

/**
 * GET /.well-known/oauth-authorization-server (RFC 8414), from the config in effect: client
 * libraries discover every endpoint from `issuer.issuerUrl`, the URL clients reach tokengate at,
 * and whether identity assertions are accepted from the trusted providers a reload may change.
 */
export function registerMetadataEndpoint(scope: FastifyInstance, context: TokengateContext): void {
  scope.get(METADATA_PATH, async function metadataEndpoint() {
    return authorizationServerMetadata(context);
  });
  if (context.openid !== null)
    scope.get(OPENID_CONFIGURATION_PATH, async function openIdConfiguration() {
      return openIdProviderMetadata(context);
    });
}

export const OPENID_CONFIGURATION_PATH = '/.well-known/openid-configuration';

/**
 * OpenID Connect Discovery 1.0: the RFC 8414 metadata (the same values for every field both
 * name) with what an OpenID provider adds. ID tokens have public subjects (a user's id, the same
 * for every application) and come from the code flow alone.
 */
export function openIdProviderMetadata(context: TokengateContext) {
  const metadata = authorizationServerMetadata(context);
  return {
    ...metadata,
    userinfo_endpoint: `${metadata.issuer}${USERINFO_ENDPOINT_PATH}`,
    jwks_uri: `${metadata.issuer}${OPENID_JWKS_PATH}`,
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: [...context.config.openidConnect.algorithms],
    claims_supported: [...CLAIMS_SUPPORTED],
    prompt_values_supported: [...PROMPT_VALUES],
    claims_parameter_supported: false,
    request_parameter_supported: false,
    request_uri_parameter_supported: false,
  };
}

/** The issuer identifier (RFC 8414 `issuer`, RFC 9207 `iss`): `issuer.issuerUrl` without a trailing slash. */
export function issuerIdentifier(issuerUrl: string): string {
  return issuerUrl.replace(/\/+$/, '');
}

export function authorizationServerMetadata(context: TokengateContext) {
  const issuer = issuerIdentifier(context.config.issuer.issuerUrl);
  const assertions = context.identityProviders.enabled;
  const secretMethods = CLIENT_AUTH_METHODS.filter((method) => method !== 'none');
  return {
    issuer,
    authorization_endpoint: `${issuer}${AUTHORIZATION_ENDPOINT_PATH}`,
    token_endpoint: `${issuer}${TOKEN_ENDPOINT_PATH}`,
    revocation_endpoint: `${issuer}${REVOCATION_ENDPOINT_PATH}`,
    introspection_endpoint: `${issuer}${INTROSPECTION_ENDPOINT_PATH}`,
    // The JWT bearer grant only while an identity provider is trusted (identityProviders).
    grant_types_supported: [...GRANT_TYPES.keys()].filter((type) => type !== JWT_BEARER_GRANT_TYPE || assertions),
    response_types_supported: ['code'],
    code_challenge_methods_supported: ['S256'],
    // RFC 9207: every authorization response names its issuer, so a client that talks to several
    // authorization servers (MCP clients do) can tell which one answered (mix-up defence, RFC 9700 4.4).
    authorization_response_iss_parameter_supported: true,
    token_endpoint_auth_methods_supported: [...CLIENT_AUTH_METHODS],
    revocation_endpoint_auth_methods_supported: [...CLIENT_AUTH_METHODS],
    introspection_endpoint_auth_methods_supported: secretMethods,
    scopes_supported: [...context.config.issuer.scopes],
    // With OpenID Connect on (its scopes are then among the issuer's): where its ID tokens' keys are.
    ...(context.openid === null ? {} : { jwks_uri: `${issuer}${OPENID_JWKS_PATH}` }),
    dpop_signing_alg_values_supported: [...DPOP_SIGNING_ALGORITHMS],
    // A client_id may be the URL of the client's metadata document, when the operator's list allows it.
    ...(context.config.clientMetadataDocuments.enabled ? { client_id_metadata_document_supported: true } : {}),
    // draft-ietf-oauth-identity-assertion-authz-grant: the assertions of trusted identity providers (ID-JAG).
    ...(assertions ? { authorization_grant_profiles_supported: [ID_JAG_PROFILE] } : {}),
    // OpenID Connect RP-Initiated and Back-Channel Logout: with OpenID Connect on (its keys sign the logout tokens).
    ...(context.openid === null ? {} : logoutMetadata(issuer)),
  };
}
