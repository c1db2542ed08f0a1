#!/usr/bin/env node
// @ts-check
/**
 * An example resource service of the ticketing platform, the kind tokengate guards. It never
 * sees a token: it trusts the identity headers the gateway adds (and removes from clients), so
 * it must be reachable only through tokengate (in a Kubernetes pod it listens on the loopback
 * beside its tokengate sidecar; in Compose it publishes no port). Every answer shows what it
 * received, so the trust boundary can be seen.
 *
 *   TICKETING_API=user|organizer|all (default all)  which API it serves:
 *     user:      GET /api/public/me; GET, POST /api/public/tickets (user tokens)
 *     organizer: GET, POST /api/public/events (application tokens)
 *   HOST (default 127.0.0.1), PORT (default 3000)
 *   TOKENGATE_JWKS_URL  trust only tokengate's signed identity (routes[].signedIdentity), verified
 *     against the keys published there, e.g. http://127.0.0.1:8080/.well-known/tokengate-identity-jwks.json;
 *     with TOKENGATE_ISSUER (its issuer URL), IDENTITY_AUDIENCE (the routes' audience) and
 *     JWKS_CACHE_SECONDS (no more than signedIdentity.jwksMaxAgeSeconds; default 300).
 *     This needs `jose` (npm install jose); without it the service trusts the identity headers.
 *
 * Plain node:http and no dependency (but jose, for the signed identity), so its image is node and this file.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The headers tokengate sets by default (gateway.identityHeaders, gateway.requestIdHeader). */
export const IDENTITY_HEADERS = Object.freeze({
  userId: 'x-auth-user-id',
  clientId: 'x-auth-client-id',
  scope: 'x-auth-scope',
  tokenKind: 'x-auth-token-kind',
  /** Set on a token a service got by token exchange: the service acting for the user. */
  actorClientId: 'x-auth-actor-client-id',
});
const REQUEST_ID_HEADER = 'x-request-id';
/** The header tokengate's signed identity comes in (signedIdentity.header), and its JOSE type. */
export const SIGNED_IDENTITY_HEADER = 'x-tokengate-identity';
const SIGNED_IDENTITY_TYPE = 'tokengate-identity+jwt';
const BODY_LIMIT = 16 * 1024;

/**
 * @typedef {'user' | 'organizer' | 'all'} ApiName
 * @typedef {{ userId: string | null, clientId: string, scopes: string[], tokenKind: string, actorClientId?: string }} Identity
 * @typedef {{ method: string, path: string, query: string, requestId: string | null, headers: import('node:http').IncomingHttpHeaders }} Received
 * @typedef {{ status: number, body: Record<string, unknown> }} Answer
 * @typedef {(identity: Identity, body: unknown) => Answer} Action
 * @typedef {{ api: 'user' | 'organizer', tokenKind: 'user' | 'application', methods: Record<string, Action> }} Resource
 */

/** In-memory data: an example, so it lives as long as the process. */
function createData() {
  /** @type {Map<string, Array<Record<string, unknown>>>} */
  const ticketsByUser = new Map();
  /** @type {Map<string, Array<Record<string, unknown>>>} */
  const eventsByClient = new Map();
  /**
   * @param {Map<string, Array<Record<string, unknown>>>} map
   * @param {string} key
   */
  const listOf = (map, key) => map.get(key) ?? map.set(key, []).get(key) ?? [];
  return {
    ticketsOf: (/** @type {string} */ userId) => listOf(ticketsByUser, userId),
    eventsOf: (/** @type {string} */ clientId) => listOf(eventsByClient, clientId),
  };
}

/**
 * @param {unknown} body
 * @param {string} field
 * @returns {string | null}
 */
function textField(body, field) {
  const value = typeof body === 'object' && body !== null ? /** @type {Record<string, unknown>} */ (body)[field] : undefined;
  return typeof value === 'string' && value.trim() !== '' && value.length <= 200 ? value.trim() : null;
}

/** @param {string} field */
const missing = (field) => ({ status: 400, body: { error: 'invalid_request', error_description: `Send a JSON body with a "${field}" string.` } });

/**
 * The resources, by path. A user resource needs a user token's identity, an organizer one an
 * application token's: what tokengate's routes already enforce, checked again here.
 * @returns {Map<string, Resource>}
 */
