import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { TokengateError } from '../errors.js';
import { hashPassword } from '../issuer/passwords.js';
import { announceLogout } from '../issuer/logout.js';
import { deleteUserAndTokens, endGrant } from '../store/deletions.js';
import type { GrantRecord, UserRecord } from '../store/store.js';
import { recordAdminChange } from './admin-auth.js';
import { readUserInput } from './validate.js';

/** A user as the admin API shows it: never the password hash. */
export interface UserView {
  id: string;
  email: string;
  created_at: string;
}

function view(user: UserRecord): UserView {
  return { id: user.id, email: user.email, created_at: new Date(user.createdAt).toISOString() };
}

/** A user's grant to an application (what the account page lists), as the admin API shows it. */
export interface GrantView {
  client_id: string;
  scopes: string[];
  resources: string[];
  approved_at: string;
  last_used_at: string;
}

function grantView(grant: GrantRecord): GrantView {
  return {
    client_id: grant.clientId,
    scopes: grant.scopes,
    resources: grant.resources,
    approved_at: new Date(grant.approvedAt).toISOString(),
    last_used_at: new Date(grant.lastUsedAt).toISOString(),
  };
}

export function registerUserRoutes(scope: FastifyInstance, context: TokengateContext): void {
  scope.post('/users', async function createUser(request, reply) {
    const input = readUserInput(request.body);
    const user: UserRecord = { id: randomUUID(), email: input.email, passwordHash: await hashPassword(input.password), createdAt: Date.now() };
    if (!(await context.store.users.create(user))) {
      throw new TokengateError('CONFLICT', { description: 'A user with this e-mail address already exists.' });
    }
    recordAdminChange(request, { action: 'user created', userId: user.id });
    return reply.code(201).send(view(user));
  });

  scope.get('/users', async function listUsers() {
    const users = await context.store.users.list();
    return { users: users.sort((a, b) => a.createdAt - b.createdAt).map(view) };
  });

  scope.delete<{ Params: { id: string } }>('/users/:id', async function deleteUser(request) {
    const { id } = request.params;
    if (!(await deleteUserAndTokens(context.store, id))) throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'No user has this id.' });
    recordAdminChange(request, { action: 'user deleted, their tokens revoked', userId: id });
    return { id, deleted: true };
  });

  // Any user id: users of the `http` source sign in without a record here, and have grants too.
  scope.get<{ Params: { id: string } }>('/users/:id/grants', async function listUserGrants(request) {
    const { id } = request.params;
    return { user_id: id, grants: (await context.store.grants.list(id)).map(grantView) };
  });

  /** What the user's Disconnect does: the grant ends, and every token of the user at the application. */
  scope.delete<{ Params: { id: string; clientId: string } }>('/users/:id/grants/:clientId', async function revokeUserGrant(request) {
    const { id, clientId } = request.params;
    if ((await context.store.grants.get(id, clientId)) === null) {
      throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'This user has no grant to this application.' });
    }
    const { revoked } = await endGrant(context.store, id, clientId);
    announceLogout(context, { kind: 'grant-ended', userId: id, clientId });
    recordAdminChange(request, { action: 'grant revoked by the operator, its tokens revoked', userId: id, clientId, revoked });
    return { user_id: id, client_id: clientId, deleted: true, revoked };
  });
}
