import { TokengateError } from '../../errors.js';
import type { GrantTypeRequest } from './grant-type.js';

/**
 * Authorization codes and refresh tokens are single use and bound to one client. Presenting one
 * again, or from another client, means it leaked: the whole token family it belongs to is
 * revoked (RFC 6749 section 4.1.2 for codes, RFC 9700 section 4.14.2 for refresh tokens), and
 * the request is refused with the same answer as an unknown value, so nothing tells an attacker
 * which case it hit.
 */
export async function refuseLeakedCredential(
  request: GrantTypeRequest,
  familyId: string,
  what: 'authorization code' | 'refresh token',
  reason: 'replayed' | 'presented by another client',
): Promise<never> {
  const revoked = await request.context.store.tokens.revokeFamily(familyId);
  request.log.warn({ clientId: request.client.application.clientId, familyId, revoked, reason }, `${what} ${reason}: token family revoked`);
  throw invalidCredential(what);
}

export function invalidCredential(what: 'authorization code' | 'refresh token'): TokengateError {
  return new TokengateError('INVALID_GRANT', { description: `The ${what} is invalid, expired, revoked, already used, or was issued to another client.` });
}
