import fastifyCookie from '@fastify/cookie';
import fastifyFormbody from '@fastify/formbody';
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TokengateContext } from '../../context.js';
import { noteFailure, TokengateError } from '../../errors.js';
import { isMetadataClient } from '../../client-metadata/client-id.js';
import type { IssuerConfig } from '../../config/schema.js';
import type { ApplicationRecord, AuthorizationCodeRecord, OpenIdSignIn } from '../../store/store.js';
import { registerEndSession } from '../../logout/end-session.js';
import { tokenDigest } from '../../token/token-value.js';
import { consentRequired, promptAsksForConsent, type ConsentAnswer } from '../consent.js';
import { isOpenIdGrant } from '../id-token.js';
import { audienceOf } from '../issue-tokens.js';
import { issuerIdentifier } from '../metadata-endpoint.js';
import { ACCOUNT_PATH, registerAccountPages } from './account.js';
import { AuthorizationRedirectError, afterSignIn, authorizationPath, redirectUriWith, type AuthorizationRequest } from './request.js';
import type { PendingAuthorization, Session } from './session.js';
import { field, pageFailure, pageSteps, type PageSteps } from './steps.js';
import {
  consentPage,
  contentSecurityPolicy,
  errorPage,
  loginPage,
  type DocumentClient,
  type EarlierApproval,
  type LoginProblem,
  type Page,
  type SignInFor,
} from './views.js';

