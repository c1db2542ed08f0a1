import type { Readable } from 'node:stream';
import type { TokengateContext } from '../context.js';
import { TOO_LARGE } from '../identity/index.js';
import { checkResourceProof, needsProofStep, type ProofSubject } from '../dpop/resource-proof.js';
import { normalizePath, PathRefusal } from '../http/path.js';
import { isAudience } from '../resource/audience.js';
import { Bucket } from '../ratelimit/bucket.js';
import type { RateRefusal, RouteRateLimit } from '../ratelimit/limiter.js';
import type { VerifiedToken } from '../store/verified-token.js';
import type { RequestTrace } from '../tracing/index.js';
import { authorizeRoute, isMethodAllowed } from './authorize-route.js';
import type { Denial } from './denials.js';
import { extractCredential, type Credential, type CredentialSource, type ExtractionFailure } from './extract-credential.js';
import type { GatewayRoute, RouteTable } from './route-table.js';
import { verifyToken, type VerificationFailure } from './verify-token.js';

/**
 * The check every request gets, wherever it comes from: the gateway forwards what passes, the
 * decision listener answers an ingress with it, and both run these same steps, so they can
 * never disagree. Each step gives its result or a denial compiled at start.
 *
 *   where (normalize the path, match a route, check the method) -> extract the one credential
 *   -> verify the token -> prove (DPoP, for DPoP requests, bound tokens and DPoP routes only)
 *   -> authorize the route's resource, token kind and scopes -> meter (rate limits)
 *   -> sign (the identity assertion, on routes that ask for one)
 *
 * Only five steps may have to wait: reading a body that can carry the token, reading the
 * store on a cache miss, checking a DPoP proof (its signature, and its replay mark in the
 * shared store), a rate limit lease when the sidecar holds no permit, and signing an identity
 * assertion when none is held for the token, audience and key. A step that waits
 * hands its result on with .then; one that does not calls the next directly, so a cached token
 * in a header is checked without a single promise.
 */

export interface Located<Target> {
  readonly route: GatewayRoute<Target>;
  /** The normalized path: what the route was matched on and what the upstream receives. */
  readonly path: string;
  /** The raw query string, without `?`. */
  readonly query: string;
}

export interface Checked {
  readonly credential: Credential;
  readonly token: VerifiedToken;
  /** The rate limit bucket that admitted the request (its RateLimit fields go on the answer); null on a route without a policy. */
  readonly admission: Bucket | null;
  /** The signed identity (a compact JWT) for the upstream; null on a route without `signedIdentity`. */
  readonly assertion: string | null;
}

export function isDenial(outcome: object): outcome is Denial {
  return 'reason' in outcome;
}

/** 0. where: the route of a request target (origin-form path and query), or why there is none. */
export function locate<Target>(table: RouteTable<Target>, method: string, target: string, headerFields: number, maxHeaders: number): Located<Target> | Denial {
  if (headerFields > maxHeaders) return table.unrouted.tooManyHeaders;
  const queryStart = target.indexOf('?');
  const path = normalizePath(queryStart === -1 ? target : target.slice(0, queryStart));
  if (path instanceof PathRefusal) return table.unrouted.invalidPath.get(path)!;
  const route = table.match(path);
  if (route === null) return table.unrouted.notFound;
  if (route instanceof PathRefusal) return table.unrouted.invalidPath.get(route)!;
  if (!isMethodAllowed(route, method)) return route.denials.method_not_allowed;
  return { route, path, query: queryStart === -1 ? '' : target.slice(queryStart + 1) };
}

/**
 * 1-6. extract -> verify -> prove -> authorize -> meter -> sign. `body`: the request body where it may
 * carry the token, else null. `subject`: the request as the client made it (method, scheme, host,
 * target), read only by the DPoP step.
 */
export function check<Target>(
  context: TokengateContext,
  located: Located<Target>,
  request: CredentialSource,
  body: Readable | null,
  bodyLimit: number,
  subject: ProofSubject,
  trace: RequestTrace | null = null,
): Checked | Denial | Promise<Checked | Denial> {
  const { route } = located;
  const credential = extractCredential(route, request, located.query, body, bodyLimit);
  return credential instanceof Promise
    ? credential.then((read) => verify(context, route, read, subject, trace))
    : verify(context, route, credential, subject, trace);
}

// 2. verify: the cache, else the tag check and one store read.
function verify<Target>(
  context: TokengateContext,
  route: GatewayRoute<Target>,
  credential: Credential | ExtractionFailure,
  subject: ProofSubject,
  trace: RequestTrace | null,
): Checked | Denial | Promise<Checked | Denial> {
  if (typeof credential === 'string') return route.denials[credential];
  const token = verifyToken(context, credential.token, trace);
  return token instanceof Promise
    ? token.then((read) => prove(context, route, credential, read, subject, trace))
    : prove(context, route, credential, token, subject, trace);
}

