import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { TokengateError } from '../errors.js';
import { hashPassword } from '../issuer/passwords.js';
import { deleteUserAndTokens } from '../store/deletions.js';
import type { UserRecord } from '../store/store.js';
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
}