function createResources() {
  const data = createData();
  return new Map(
    /** @type {Array<[string, Resource]>} */ ([
      [
        '/api/public/me',
        {
          api: 'user',
          tokenKind: 'user',
          methods: {
            GET: (identity) => ({ status: 200, body: { user_id: identity.userId, client_id: identity.clientId, scopes: identity.scopes } }),
          },
        },
      ],
      [
        '/api/public/tickets',
        {
          api: 'user',
          tokenKind: 'user',
          methods: {
            GET: (identity) => ({ status: 200, body: { tickets: data.ticketsOf(/** @type {string} */ (identity.userId)) } }),
            POST: (identity, body) => {
              const event = textField(body, 'event');
              if (event === null) return missing('event');
              const ticket = { id: randomUUID(), event, user_id: identity.userId, bought_with: identity.clientId, created_at: new Date().toISOString() };
              data.ticketsOf(/** @type {string} */ (identity.userId)).push(ticket);
              return { status: 201, body: { ticket } };
            },
          },
        },
      ],
      [
        '/api/public/events',
        {
          api: 'organizer',
          tokenKind: 'application',
          methods: {
            GET: (identity) => ({ status: 200, body: { events: data.eventsOf(identity.clientId) } }),
            POST: (identity, body) => {
              const name = textField(body, 'name');
              if (name === null) return missing('name');
              const event = { id: randomUUID(), name, organizer: identity.clientId, created_at: new Date().toISOString() };
              data.eventsOf(identity.clientId).push(event);
              return { status: 201, body: { event } };
            },
          },
        },
      ],
    ]),
  );
}

/**
 * The identity tokengate vouches for, or null when the request did not come through it.
 * @param {import('node:http').IncomingHttpHeaders} headers
 * @returns {Identity | null}
 */
function identityOf(headers) {
  const single = (/** @type {string} */ name) => {
    const value = headers[name];
    return typeof value === 'string' && value !== '' ? value : null;
  };
  const clientId = single(IDENTITY_HEADERS.clientId);
  const tokenKind = single(IDENTITY_HEADERS.tokenKind);
  if (clientId === null || tokenKind === null) return null;
  const identity = { userId: single(IDENTITY_HEADERS.userId), clientId, scopes: (single(IDENTITY_HEADERS.scope) ?? '').split(' ').filter(Boolean), tokenKind };
  const actorClientId = single(IDENTITY_HEADERS.actorClientId);
  return actorClientId === null ? identity : { ...identity, actorClientId };
}

/**
 * The identity of tokengate's signed assertion, verified against its published keys: signature
 * by a key of the JWKS (fetched again when an unknown key id arrives, and at least every
 * `cacheSeconds`), ES256 or EdDSA only, the assertion type, issuer, audience and expiry. A request
 * without a valid one has no identity, whatever headers it carries.
 * @param {{ jwksUrl: string, issuer: string, audience: string, cacheSeconds?: number }} options
 * @returns {Promise<(headers: import('node:http').IncomingHttpHeaders) => Promise<Identity | null>>}
 */
export async function createIdentityVerifier({ jwksUrl, issuer, audience, cacheSeconds = 300 }) {
  const { createRemoteJWKSet, jwtVerify } = await import('jose');
  // The cache no longer than tokengate's max-age: a new key is published that long before it signs.
  const keys = createRemoteJWKSet(new URL(jwksUrl), { cacheMaxAge: cacheSeconds * 1000, cooldownDuration: Math.min(30_000, cacheSeconds * 1000) });
  return async (headers) => {
    const assertion = headers[SIGNED_IDENTITY_HEADER];
    if (typeof assertion !== 'string' || assertion === '') return null;
    try {
      const { payload } = await jwtVerify(assertion, keys, { issuer, audience, typ: SIGNED_IDENTITY_TYPE, algorithms: ['ES256', 'EdDSA'] });
      const tokenKind = typeof payload.token_kind === 'string' ? payload.token_kind : null;
      const clientId = typeof payload.client_id === 'string' ? payload.client_id : null;
      if (tokenKind === null || clientId === null || typeof payload.sub !== 'string') return null;
      const scopes = typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [];
      return { userId: tokenKind === 'user' ? payload.sub : null, clientId, scopes, tokenKind };
    } catch {
      return null;
    }
  };
}

/**
 * @param {import('node:http').IncomingMessage} request
 * @returns {Promise<unknown>} the parsed JSON body, undefined without one
 */
async function readJson(request) {
  const chunks = [];
  let size = 0;
  for await (const chunk of request) {
    size += chunk.length;
    if (size > BODY_LIMIT) throw Object.assign(new Error('body too large'), { status: 413 });
    chunks.push(chunk);
  }
  if (size === 0) return undefined;
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw Object.assign(new Error('body is not JSON'), { status: 400 });
  }
}

/**
 * The service as an http.Server, not yet listening. `verifyIdentity`: where the identity comes
 * from (createIdentityVerifier); unset, the identity headers.
 * @param {{ api?: ApiName, log?: ((line: string) => void) | null, verifyIdentity?: ((headers: import('node:http').IncomingHttpHeaders) => Promise<Identity | null>) | null }} [options]
 */
