import type { Store } from './store.js';

/**
 * Deleting an application or a user spans ports: the record goes first (from then on it
 * cannot be used to sign in or to ask for a token), then every token issued to it is revoked
 * for good, so a grant still in flight saves its token born revoked, then its users' grants go.
 * The tokens go through `store.tokens`, so a token cache in front of them drops them at once.
 */
export async function deleteApplicationAndTokens(store: Store, clientId: string): Promise<boolean> {
  const existed = await store.applications.delete(clientId);
  await store.tokens.revokeClientTokens(clientId, { forGood: true });
  await store.grants.deleteClient(clientId);
  return existed;
}

export async function deleteUserAndTokens(store: Store, id: string): Promise<boolean> {
  if (!(await store.users.delete(id))) return false;
  await store.tokens.revokeUserTokens(id, { forGood: true });
  await store.grants.deleteUser(id);
  return true;
}

/**
 * Ends a user's grant to an application (the user disconnects it, or the operator revokes it):
 * the grant first, then every token of that user at that application, announced on the
 * revocation feed like every revocation. In that order, a code exchange or refresh racing it
 * cannot keep what it issues: it checks the grant after saving its tokens
 * (src/issuer/grant-types/grant-check.ts), so it either saved them before the grant went (and
 * the revocation takes them) or finds the grant gone (and revokes them itself).
 * `existed`: there was a grant; the tokens are revoked either way.
 */
export async function endGrant(store: Store, userId: string, clientId: string): Promise<{ existed: boolean; revoked: number }> {
  const existed = await store.grants.delete(userId, clientId, Date.now());
  const revoked = await store.tokens.revokeUserClientTokens(userId, clientId);
  return { existed, revoked };
}
