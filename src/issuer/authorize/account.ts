import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../../context.js';
import { isMetadataClientId } from '../../client-metadata/client-id.js';
import { TokengateError } from '../../errors.js';
import { endGrant } from '../../store/deletions.js';
import type { GrantRecord } from '../../store/store.js';
import { announceLogout } from '../logout.js';
import { accountPage, signedOutPage, type Connection } from './account-views.js';
import { PARAMETER_LIMITS } from './request.js';
import { field, type PageSteps } from './steps.js';

/**
 * The user's account page, beside the sign-in pages (their session, sign-in, headers and CSP):
 *   GET  /oauth/account               signed in: the connected applications; else the sign-in page, which comes back here
 *   POST /oauth/account/disconnect    check the form -> end the grant and its tokens -> back to GET
 *   POST /oauth/account/sign-out      check the form -> end the session -> the signed-out page
 *   GET  /oauth/account/signed-out    the signed-out page
 * Both forms carry the session's CSRF token; a page of another site posts without the session
 * cookie (SameSite=Lax) and could not read the token: neither can disconnect or sign anyone out.
 */
export const ACCOUNT_PATH = '/oauth/account';

export function registerAccountPages(scope: FastifyInstance, context: TokengateContext, steps: PageSteps, bodyLimit: number): void {
  const pages = createAccountPages(context, steps);
  scope.get(ACCOUNT_PATH, pages.show);
  scope.post(`${ACCOUNT_PATH}/disconnect`, { bodyLimit }, pages.disconnect);
  scope.post(`${ACCOUNT_PATH}/sign-out`, { bodyLimit }, pages.signOut);
  scope.get(`${ACCOUNT_PATH}/signed-out`, pages.signedOut);
}

function createAccountPages(context: TokengateContext, steps: PageSteps) {
  const { sessions, sendPage, signInPage, verifiedSessionForm } = steps;
  const serviceName = context.config.issuer.serviceName;

  /** A grant as the page lists it; null for an application that no longer exists (its grants go with it). */
  async function connectionOf(grant: GrantRecord): Promise<Connection | null> {
    const { scopeDescriptions } = context.config.issuer;
    const common = {
      clientId: grant.clientId,
      scopes: grant.scopes.map((scope) => scopeDescriptions[scope] ?? scope),
      approvedAt: grant.approvedAt,
      lastUsedAt: grant.lastUsedAt,
    };
    // Its document is not fetched to list it: its host is what it is known by, its name a claim.
    if (isMetadataClientId(grant.clientId)) {
      const host = new URL(grant.clientId).host;
      return { ...common, name: host, hosts: [host], documentClient: true };
    }
    const application = await context.store.applications.get(grant.clientId);
    if (application === null) return null;
    return { ...common, name: application.name, hosts: [...new Set(application.redirectUris.map(hostOf))], documentClient: false };
  }

  return {
    async show(request: FastifyRequest, reply: FastifyReply) {
      const session = await sessions.load(request);
      if (session === null) return sendPage(reply, await signInPage(request, reply, { account: true }, null));
      const grants = await context.store.grants.list(session.data.userId);
      const connections = (await Promise.all(grants.map(connectionOf))).filter((connection) => connection !== null);
      // A notice is shown once.
      const notice = session.data.notice;
      if (notice !== undefined) {
        delete session.data.notice;
        await sessions.save(session);
      }
      const { email, csrfToken } = session.data;
      return sendPage(reply, accountPage({ serviceName, email, csrfToken, connections, ...(notice === undefined ? {} : { notice }) }));
    },

    async disconnect(request: FastifyRequest, reply: FastifyReply) {
      const { session, body } = await verifiedSessionForm(request);
      const clientId = field(body, 'client_id');
      if (clientId === undefined || clientId === '' || clientId.length > PARAMETER_LIMITS.client_id)
        throw new TokengateError('INVALID_REQUEST', { description: 'The form does not name an application.', detail: 'client_id missing or too long' });
      const { userId } = session.data;
      const grant = await context.store.grants.get(userId, clientId);
      const connection = grant === null ? null : await connectionOf(grant);
      const { existed, revoked } = await endGrant(context.store, userId, clientId);
      announceLogout(context, { kind: 'grant-ended', userId, clientId, sessionKey: session.key });
      request.log.info({ clientId, existed, revoked }, 'application disconnected by its user');
      session.data.notice = existed
        ? `${connection?.name ?? 'The application'} is disconnected: its access has ended.`
        : 'That application was not connected to your account.';
      await sessions.save(session);
      return reply.redirect(ACCOUNT_PATH, 303);
    },

    async signOut(request: FastifyRequest, reply: FastifyReply) {
      const { session } = await verifiedSessionForm(request);
      await sessions.signOut(reply, session);
      request.log.info('signed out');
      return reply.redirect(`${ACCOUNT_PATH}/signed-out`, 303);
    },

    async signedOut(_request: FastifyRequest, reply: FastifyReply) {
      return sendPage(reply, signedOutPage(serviceName));
    },
  };
}

/** Where a redirect URI sends the user, as a person reads it: its host, or its scheme (a native app's). */
function hostOf(redirectUri: string): string {
  const url = URL.parse(redirectUri);
  if (url === null) return redirectUri;
  return url.host !== '' ? url.host : url.protocol.replace(/:$/, '');
}
