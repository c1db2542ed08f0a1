import fastifyCookie from '@fastify/cookie';
import fastifyFormbody from '@fastify/formbody';
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../../context.js';
import { ERRORS, noteFailure, TokengateError, toTokengateError } from '../../errors.js';
import { isMetadataClient } from '../../client-metadata/client-id.js';
import type { IssuerConfig } from '../../config/schema.js';
import type { ApplicationRecord, AuthorizationCodeRecord } from '../../store/store.js';
import { tokenDigest } from '../../token/token-value.js';
import { resourceRegistry } from '../../resource/registry.js';
import { audienceOf } from '../issue-tokens.js';
import { clientFinder } from '../clients.js';
import { issuerIdentifier } from '../metadata-endpoint.js';
import { createUserSource } from '../users.js';
import { LoginThrottle } from './login-throttle.js';
import { AuthorizationRedirectError, authorizationPath, redirectUriWith, validateAuthorizationRequest, type AuthorizationRequest } from './request.js';
import { Sessions, csrfTokenMatches, type PendingAuthorization, type Session } from './session.js';
import { SignInForms } from './sign-in-form.js';
import {
  consentPage,
  contentSecurityPolicy,
  errorPage,
  loginPage,
  renderDocument,
  type DocumentClient,
  type LoginProblem,
  type Page,
  type Site,
} from './views.js';

/**
 * GET /oauth/authorize and the forms it shows:
 *   GET  /oauth/authorize                  check the request -> sign-in page, or consent page when signed in
 *   POST /oauth/authorize/login            check the form -> throttle -> check credentials -> new session -> back to GET
 *   POST /oauth/authorize/decision         check the form -> check the request again -> code or access_denied to the application
 *   POST /oauth/authorize/switch-account   check the form -> end the session -> back to GET (sign-in page)
 * The sign-in form carries its request MAC'd and a CSRF token bound to the browser's cookie
 * (nothing is stored before sign-in); the consent page's forms are checked against the signed-in
 * session: its CSRF token, a pending request of it.
 */

/** Sign-in and consent forms are a few hundred bytes; nothing larger is read. */
const FORM_BODY_LIMIT = 16_384;

export async function registerAuthorization(app: FastifyInstance, context: TokengateContext): Promise<void> {
  await app.register(async (scope) => {
    await scope.register(fastifyCookie);
    // The forms post application/x-www-form-urlencoded and nothing else: every other body is
    // 415, JSON and text/plain included (a cross-site page can send text/plain without a
    // preflight, and no browser form sends JSON: neither is ever a person at these pages).
    scope.removeAllContentTypeParsers();
    await scope.register(fastifyFormbody);
    const endpoint = createAuthorizationEndpoint(context);
    scope.addHook('onSend', pageHeaders);
    scope.setErrorHandler(endpoint.fail);
    scope.get('/oauth/authorize', endpoint.show);
    scope.post('/oauth/authorize/login', { bodyLimit: FORM_BODY_LIMIT }, endpoint.signIn);
    scope.post('/oauth/authorize/decision', { bodyLimit: FORM_BODY_LIMIT }, endpoint.decide);
    scope.post('/oauth/authorize/switch-account', { bodyLimit: FORM_BODY_LIMIT }, endpoint.switchAccount);
  });
}

/** Headers of every answer of these pages, redirects included. */
async function pageHeaders(_request: FastifyRequest, reply: FastifyReply, payload: unknown) {
  reply.header('x-frame-options', 'DENY');
  // Pages carry CSRF tokens, redirects carry codes: nothing here may be cached.
  reply.header('cache-control', 'no-store');
  reply.header('pragma', 'no-cache');
  // The consent page's URL and the code-carrying redirect must not leak to other sites.
  reply.header('referrer-policy', 'no-referrer');
  reply.header('x-content-type-options', 'nosniff');
  if (!reply.hasHeader('content-security-policy')) reply.header('content-security-policy', contentSecurityPolicy());
  return payload;
}