// 3. prove: DPoP (RFC 9449 section 7.1), where the request, the token or the route calls for it.
function prove<Target>(
  context: TokengateContext,
  route: GatewayRoute<Target>,
  credential: Credential,
  token: VerifiedToken | VerificationFailure,
  subject: ProofSubject,
  trace: RequestTrace | null,
): Checked | Denial | Promise<Checked | Denial> {
  if (typeof token === 'string') return route.denials[token];
  if (!needsProofStep(route.requireDpop, credential, token)) return authorize(context, route, credential, token, trace);
  trace?.set('tokengate.dpop', credential.scheme === 'dpop');
  const refusal = checkResourceProof(context.dpop, route.requireDpop, credential, token, subject, trace);
  if (refusal instanceof Promise)
    return refusal.then((proven) => (proven === null ? authorize(context, route, credential, token, trace) : route.denials[proven]));
  return refusal === null ? authorize(context, route, credential, token, trace) : route.denials[refusal];
}

// 4. authorize: the route's resource (tokens for another resource are invalid here), then its token kind and scopes.
function authorize<Target>(
  context: TokengateContext,
  route: GatewayRoute<Target>,
  credential: Credential,
  token: VerifiedToken,
  trace: RequestTrace | null,
): Checked | Denial | Promise<Checked | Denial> {
  if (route.resource !== null && !isAudience(token.audience, route.resource)) return route.denials.wrong_audience;
  const refusal = authorizeRoute(route, token);
  if (refusal !== null) return route.denials[refusal];
  return route.rateLimit === null ? sign(context, route, credential, token, null) : meter(context, route, route.rateLimit, credential, token, trace);
}

// 5. meter: a permit of the route's (or the application's tier's) rate limit policy.
function meter<Target>(
  context: TokengateContext,
  route: GatewayRoute<Target>,
  limit: RouteRateLimit,
  credential: Credential,
  token: VerifiedToken,
  trace: RequestTrace | null,
): Checked | Denial | Promise<Checked | Denial> {
  const admitted = limit.limiter.admit(limit, token);
  if (admitted instanceof Promise) {
    // The sidecar held no permit: the request waits for a lease from the shared store.
    const waited = trace?.child('tokengate.ratelimit.lease') ?? null;
    return admitted.then((outcome) => {
      waited?.end();
      return metered(context, route, credential, token, outcome, trace);
    });
  }
  return metered(context, route, credential, token, admitted, trace);
}

function metered<Target>(
  context: TokengateContext,
  route: GatewayRoute<Target>,
  credential: Credential,
  token: VerifiedToken,
  outcome: Bucket | RateRefusal,
  trace: RequestTrace | null,
): Checked | Denial | Promise<Checked | Denial> {
  if (trace !== null && trace.recording) {
    trace.set('tokengate.ratelimit.policy', outcome.policy.name);
    trace.set('tokengate.ratelimit.outcome', outcome instanceof Bucket ? 'admitted' : outcome.refusal);
  }
  if (outcome instanceof Bucket) return sign(context, route, credential, token, outcome);
  // The route's compiled 429, with the fields of this refusal: when to come back, and the policy's.
  const denial = route.denials[outcome.refusal];
  return {
    ...denial,
    headers: {
      ...denial.headers,
      'retry-after': String(outcome.retryAfter),
      'ratelimit-policy': outcome.policy.policyHeader,
      ratelimit: outcome.policy.remainingHeader(0),
    },
  };
}

// 6. sign: the identity assertion held for the token, the route's audience and the signing key, or a new one (src/identity/).
function sign<Target>(
  context: TokengateContext,
  route: GatewayRoute<Target>,
  credential: Credential,
  token: VerifiedToken,
  admission: Bucket | null,
): Checked | Denial | Promise<Checked | Denial> {
  const wanted = route.signedIdentity;
  if (wanted === null || context.identity === null) return { credential, token, admission, assertion: null };
  const assertion = context.identity.signer.assertion(token, wanted.audience);
  if (assertion instanceof Promise) return assertion.then((signed) => signedCheck(route, credential, token, admission, signed));
  return signedCheck(route, credential, token, admission, assertion);
}

function signedCheck<Target>(
  route: GatewayRoute<Target>,
  credential: Credential,
  token: VerifiedToken,
  admission: Bucket | null,
  assertion: string | typeof TOO_LARGE,
): Checked | Denial {
  return assertion === TOO_LARGE ? route.denials.identity_too_large : { credential, token, admission, assertion };
}
