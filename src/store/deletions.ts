import type { Store } from './store.js';

/**
 * Deleting an application or a user spans two ports: the record goes first (from then on it
 * cannot be used to sign in or to ask for a token), then every token issued to it is revoked
 * for good, so a grant still in flight saves its token born revoked. The tokens go through
 * `store.tokens`, so a token cache in front of them drops theirs at once.
 */
export async function deleteApplicationAndTokens(store: Store, clientId: string): Promise<boolean> {
  const existed = await store.applications.delete(clientId);
  await store.tokens.revokeClientTokens(clientId, { forGood: true });
  return existed;
}

export async function deleteUserAndTokens(store: Store, id: string): Promise<boolean> {
  if (!(await store.users.delete(id))) return false;
  await store.tokens.revokeUserTokens(id, { forGood: true });
  return true;
}
