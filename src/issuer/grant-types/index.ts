import { authorizationCode } from './authorization-code.js';
import { clientCredentials } from './client-credentials.js';
import type { GrantType } from './grant-type.js';
import { jwtBearer } from './jwt-bearer.js';
import { refreshToken } from './refresh-token.js';
import { tokenExchange } from './token-exchange.js';

/** The grant types the token endpoint serves, keyed by `grant_type`; the metadata document lists the same keys. */
export const GRANT_TYPES: ReadonlyMap<string, GrantType> = new Map(
  [authorizationCode, clientCredentials, refreshToken, jwtBearer, tokenExchange].map((grantType) => [grantType.type, grantType]),
);

export type { GrantType, GrantTypeRequest } from './grant-type.js';
export { JWT_BEARER_GRANT_TYPE } from './jwt-bearer.js';
export { TOKEN_EXCHANGE_GRANT_TYPE } from './token-exchange.js';