/** What the endpoint's answers share: its pages, the request's validation, the forms' checks, the sign-in. */
function authorizationSteps(context: TokengateContext) {
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
   * that browser's cookie) and for a request this deployment sealed into it, not yet expired.
   */
  async function verifiedSignInForm(request: FastifyRequest) {
    const body = formBody(request);
    const cookieValue = sessions.cookieValue(request);
    if (cookieValue === undefined) throw new TokengateError('FORM_EXPIRED', { detail: 'no session cookie' });
    if (!(await signInForms.csrfTokenMatches(cookieValue, field(body, 'csrf_token'))))
      throw new TokengateError('FORM_EXPIRED', { detail: 'csrf token missing or wrong' });
    const requestId = field(body, 'request_id');
    const parameters = await signInForms.open(requestId);
    if (parameters === null) throw new TokengateError('AUTHORIZATION_REQUEST_EXPIRED', { detail: 'sign-in form request not sealed here, or expired' });
    return { parameters, body, form: { csrfToken: field(body, 'csrf_token')!, requestId: requestId! } };
  }

  /** The sign-in page for a browser without a session: its form carries the request, nothing is stored. */
  async function signInPage(request: FastifyRequest, reply: FastifyReply, authorization: AuthorizationRequest) {
    const cookieValue = sessions.browserValue(request, reply);
    const form = { csrfToken: await signInForms.csrfToken(cookieValue), requestId: await signInForms.seal(authorization.parameters) };
    return loginPage({ applicationName: authorization.application.name, form });
  }

  /**
   * A consent page's form is answered only with the session's own CSRF token and for a request
   * that this session is waiting on. `take` removes the request, so one approval mints one code.
   */
  async function verifiedForm(request: FastifyRequest, take: boolean) {
    const body = formBody(request);
    const session = await sessions.load(request);
    if (session === null) throw new TokengateError('FORM_EXPIRED', { detail: 'no live session' });
    if (!csrfTokenMatches(session, field(body, 'csrf_token'))) throw new TokengateError('FORM_EXPIRED', { detail: 'csrf token missing or wrong' });
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

  return {
    sessions,
    sendPage,
    validate,
    consent: (authorization: AuthorizationRequest, session: Session, pending: PendingAuthorization) => consent(issuer, authorization, session, pending),
    signInPage,
    verifiedSignInForm,
    verifiedForm,
    checkCredentials,
  };
}

function createAuthorizationEndpoint(context: TokengateContext) {
  const { metrics } = context;
  // RFC 9207 `iss` on every answer to the application, codes and errors alike.
  const iss = issuerIdentifier(context.config.issuer.issuerUrl);
  const { sessions, sendPage, validate, consent, signInPage, verifiedSignInForm, verifiedForm, checkCredentials } = authorizationSteps(context);
  return {
    async show(request: FastifyRequest, reply: FastifyReply) {
      const authorization = await validate(request.query);
      const session = await sessions.load(request);
      if (session === null) return sendPage(reply, await signInPage(request, reply, authorization));
      // Signed in: the request waits in the session (a few, each capped in size) for the consent form.
      const pending = await sessions.addPending(session, authorization.parameters);
      return sendPage(reply, consent(authorization, session, pending));
    },

    async signIn(request: FastifyRequest, reply: FastifyReply) {
      const { parameters, body, form } = await verifiedSignInForm(request);
      const authorization = await validate(parameters);
      const email = (field(body, 'email') ?? '').trim();
      const password = field(body, 'password') ?? '';
      // The same form again (its request keeps the time it expires at).
      const retry = (problem: LoginProblem) => sendPage(reply, loginPage({ applicationName: authorization.application.name, form, email, problem }));

      if (email === '' || password === '') {
        return retry({
          kind: 'fields',
          email: email === '' ? 'Enter your e-mail address.' : undefined,
          password: password === '' ? 'Enter your password.' : undefined,
        });
      }
      const userId = await checkCredentials(request, email, password);
      if (userId === null) return retry({ kind: 'credentials' });
      // A new cookie value at login: whoever knew the one before (a planted cookie) gets nothing.
      const previous = await sessions.load(request);
      if (previous !== null) await sessions.end(reply, previous);
      await sessions.start(request, reply, { userId, email });
      return reply.redirect(authorizationPath(parameters), 303);
    },

    async decide(request: FastifyRequest, reply: FastifyReply) {
      const { session, pending, body } = await verifiedForm(request, true);
      // Checked again, not trusted from the GET: the application or its redirect_uri may have gone since.
      const authorization = await validate(pending.parameters);
      if (field(body, 'decision') !== 'approve') {
        throw new AuthorizationRedirectError(
          new TokengateError('ACCESS_DENIED', { description: 'The user denied the request.' }),
          authorization.redirectUri,
          authorization.state,
        );
      }
      const code = await issueCode(context, authorization, session.data.userId);
      metrics.authorizationResponses.inc({ result: 'code' });
      return reply.redirect(redirectUriWith(authorization.redirectUri, { code, state: authorization.state, iss }), 303);
    },

    async switchAccount(request: FastifyRequest, reply: FastifyReply) {
      const { session, pending } = await verifiedForm(request, false);
      await sessions.end(reply, session);
      return reply.redirect(authorizationPath(pending.parameters), 303);
    },

    /** Errors before the redirect_uri is trusted are pages; after, they go back to the application. */
    fail(error: Error & { statusCode?: number }, request: FastifyRequest, reply: FastifyReply) {
      if (error instanceof AuthorizationRedirectError) {
        metrics.authorizationResponses.inc({ result: error.failure.error });
        request.log.info({ error: error.failure.error }, 'authorization request answered with an error');
        const location = redirectUriWith(error.redirectUri, {
          error: error.failure.error,
          error_description: error.failure.description,
          state: error.state,
          iss,
        });
        return reply.redirect(location, request.method === 'GET' ? 302 : 303);
      }
      const failure = pageFailure(error);
      noteFailure(request, failure);
      return sendPage(reply, errorPage(failure));
    },
  };
}

function formState(session: Session, pending: PendingAuthorization) {
  return { csrfToken: session.data.csrfToken, requestId: pending.id };
}

/** The consent page of a signed-in user for a valid request. */
function consent(issuer: Readonly<IssuerConfig>, authorization: AuthorizationRequest, session: Session, pending: PendingAuthorization): Page {
  return consentPage({
    applicationName: authorization.application.name,
    ...documentClientOf(authorization.application),
    serviceName: issuer.serviceName,
    email: session.data.email,
    scopes: authorization.scopes.map((scope) => issuer.scopeDescriptions[scope] ?? scope),
    resources: authorization.parameters.resource === undefined ? [] : authorization.audience,
    redirectUri: authorization.redirectUri,
    form: formState(session, pending),
  });
}

/** A metadata document client's identity for its consent page; nothing for a registered application. */
function documentClientOf(application: ApplicationRecord): { documentClient?: DocumentClient } {
  if (!isMetadataClient(application)) return {};
  return { documentClient: { url: application.clientId, host: application.metadataDocument.host, clientName: application.metadataDocument.clientName } };
}

function formBody(request: FastifyRequest): Record<string, unknown> {
  return (typeof request.body === 'object' && request.body !== null ? request.body : {}) as Record<string, unknown>;
}

/** A form field's single value; a missing or repeated field is undefined. */
function field(body: Record<string, unknown>, name: string): string | undefined {
  const value = body[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * The failure as the sign-in pages show it: the one normalizer's, worded for a person at a form
 * (a store outage reads as sign-in being unavailable; a body that is not a form, as such).
 */
function pageFailure(error: unknown): TokengateError {
  const failure = toTokengateError(error);
  if (failure.code === 'STORE_UNAVAILABLE')
    return new TokengateError('STORE_UNAVAILABLE', { description: ERRORS.USER_SOURCE_UNAVAILABLE.description, detail: failure.detail });
  if (failure.code === 'UNSUPPORTED_MEDIA_TYPE')
    return new TokengateError('UNSUPPORTED_MEDIA_TYPE', { description: 'This form must be sent as application/x-www-form-urlencoded.' });
  return failure;
}

/** A code for an approved request, saved by its digest. */
async function issueCode(context: TokengateContext, authorization: AuthorizationRequest, userId: string): Promise<string> {
  const issuer = context.config.issuer;
  const code = context.minter.mint();
  const issuedAt = Date.now();
  const record: AuthorizationCodeRecord = {
    clientId: authorization.application.clientId,
    userId,
    redirectUri: authorization.redirectUri,
    scopes: authorization.scopes,
    codeChallenge: authorization.codeChallenge,
    codeChallengeMethod: authorization.codeChallengeMethod,
    familyId: randomUUID(),
    ...audienceOf(authorization.audience),
    issuedAt,
    expiresAt: issuedAt + issuer.authorizationCodeTtl * 1000,
    ...(authorization.dpopJkt === null ? {} : { jkt: authorization.dpopJkt }),
  };
  await context.store.codes.save(tokenDigest(code), record);
  return code;
}
