import type { FastifyRequest } from 'fastify';
import { TokengateError } from '../errors.js';
import { decodeFormComponent } from '../http/form.js';
import type { ApplicationRecord } from '../store/store.js';
import { constantTimeEqual } from '../token/constant-time.js';
import { tokenDigest } from '../token/token-value.js';
import type { FindClient } from './clients.js';
import type { OAuthParameters } from './oauth-request.js';

/**
 * Client authentication at the back-channel endpoints (RFC 6749 section 2.3): HTTP Basic
 * (`client_secret_basic`), `client_id` + `client_secret` in the body (`client_secret_post`), or,
 * for a public client that has no secret, `client_id` alone (`none`).
 */

export type ClientAuthMethod = 'client_secret_basic' | 'client_secret_post' | 'none';

export const CLIENT_AUTH_METHODS: readonly ClientAuthMethod[] = ['client_secret_basic', 'client_secret_post', 'none'];

export interface AuthenticatedClient {
  readonly application: ApplicationRecord;
}

/**
 * What the store keeps of a client secret. Secrets are 256 random bits, so a fast hash is
 * enough: there is no dictionary to run against it, unlike a password.
 */
export function clientSecretDigest(secret: string): string {
  return tokenDigest(secret);
}

interface PresentedCredentials {
  clientId: string | undefined;
  secret: string | undefined;
}

export interface ClientAuthOptions {
  /** Whether a public client (client_id only) may call this endpoint. */
  allowPublicClients: boolean;
}

export async function authenticateClient(
  request: FastifyRequest,
  parameters: OAuthParameters,
  findClient: FindClient,
  options: ClientAuthOptions,
): Promise<AuthenticatedClient> {
  const presented = presentedCredentials(request.headers.authorization, parameters);
  if (presented.clientId === undefined) {
    throw new TokengateError('INVALID_CLIENT', {
      description: 'Client authentication is required: HTTP Basic, or client_id and client_secret in the body.',
      detail: 'no client credentials',
    });
  }
  const application = await findClientOrRefuse(findClient, presented.clientId);

  if (presented.secret === undefined) {
    if (application.confidential) {
      throw new TokengateError('INVALID_CLIENT', {
        description: 'This client must authenticate with its client secret.',
        detail: `confidential client ${application.clientId} sent no secret`,
      });
    }
    if (!options.allowPublicClients) {
      throw new TokengateError('INVALID_CLIENT', {
        description: 'This endpoint requires a confidential client authenticating with its client secret.',
        detail: `public client ${application.clientId}`,
      });
    }
    return { application };
  }
  // A public client has no secret, so any secret it sends is wrong; both comparisons take the same path.
  const expected = application.secretDigest ?? '';
  if (!constantTimeEqual(clientSecretDigest(presented.secret), expected) || application.secretDigest === null) {
    throw new TokengateError('INVALID_CLIENT', { detail: `wrong client secret for ${application.clientId}` });
  }
  return { application };
}

/**
 * The client, or invalid_client: an unknown id, and a metadata document URL the operator's list
 * does not allow or whose document cannot be used (said in the description: fail closed).
 */
async function findClientOrRefuse(findClient: FindClient, clientId: string): Promise<ApplicationRecord> {
  let application: ApplicationRecord | null;
  try {
    application = await findClient(clientId);
  } catch (error) {
    if (error instanceof TokengateError && (error.code === 'CLIENT_NOT_ALLOWED' || error.code === 'CLIENT_METADATA_UNUSABLE')) {
      throw new TokengateError('INVALID_CLIENT', { description: error.description, detail: error.detail });
    }
    throw error;
  }
  // The unknown value is not logged: a client that swapped its parameters would log its secret.
  if (application === null) throw new TokengateError('INVALID_CLIENT', { detail: 'unknown client_id' });
  return application;
}

/**
 * RFC 6749 section 2.3: a client MUST NOT use more than one authentication method per request.
 * A body client_id beside Basic credentials is tolerated when it names the same client (some
 * libraries always send it), refused when it names another.
 */
function presentedCredentials(authorization: string | undefined, parameters: OAuthParameters): PresentedCredentials {
  if (authorization === undefined) {
    return { clientId: parameters.client_id, secret: parameters.client_secret };
  }
  const basic = parseBasicCredentials(authorization);
  if (parameters.client_secret !== undefined) {
    throw new TokengateError('INVALID_REQUEST', { description: 'Use one client authentication method: HTTP Basic or client_secret in the body, not both.' });
  }
  if (parameters.client_id !== undefined && parameters.client_id !== basic.clientId) {
    throw new TokengateError('INVALID_REQUEST', { description: 'The client_id in the body differs from the one in the HTTP Basic credentials.' });
  }
  return { clientId: basic.clientId, secret: basic.secret };
}

const BASIC = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i;

/** RFC 6749 section 2.3.1: client id and secret are form-urlencoded, then joined by ":" and base64-encoded (RFC 7617). */
function parseBasicCredentials(authorization: string): { clientId: string; secret: string } {
  const encoded = BASIC.exec(authorization)?.[1];
  const decoded = encoded === undefined ? '' : Buffer.from(encoded, 'base64').toString('utf8');
  const separator = decoded.indexOf(':');
  const clientId = separator > 0 ? decodeFormComponent(decoded.slice(0, separator)) : undefined;
  const secret = separator > 0 ? decodeFormComponent(decoded.slice(separator + 1)) : undefined;
  if (clientId === undefined || secret === undefined || clientId === '' || secret === '') {
    throw new TokengateError('INVALID_CLIENT', {
      description: 'The Authorization header must carry HTTP Basic client credentials.',
      detail: 'malformed or non-Basic Authorization header',
    });
  }
  return { clientId, secret };
}
