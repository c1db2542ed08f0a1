import { TokengateError } from '../../errors.js';
import type { GrantTypeRequest } from './grant-type.js';

/**
 * The user's grant to the application (remembered consent, src/store/grants.ts) bounds what its
 * codes and refresh tokens may still issue: once the user disconnects the application (or the
 * operator revokes the grant), none of them issues anything again.
 *
 * The check comes after the tokens are saved, as one command that also marks the grant used.
 * Ending a grant deletes it first and revokes the tokens of the user at the application second
 * (src/store/deletions.ts), so an issuance racing it either saved its tokens before the grant
 * went (the revocation then takes them) or finds it gone here and revokes them itself: none
 * outlives the disconnection. A grant ended and approved again has a new id, so a code or a
 * refresh token of the old one is refused too.
 */

interface GrantBound {
  clientId: string;
  userId: string;
  scopes: string[];
  audience?: string[] | undefined;
  familyId: string;
  issuedAt: number;
  /** Absent on codes and refresh tokens from before grants were kept. */
  grantId?: string | undefined;
}

/**
 * The id of the grant a code or refresh token was issued under. One from before grants were
 * kept carries none: the user consented to what it carries, so that becomes their grant, unless
 * the user ended a grant to the application since it was issued (those are in no index a
 * disconnection empties: this is where they end).
 */
export async function grantIdOf(request: GrantTypeRequest, record: GrantBound): Promise<string> {
  if (record.grantId !== undefined) return record.grantId;
  const { grants } = request.context.store;
  const ended = await grants.endedAt(record.userId, record.clientId);
  if (ended !== null && ended >= record.issuedAt) return refuseEndedGrant(request, record);
  const grant = await grants.approve(record.userId, record.clientId, { scopes: record.scopes, resources: record.audience ?? [] }, Date.now());
  return grant.id;
}

/** After the tokens of `familyId` are saved: the grant still stands (and is marked used), or they are revoked and the request refused. */
export async function confirmGrant(request: GrantTypeRequest, bound: { userId: string; clientId: string; grantId: string; familyId: string }): Promise<void> {
  if (await request.context.store.grants.touch(bound.userId, bound.clientId, bound.grantId, Date.now())) return;
  await refuseEndedGrant(request, bound);
}

async function refuseEndedGrant(request: GrantTypeRequest, bound: { clientId: string; familyId: string }): Promise<never> {
  const revoked = await request.context.store.tokens.revokeFamily(bound.familyId);
  request.log.info({ clientId: bound.clientId, familyId: bound.familyId, revoked }, 'the grant the tokens were issued under has ended: revoked');
  throw new TokengateError('INVALID_GRANT', {
    description: 'The user disconnected this application, or its access was revoked: the user must authorize it again.',
  });
}
