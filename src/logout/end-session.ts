import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../context.js';
import { ACCOUNT_PATH } from '../issuer/authorize/account.js';
import { PARAMETER_LIMITS, redirectUriWith } from '../issuer/authorize/request.js';
import { field, formBody, type PageSteps } from '../issuer/authorize/steps.js';
import type { ApplicationRecord } from '../store/store.js';
import { confirmSignOutPage, invalidLogoutPage } from './views.js';

/**
 * OpenID Connect RP-Initiated Logout 1.0, beside the sign-in pages (their session, CSRF tokens,
 * headers and CSP):
 *   GET  /oauth/logout           check the request -> signed in: "Sign out?"; not signed in: back to the application, or the signed-out page
 *   POST /oauth/logout           the same request as a form: signed in, as GET; else 303 to GET (see below)
 *   POST /oauth/logout/confirm   check the form (the session's CSRF token) -> check the request again -> end the session -> back to the application
 * Nothing a link or another site's page sends signs anyone out: only the user's answer on the
 * confirmation page does, as node-oidc-provider asks. A request that cannot be followed (an
 * id_token_hint this service did not issue, a post_logout_redirect_uri the application did not
 * register) is a page, never a redirect.
 */
export const END_SESSION_PATH = '/oauth/logout';

/**
 * What the issuer's metadata says of sign-out (RP-Initiated Logout 1.0 section 2.1, Back-Channel
 * Logout 1.0 section 2.1): where to send the user, and that logout tokens are sent, with `sid`.
 */
export function logoutMetadata(issuer: string) {
  return {
    end_session_endpoint: `${issuer}${END_SESSION_PATH}`,
    backchannel_logout_supported: true,
    backchannel_logout_session_supported: true,
  };
}

/** An ID token is a few kilobytes at most; nothing larger is read as one. */
const MAX_ID_TOKEN_HINT_LENGTH = 8192;
const LIMITS: Readonly<Record<LogoutParameter, number>> = {
  id_token_hint: MAX_ID_TOKEN_HINT_LENGTH,
  client_id: PARAMETER_LIMITS.client_id,
  post_logout_redirect_uri: PARAMETER_LIMITS.redirect_uri,
  state: PARAMETER_LIMITS.state,
  // Read and ignored: tokengate's pages are in one language, and the session says who is signed in.
  logout_hint: 2048,
  ui_locales: 256,
};
type LogoutParameter = 'id_token_hint' | 'client_id' | 'post_logout_redirect_uri' | 'state' | 'logout_hint' | 'ui_locales';

/** A sign-out request that can be followed: the application it names, if any, and where to send the user back. */
interface LogoutRequest {
  application: ApplicationRecord | null;
  /** Registered by `application`, compared exactly; null: the signed-out page. */
  postLogoutRedirectUri: string | null;
  state: string | null;
}

type Checked = { ok: true; request: LogoutRequest } | { ok: false; problem: string };

export function registerEndSession(scope: FastifyInstance, context: TokengateContext, steps: PageSteps, bodyLimit: number): void {
  const endpoint = createEndSession(context, steps);
  scope.get(END_SESSION_PATH, endpoint.ask);
  scope.post(END_SESSION_PATH, { bodyLimit }, endpoint.askByForm);
  scope.post(`${END_SESSION_PATH}/confirm`, { bodyLimit }, endpoint.confirm);
}