export function createTicketingApi({ api = 'all', log = null, verifyIdentity = null } = {}) {
  const resources = createResources();
  return createServer(async (request, response) => {
    const url = new URL(request.url ?? '/', 'http://ticketing-api');
    /** @type {Received} */
    const received = {
      method: request.method ?? 'GET',
      path: url.pathname,
      query: url.search,
      requestId: single(request.headers[REQUEST_ID_HEADER]),
      headers: request.headers,
    };
    const identity = verifyIdentity === null ? identityOf(request.headers) : await verifyIdentity(request.headers);
    const answer = await answerFor(resources, api, received, identity, request);
    const shownIdentity =
      identity === null ? null : { user_id: identity.userId, client_id: identity.clientId, scopes: identity.scopes, token_kind: identity.tokenKind };
    const body = JSON.stringify(
      {
        ...answer.body,
        received: {
          method: received.method,
          path: received.path,
          query: received.query,
          request_id: received.requestId,
          identity: shownIdentity,
          headers: received.headers,
        },
      },
      null,
      2,
    );
    response.writeHead(answer.status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }).end(`${body}\n`);
    log?.(
      `${received.method} ${received.path} ${answer.status} ${identity === null ? 'no identity' : `${identity.tokenKind} ${identity.userId ?? identity.clientId}`} request_id=${received.requestId ?? '-'}`,
    );
  });
}

/** @param {string | string[] | undefined} value */
function single(value) {
  return typeof value === 'string' ? value : null;
}

/**
 * @param {Map<string, Resource>} resources
 * @param {ApiName} api
 * @param {Received} received
 * @param {Identity | null} identity
 * @param {import('node:http').IncomingMessage} request
 * @returns {Promise<Answer>}
 */
async function answerFor(resources, api, received, identity, request) {
  const resource = resources.get(received.path.replace(/\/+$/, ''));
  if (resource === undefined || (api !== 'all' && resource.api !== api)) {
    return { status: 404, body: { error: 'not_found', error_description: `This ${api === 'all' ? 'ticketing' : api} API has no ${received.path}.` } };
  }
  // The one check this service makes itself: tokengate vouched for the caller. A request that
  // bypassed it carries no identity headers (or, from a client, ones tokengate would have removed).
  if (identity === null || identity.tokenKind !== resource.tokenKind || (resource.tokenKind === 'user' && identity.userId === null)) {
    return {
      status: 403,
      body: {
        error: 'forbidden',
        error_description: `No ${resource.tokenKind} identity from tokengate: this service answers only requests that came through it.`,
      },
    };
  }
  const action = resource.methods[received.method === 'HEAD' ? 'GET' : received.method];
  if (action === undefined)
    return { status: 405, body: { error: 'method_not_allowed', error_description: `${received.path} takes ${Object.keys(resource.methods).join(', ')}.` } };
  try {
    return action(identity, await readJson(request));
  } catch (error) {
    const status = /** @type {{ status?: number }} */ (error).status ?? 500;
    return { status, body: { error: 'invalid_request', error_description: /** @type {Error} */ (error).message } };
  }
}

function isEntryPoint() {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  const api = /** @type {ApiName} */ (process.env.TICKETING_API ?? 'all');
  if (!['user', 'organizer', 'all'].includes(api)) {
    console.error(`ticketing-api: TICKETING_API must be user, organizer or all, not "${api}"`);
    process.exit(2);
  }
  const host = process.env.HOST ?? '127.0.0.1';
  const port = Number(process.env.PORT ?? 3000);
  const jwksUrl = process.env.TOKENGATE_JWKS_URL;
  const verifyIdentity =
    jwksUrl === undefined || jwksUrl === ''
      ? null
      : await createIdentityVerifier({
          jwksUrl,
          issuer: process.env.TOKENGATE_ISSUER ?? '',
          audience: process.env.IDENTITY_AUDIENCE ?? '',
          cacheSeconds: Number(process.env.JWKS_CACHE_SECONDS ?? 300),
        });
  const server = createTicketingApi({ api, log: (line) => console.log(line), verifyIdentity });
  server.listen(port, host, () => console.log(`ticketing-api (${api}) listening on http://${host.includes(':') ? `[${host}]` : host}:${port}`));
  // As PID 1 in a container, node ignores signals it has no handler for.
  for (const signal of /** @type {const} */ (['SIGTERM', 'SIGINT'])) {
    process.once(signal, () => {
      server.close(() => process.exit(0));
      server.closeIdleConnections();
    });
  }
}
