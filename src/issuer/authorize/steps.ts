import type { FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../../context.js';
import { ERRORS, TokengateError, toTokengateError } from '../../errors.js';
import { resourceRegistry } from '../../resource/registry.js';
import { clientFinder } from '../clients.js';
import { createUserSource } from '../users.js';
import { LoginThrottle } from './login-throttle.js';
import { validateAuthorizationRequest } from './request.js';
import { Sessions, csrfTokenMatches, type Session } from './session.js';
import { SignInForms, type SignInTarget } from './sign-in-form.js';
import { contentSecurityPolicy, loginPage, renderDocument, type Page, type SignInFor, type Site } from './views.js';

/**
 * What the browser-facing pages share (the authorization endpoint's and the account page's):
 * sending a page, the request's validation, the forms' checks, the sign-in.
 */
export type PageSteps = ReturnType<typeof pageSteps>;

export function pageSteps(context: TokengateContext) {
  const { config, store, metrics } = context;
  const issuer = config.issuer;
  const sessions = new Sessions(context);
  // A sign-in form is good for as long as a session would be.
  const signInForms = new SignInForms(() => context.store.secrets, issuer.sessionTtl * 1000);
  const users = createUserSource(issuer.users, store);
  const throttle = new LoginThrottle(store.counters, issuer.loginThrottle);
  const findClient = clientFinder(context);
  const issuerUrl = new URL(issuer.issuerUrl);
  const site: Site = { serviceName: issuer.serviceName, issuerHost: issuerUrl.host, secure: issuerUrl.protocol === 'https:' };

  const sendPage = (reply: FastifyReply, page: Page) =>
    reply
      .code(page.status)
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', contentSecurityPolicy(page.formTargets))
      .send(renderDocument(page, site));

  const validate = (parameters: unknown) => validateAuthorizationRequest(parameters, findClient, issuer, resourceRegistry(context.config));

  /**
   * A sign-in form is answered only from the browser it was shown to (its CSRF token is bound to
   * that browser's cookie) and for a target this deployment sealed into it, not yet expired.
   */
  async function verifiedSignInForm(request: FastifyRequest) {
    const body = formBody(request);
    const cookieValue = sessions.cookieValue(request);
    if (cookieValue === undefined) throw new TokengateError('FORM_EXPIRED', { detail: 'no session cookie' });
    if (!(await signInForms.csrfTokenMatches(cookieValue, field(body, 'csrf_token'))))
      throw new TokengateError('FORM_EXPIRED', { detail: 'csrf token missing or wrong' });
    const requestId = field(body, 'request_id');
    const target = await signInForms.open(requestId);
    if (target === null) throw new TokengateError('AUTHORIZATION_REQUEST_EXPIRED', { detail: 'sign-in form request not sealed here, or expired' });
    return { target, body, form: { csrfToken: field(body, 'csrf_token')!, requestId: requestId! } };
  }

  /**
   * The sign-in page for a browser without a session: its form carries where it leads (the
   * authorization request, or the account page), nothing is stored. `application` null: the account page's. `email`: pre-filled.
   */
  async function signInPage(request: FastifyRequest, reply: FastifyReply, target: SignInTarget, application: SignInFor | null, email?: string) {
    const cookieValue = sessions.browserValue(request, reply);
    const form = { csrfToken: await signInForms.csrfToken(cookieValue), requestId: await signInForms.seal(target) };
    // `login_hint` (OpenID Connect) fills in the e-mail address; the user may change it.
    return loginPage({ application, form, ...(email === undefined ? {} : { email }) });
  }

  /**
   * A form of a signed-in page is answered only with the session's own CSRF token: a page of
   * another site posts without the session cookie (SameSite=Lax) and cannot read the token.
   */
  async function verifiedSessionForm(request: FastifyRequest): Promise<{ session: Session; body: Record<string, unknown> }> {
    const body = formBody(request);
    const session = await sessions.load(request);
    if (session === null) throw new TokengateError('FORM_EXPIRED', { detail: 'no live session' });
    if (!csrfTokenMatches(session, field(body, 'csrf_token'))) throw new TokengateError('FORM_EXPIRED', { detail: 'csrf token missing or wrong' });
    return { session, body };
  }

  /**
   * A consent page's form is answered only as verifiedSessionForm says and for a request that
   * this session is waiting on. `take` removes the request, so one approval mints one code.
   */
  async function verifiedForm(request: FastifyRequest, take: boolean) {
    const { session, body } = await verifiedSessionForm(request);
    const requestId = field(body, 'request_id');
    const pending = take ? await sessions.takePending(session, requestId) : sessions.findPending(session, requestId);
    if (pending === null) throw new TokengateError('AUTHORIZATION_REQUEST_EXPIRED', { detail: 'no such pending request in the session' });
    return { session, pending, body };
  }

  /** The user the e-mail and password name, or null (a failure, counted by the throttle); throws when throttled. */
  async function checkCredentials(request: FastifyRequest, email: string, password: string): Promise<string | null> {
    const attempt = await throttle.begin(email, request.ip);
    if (attempt === null) {
      metrics.logins.inc({ outcome: 'throttled' });
      throw new TokengateError('TOO_MANY_REQUESTS', {
        description: 'Too many sign-in attempts. Wait a few minutes, then try again.',
        detail: 'login throttled',
      });
    }
    let userId: string | null;
    // The user source (the store, or the operator's user service over HTTP) as a span: its time, never the credentials.
    const verifying = request.trace?.child('tokengate.users.verify') ?? null;
    verifying?.set('tokengate.users.source', issuer.users.source);
    try {
      userId = await users.verify(email, password);
      verifying?.end(userId === null ? 'credentials_rejected' : undefined);
    } catch (error) {
      verifying?.end('unavailable');
      metrics.logins.inc({ outcome: 'unavailable' });
      await attempt.undecided().catch(() => {});
      throw error;
    }
    if (userId === null) {
      metrics.logins.inc({ outcome: 'failure' });
      request.log.info({ outcome: 'failure' }, 'login');
      return null;
    }
    metrics.logins.inc({ outcome: 'success' });
    await attempt.succeeded();
    return userId;
  }

  return { sessions, sendPage, validate, findClient, signInPage, verifiedSignInForm, verifiedSessionForm, verifiedForm, checkCredentials };
}

export function formBody(request: FastifyRequest): Record<string, unknown> {
  return (typeof request.body === 'object' && request.body !== null ? request.body : {}) as Record<string, unknown>;
}

/** A form field's single value; a missing or repeated field is undefined. */
export function field(body: Record<string, unknown>, name: string): string | undefined {
  const value = body[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * The failure as the sign-in pages show it: the one normalizer's, worded for a person at a form
 * (a store outage reads as sign-in being unavailable; a body that is not a form, as such).
 */
export function pageFailure(error: unknown): TokengateError {
  const failure = toTokengateError(error);
  if (failure.code === 'STORE_UNAVAILABLE')
    return new TokengateError('STORE_UNAVAILABLE', { description: ERRORS.USER_SOURCE_UNAVAILABLE.description, detail: failure.detail });
  if (failure.code === 'UNSUPPORTED_MEDIA_TYPE')
    return new TokengateError('UNSUPPORTED_MEDIA_TYPE', { description: 'This form must be sent as application/x-www-form-urlencoded.' });
  return failure;
}