function createEndSession(context: TokengateContext, steps: PageSteps) {
  const { sessions, sendPage, verifiedSessionForm, findClient } = steps;
  const serviceName = context.config.issuer.serviceName;

  /** Back to the application with `state`, or the signed-out page. */
  function leave(reply: FastifyReply, request: LogoutRequest, status: 302 | 303) {
    if (request.postLogoutRedirectUri === null) return reply.redirect(`${ACCOUNT_PATH}/signed-out`, status);
    return reply.redirect(redirectUriWith(request.postLogoutRedirectUri, { state: request.state ?? undefined }), status);
  }

  /** The application `clientId` names and the post-logout redirect URI it registered, or what is wrong. */
  async function checkTarget(clientId: string | null, postLogoutRedirectUri: string | null, state: string | null): Promise<Checked> {
    let application: ApplicationRecord | null = null;
    if (clientId !== null) {
      application = await findClient(clientId).catch(() => null);
      if (application === null) return { ok: false, problem: 'The application that sent you here is not known to this service.' };
    }
    if (postLogoutRedirectUri !== null) {
      if (application === null)
        return { ok: false, problem: 'The request names a page to return to, but not the application it belongs to (client_id or id_token_hint).' };
      // Exactly as registered, like redirect_uri: no prefix, no normalization (an open redirect otherwise).
      if (!(application.postLogoutRedirectUris ?? []).includes(postLogoutRedirectUri))
        return { ok: false, problem: `${application.name} did not register the page it asks to send you back to (post_logout_redirect_uri).` };
    }
    return { ok: true, request: { application, postLogoutRedirectUri, state } };
  }

  /** The request's parameters checked: the id_token_hint (ours, any age), the client it names, the redirect. */
  async function check(source: unknown): Promise<Checked> {
    const read = readParameters(source);
    if ('problem' in read) return { ok: false, problem: read.problem };
    const parameters = read.parameters;
    let clientId = parameters.client_id ?? null;
    if (parameters.id_token_hint !== undefined) {
      const openid = context.openid;
      const hint = openid === null ? null : await openid.verifyIdTokenHint(parameters.id_token_hint);
      if (hint === null) return { ok: false, problem: 'The request carries an ID token this service did not issue, or one that was altered (id_token_hint).' };
      if (clientId !== null && !hint.aud.includes(clientId))
        return { ok: false, problem: 'The ID token of the request was issued to another application than the one named (id_token_hint, client_id).' };
      // An ID token of ours has its client as its one audience.
      if (clientId === null && hint.aud.length === 1) clientId = hint.aud[0]!;
    }
    return checkTarget(clientId, parameters.post_logout_redirect_uri ?? null, parameters.state ?? null);
  }

  async function answer(request: FastifyRequest, reply: FastifyReply, source: unknown, fromForm: boolean) {
    const checked = await check(source);
    if (!checked.ok) {
      request.log.info({ problem: checked.problem }, 'sign-out request refused');
      return sendPage(reply, invalidLogoutPage(checked.problem));
    }
    const session = await sessions.load(request);
    if (session === null) {
      // A form posted from the application's site comes without the session cookie
      // (SameSite=Lax): the same request as a GET, a top-level navigation, brings it.
      if (fromForm) return reply.redirect(`${END_SESSION_PATH}?${new URLSearchParams(singleValues(source)).toString()}`, 303);
      // Nobody to sign out: the application's page, registered, so no open redirect.
      return leave(reply, checked.request, 302);
    }
    const { application, postLogoutRedirectUri, state } = checked.request;
    const form = { csrfToken: session.data.csrfToken, clientId: application?.clientId ?? null, postLogoutRedirectUri, state };
    return sendPage(reply, confirmSignOutPage({ serviceName, email: session.data.email, applicationName: application?.name ?? null, form }));
  }

  return {
    ask: (request: FastifyRequest, reply: FastifyReply) => answer(request, reply, request.query, false),
    askByForm: (request: FastifyRequest, reply: FastifyReply) => answer(request, reply, formBody(request), true),

    async confirm(request: FastifyRequest, reply: FastifyReply) {
      const { session, body } = await verifiedSessionForm(request);
      // Checked again, not trusted from the page: the application may have changed its registration since.
      const checked = await checkTarget(field(body, 'client_id') ?? null, field(body, 'post_logout_redirect_uri') ?? null, field(body, 'state') ?? null);
      if (!checked.ok) return sendPage(reply, invalidLogoutPage(checked.problem));
      const clientId = checked.request.application?.clientId ?? null;
      if (field(body, 'decision') !== 'sign-out') {
        request.log.info({ clientId }, 'sign-out asked by an application, declined');
        return checked.request.postLogoutRedirectUri === null ? reply.redirect(ACCOUNT_PATH, 303) : leave(reply, checked.request, 303);
      }
      await sessions.signOut(reply, session);
      request.log.info({ clientId }, 'signed out at the request of an application');
      return leave(reply, checked.request, 303);
    },
  };
}

/** Each parameter once (a repeated one is refused, OpenID Connect Core 3.1.2.1), within its length. */
function readParameters(source: unknown): { parameters: Partial<Record<LogoutParameter, string>> } | { problem: string } {
  const values = (typeof source === 'object' && source !== null ? source : {}) as Record<string, unknown>;
  const parameters: Partial<Record<LogoutParameter, string>> = {};
  for (const name of Object.keys(LIMITS) as LogoutParameter[]) {
    const value = values[name];
    if (value === undefined || value === '') continue;
    if (typeof value !== 'string') return { problem: `The request repeats ${name}.` };
    if (value.length > LIMITS[name]) return { problem: `The request's ${name} is too long.` };
    parameters[name] = value;
  }
  return { parameters };
}

/** The form's single-valued fields, to ask again by GET (readParameters refused the others). */
function singleValues(source: unknown): Record<string, string> {
  const values = (typeof source === 'object' && source !== null ? source : {}) as Record<string, unknown>;
  return Object.fromEntries(Object.entries(values).filter((entry): entry is [string, string] => entry[0] in LIMITS && typeof entry[1] === 'string'));
}