/**
 * GET /oauth/authorize and the forms it shows:
 *   GET  /oauth/authorize                  check the request -> sign-in page, or consent page when signed in
 *   POST /oauth/authorize/login            check the form -> throttle -> check credentials -> new session -> back to GET
 *   POST /oauth/authorize/decision         check the form -> check the request again -> code or access_denied to the application
 *   POST /oauth/authorize/switch-account   check the form -> end the session -> back to GET (sign-in page)
 * and the account page (./account.ts) and RP-Initiated Logout (../../logout/end-session.ts),
 * which share their sign-in, session and headers.
 * Signed in, GET /oauth/authorize asks `consentRequired` (../consent.ts) whether the user's
 * grant spares them the consent page; if so the code goes back at once.
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
    const steps = pageSteps(context);
    const endpoint = createAuthorizationEndpoint(context, steps);
    scope.addHook('onSend', pageHeaders);
    scope.setErrorHandler(endpoint.fail);
    scope.get('/oauth/authorize', endpoint.show);
    scope.post('/oauth/authorize/login', { bodyLimit: FORM_BODY_LIMIT }, endpoint.signIn);
    scope.post('/oauth/authorize/decision', { bodyLimit: FORM_BODY_LIMIT }, endpoint.decide);
    scope.post('/oauth/authorize/switch-account', { bodyLimit: FORM_BODY_LIMIT }, endpoint.switchAccount);
    registerAccountPages(scope, context, steps, FORM_BODY_LIMIT);
    registerEndSession(scope, context, steps, FORM_BODY_LIMIT);
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

function createAuthorizationEndpoint(context: TokengateContext, steps: PageSteps) {
  const { metrics } = context;
  const issuer = context.config.issuer;
  // RFC 9207 `iss` on every answer to the application, codes and errors alike.
  const iss = issuerIdentifier(issuer.issuerUrl);
  const { sessions, sendPage, validate, signInPage, verifiedSignInForm, verifiedForm, checkCredentials } = steps;

  /** A code for the request under the user's grant, sent back to the application. */
  async function sendCode(reply: FastifyReply, authorization: AuthorizationRequest, session: Session, grantId: string, status: 302 | 303) {
    const code = await issueCode(context, authorization, session, grantId);
    metrics.authorizationResponses.inc({ result: 'code' });
    return reply.redirect(redirectUriWith(authorization.redirectUri, { code, state: authorization.state, iss }), status);
  }

  return {
    async show(request: FastifyRequest, reply: FastifyReply) {
      const authorization = await validate(request.query);
      const { prompts } = authorization;
      const session = await sessions.load(request);
      const signIn = await signInNeeded(context, authorization, session);
      if (signIn !== null) {
        // prompt=none: no page may be shown (OpenID Connect Core 1.0 section 3.1.2.6).
        if (prompts.has('none')) throw sendBack(authorization, 'LOGIN_REQUIRED', signIn);
        const email = authorization.parameters.login_hint;
        return sendPage(reply, await signInPage(request, reply, { authorization: authorization.parameters }, signInFor(authorization), email));
      }
      const answer = await askConsent(context, authorization, session!.data.userId);
      // select_account: the consent page names the account signed in and offers another, even when the approval is remembered.
      if (!answer.required && !prompts.has('select_account')) {
        request.log.info({ clientId: authorization.application.clientId }, 'consent remembered: code issued without the consent page');
        return sendCode(reply, authorization, session!, answer.grant.id, 302);
      }
      if (prompts.has('none')) throw sendBack(authorization, answer.required ? answer.promptNone : 'INTERACTION_REQUIRED', 'the consent page would be shown');
      // The request waits in the session (a few, each capped in size) for the consent form.
      const pending = await sessions.addPending(session!, authorization.parameters);
      // A remembered approval shown again for select_account reads as a page the application asked for.
      const asked = answer.required
        ? answer
        : {
            ...answer,
            required: true as const,
            reason: 'prompt_consent' as const,
            promptNone: 'INTERACTION_REQUIRED' as const,
            newScopes: [],
            newResources: [],
          };
      return sendPage(reply, consent(issuer, authorization, session!, pending, asked));
    },

    async signIn(request: FastifyRequest, reply: FastifyReply) {
      const { target, body, form } = await verifiedSignInForm(request);
      const authorization = 'authorization' in target ? await validate(target.authorization) : null;
      const email = (field(body, 'email') ?? '').trim();
      const password = field(body, 'password') ?? '';
      // The same form again (its target keeps the time it expires at).
      const application = authorization === null ? null : signInFor(authorization);
      const retry = (problem: LoginProblem) => sendPage(reply, loginPage({ application, form, email, problem }));

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
      if (previous !== null) await sessions.signOut(reply, previous);
      await sessions.start(request, reply, { userId, email });
      return reply.redirect(authorization === null ? ACCOUNT_PATH : authorizationPath(afterSignIn(authorization.parameters)), 303);
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
      // The approval is remembered: the grant gains what this request asked for.
      const { scopes, audience: resources } = authorization;
      const grant = await context.store.grants.approve(session.data.userId, authorization.application.clientId, { scopes, resources }, Date.now());
      return sendCode(reply, authorization, session, grant.id, 303);
    },

    async switchAccount(request: FastifyRequest, reply: FastifyReply) {
      const { session, pending } = await verifiedForm(request, false);
      await sessions.signOut(reply, session);
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

/**
 * Whether the user must be asked (`consentRequired`, ../consent.ts), with their grant to the
 * application. A grant that covers the request is marked used before the code goes out; one that
 * ended meanwhile (a disconnection on another tab) asks again.
 */
async function askConsent(context: TokengateContext, authorization: AuthorizationRequest, userId: string): Promise<ConsentAnswer> {
  const { application, redirectUri, scopes, audience } = authorization;
  const question = { application, redirectUri, scopes, audience, promptConsent: promptAsksForConsent(authorization.parameters.prompt) };
  const answer = consentRequired({ ...question, grant: await context.store.grants.get(userId, application.clientId) });
  if (answer.required || (await context.store.grants.touch(userId, application.clientId, answer.grant.id, Date.now()))) return answer;
  return consentRequired({ ...question, grant: null });
}

/** The consent page of a signed-in user for a valid request: what is new when they approved before, and why they are asked again. */
function consent(
  issuer: Readonly<IssuerConfig>,
  authorization: AuthorizationRequest,
  session: Session,
  pending: PendingAuthorization,
  answer: ConsentAnswer & { required: true },
): Page {
  const inWords = (scopes: readonly string[]) => scopes.map((scope) => issuer.scopeDescriptions[scope] ?? scope);
  const more = answer.reason === 'more_requested';
  const earlier: EarlierApproval | undefined =
    answer.grant === null || answer.reason === 'no_grant'
      ? undefined
      : {
          approvedAt: answer.grant.approvedAt,
          scopes: inWords(answer.grant.scopes),
          why: more ? 'more' : answer.reason === 'prompt_consent' ? 'asked' : 'every-time',
        };
  const namedResources = authorization.parameters.resource === undefined ? [] : authorization.audience;
  return consentPage({
    applicationName: authorization.application.name,
    ...documentClientOf(authorization.application),
    serviceName: issuer.serviceName,
    email: session.data.email,
    scopes: inWords(more ? answer.newScopes : authorization.scopes),
    resources: more ? answer.newResources : namedResources,
    redirectUri: authorization.redirectUri,
    form: { csrfToken: session.data.csrfToken, requestId: pending.id },
    ...(earlier === undefined ? {} : { earlier }),
  });
}

/** The application a sign-in page continues to, and where its answer goes. */
function signInFor(authorization: AuthorizationRequest): SignInFor {
  return { name: authorization.application.name, redirectUri: authorization.redirectUri };
}

/** A metadata document client's identity for its consent page; nothing for a registered application. */
function documentClientOf(application: ApplicationRecord): { documentClient?: DocumentClient } {
  if (!isMetadataClient(application)) return {};
  return { documentClient: { url: application.clientId, host: application.metadataDocument.host, clientName: application.metadataDocument.clientName } };
}

/** An error for the application on its redirect URI; `detail` for the log alone. */
function sendBack(
  authorization: AuthorizationRequest,
  code: 'LOGIN_REQUIRED' | 'CONSENT_REQUIRED' | 'INTERACTION_REQUIRED' | 'INVALID_REQUEST',
  detail: string,
  description?: string,
) {
  return new AuthorizationRedirectError(
    new TokengateError(code, { detail, ...(description === undefined ? {} : { description }) }),
    authorization.redirectUri,
    authorization.state,
  );
}

/**
 * Why the user must sign in (again) before this request is answered, or null when the session
 * serves: no session; `prompt=login` or `select_account`'s sign-in (none here: the consent page
 * offers another account); a sign-in older than `max_age`; an `id_token_hint` naming another user.
 * A hint that is not an ID token this issuer signed is refused (invalid_request).
 */
async function signInNeeded(context: TokengateContext, authorization: AuthorizationRequest, session: Session | null): Promise<string | null> {
  const { prompts, maxAge, parameters } = authorization;
  const hint = parameters.id_token_hint === undefined || context.openid === null ? null : await context.openid.verifyIdTokenHint(parameters.id_token_hint);
  if (parameters.id_token_hint !== undefined && context.openid !== null && hint === null)
    throw sendBack(authorization, 'INVALID_REQUEST', 'id_token_hint does not verify', 'The id_token_hint is not an ID token this service issued.');
  if (session === null) return 'no session';
  if (prompts.has('login')) return 'prompt=login';
  if (maxAge !== null && Date.now() - session.data.createdAt > maxAge * 1000) return 'the sign-in is older than max_age';
  if (hint !== null && hint.sub !== session.data.userId) return 'id_token_hint names another user';
  return null;
}

/** What the code's ID token says of the sign-in: when, which session, the request's nonce, and the e-mail a user service's user signed in with. */
function openIdSignIn(context: TokengateContext, authorization: AuthorizationRequest, session: Session): OpenIdSignIn {
  const { nonce } = authorization.parameters;
  return {
    authTime: Math.floor(session.data.createdAt / 1000),
    sid: context.openid!.sessionId(session.key),
    ...(nonce === undefined ? {} : { nonce }),
    ...(context.config.issuer.users.source === 'store' ? {} : { email: session.data.email }),
  };
}

/** A code for an approved request, saved by its digest, under the user's grant `grantId`. */
async function issueCode(context: TokengateContext, authorization: AuthorizationRequest, session: Session, grantId: string): Promise<string> {
  const issuer = context.config.issuer;
  const userId = session.data.userId;
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
    grantId,
    ...(isOpenIdGrant(context, authorization.scopes) ? { openid: openIdSignIn(context, authorization, session) } : {}),
  };
  await context.store.codes.save(tokenDigest(code), record);
  return code;
}
