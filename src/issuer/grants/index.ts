import { authorizationCodeGrant } from './authorization-code.js';
import { clientCredentialsGrant } from './client-credentials.js';
import type { Grant } from './grant.js';
import { refreshTokenGrant } from './refresh-token.js';

/** The grant types the token endpoint serves, keyed by `grant_type`; the metadata document lists the same keys. */
export const GRANTS: ReadonlyMap<string, Grant> = new Map(
  [authorizationCodeGrant, clientCredentialsGrant, refreshTokenGrant].map((grant) => [grant.type, grant]),
);

export type { Grant, GrantRequest } from './grant.js';
