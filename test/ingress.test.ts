import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createHash } from 'node:crypto';
import { caddyfile, EXAMPLE_ADDRESSES, nginxConf, nginxDecisionCacheConf } from '../examples/ingress/configs.mjs';
import { IDENTITY_HEADERS } from '../examples/ticketing-api/server.mjs';
import { parseConfig } from '../src/load-config.js';
import { DECISION_KEEP_ALIVE_MS } from '../src/listeners/decisions.js';
import { normalizePath, PathRefusal } from '../src/http/path.js';
import { tokenDigest } from '../src/token/token-value.js';
import { APPLICATION_TOKEN, USER_TOKEN } from './support/gateway.js';
import { caddyCommand, exchange, installed, nginxCommand, startIngress, startTicketingApi, type Ingress, type WireResponse } from './support/ingress.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { ROOT } from './support/markdown.js';
import { PATH_ATTEMPTS, PATH_ROUTES } from './support/path-attempts.js';
import { freePort } from './support/ports.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';
import { eventually, sleep } from './support/wait.js';

/**
 * Real ingresses with the examples of examples/ingress (only their addresses changed) in front
 * of the example ticketing APIs, asking a real tokengate's decision listener about every
 * request: nginx (auth_request) and Caddy (forward_auth). The routes have no upstreams:
 * tokengate only decides, the ingress forwards.
 */

const REALM = 'ticketing';
const INVALID_TOKEN = { error: 'invalid_token', error_description: 'The access token is invalid, expired or revoked.' };
/** No token on a route that takes Bearer and DPoP: both bare challenges, Bearer first. */
const MISSING_TOKEN_CHALLENGE = `Bearer realm="${REALM}", DPoP realm="${REALM}", algs="ES256 EdDSA Ed25519 RS256 PS256"`;
const INVALID_TOKEN_CHALLENGE = `Bearer realm="${REALM}", error="invalid_token", error_description="The access token is invalid, expired or revoked."`;

/** tokengate's side of the examples. */
const EXAMPLE_CONFIG = parseConfig(readFileSync(join(ROOT, 'examples/ingress/tokengate.yaml'), 'utf8'), 'examples/ingress/tokengate.yaml', {});
/** The example's routes, and two more: a nested route that needs one more scope, and one that takes query tokens through an ingress. */
const ROUTES = [
  ...EXAMPLE_CONFIG.routes,
  PATH_ROUTES.eventsAdmin,
  // A WebSocket-style route whose clients can only put the token in the URL: it opts in.
  { path: '/api/public/stream', methods: ['GET'], token: 'user', scopes: ['public'], allowQueryTokenThroughIngress: true },
];

let userApi: Awaited<ReturnType<typeof startTicketingApi>>;
let organizerApi: Awaited<ReturnType<typeof startTicketingApi>>;
let tokengate: RunningTokengate;
let tokens: { user: string; application: string; admin: string };

interface IngressKind {
  readonly name: string;
  readonly version: [string, string];
  readonly config: typeof nginxConf;
  readonly command: typeof nginxCommand | typeof caddyCommand;
  /** A module the example loads, and the Debian package that has it. */
  readonly module?: { file: string; apt: string };
}
const NGINX: IngressKind = { name: 'nginx', version: ['nginx', '-v'], config: nginxConf, command: nginxCommand };
const NGINX_DECISION_CACHE: IngressKind = {
  name: 'nginx with the decision cache',
  version: ['nginx', '-v'],
  config: nginxDecisionCacheConf,
  command: nginxCommand,
  module: { file: '/usr/lib/nginx/modules/ngx_http_lua_module.so', apt: 'libnginx-mod-http-lua' },
};
const CADDY: IngressKind = { name: 'Caddy', version: ['caddy', 'version'], config: caddyfile, command: caddyCommand };

/** The kind's example, in front of the APIs, asking `decisions` (host:port). */
function startExample(kind: IngressKind, decisions: string, edit: (config: string) => string = (config) => config): Promise<Ingress> {
  if (!installed(...kind.version)) throw new Error(`${kind.version[0]} is not installed: apt-get install -y ${kind.version[0]} (.ci/run installs it)`);
  if (kind.module !== undefined && !existsSync(kind.module.file))
    throw new Error(`${kind.module.file} is not installed: apt-get install -y ${kind.module.apt} (.ci/run installs it)`);
  return startIngress(
    kind.version[0],
    (ingress) => edit(kind.config({ ingress, decisions, userApi: userApi.address, organizerApi: organizerApi.address })),
    kind.command,
  );
}

function addressOf(url: string): string {
  return new URL(url).host;
}

beforeAll(async () => {
  [userApi, organizerApi] = await Promise.all([startTicketingApi('user'), startTicketingApi('organizer')]);
  tokengate = await startTokengate('ingress', { config: { gateway: { realm: REALM }, decisions: { enabled: true }, routes: ROUTES } });
  recordChecks(tokengate, checked);
  tokens = {
    user: await tokengate.issue(),
    application: await tokengate.issue(APPLICATION_TOKEN),
    admin: await tokengate.issue({ ...APPLICATION_TOKEN, scopes: ['public', 'admin'] }),
  };
});

afterAll(async () => {
  await tokengate?.close();
  await Promise.all([userApi?.close(), organizerApi?.close()]);
});

const bearer = (token: string): [string, string] => ['Authorization', `Bearer ${token}`];

/** A raw header list as [name, value] pairs. */
function pairs(rawHeaders: readonly string[]): Array<[string, string]> {
  return rawHeaders.flatMap((name, index) => (index % 2 === 0 ? [[name, rawHeaders[index + 1]!] as [string, string]] : []));
}

/** Every original request target the decision listener was asked about, in order, as the ingress named it. */
const checked: string[] = [];
function recordChecks(running: RunningTokengate, into: string[]): void {
  running.tokengate.decisions!.server.prependListener('request', (request: IncomingMessage) => {
    // The decision cache's follower polls the revocation feed: not a check.
    if (request.url!.startsWith('/revocations')) return;
    const named = request.headers['x-original-uri'] ?? request.headers['x-forwarded-uri'] ?? request.url!.slice('/ext-authz'.length);
    into.push(String(named));
  });
}

const API_OF_ROUTE = { me: 'user', tickets: 'user', events: 'organizer', eventsAdmin: 'organizer' } as const;
/** The API of the route a target matches, by tokengate's own path normalization and longest-prefix match. */
function apiOfTarget(target: string): 'user' | 'organizer' | 'none' {
  const path = normalizePath(target.split('?')[0]!);
  if (path instanceof PathRefusal) return 'none';
  const routes = Object.entries(PATH_ROUTES).filter(([, route]) => path === route.path || path.startsWith(`${route.path}/`));
  const longest = routes.sort(([, a], [, b]) => b.path.length - a.path.length)[0];
  return longest === undefined ? 'none' : API_OF_ROUTE[longest[0] as keyof typeof API_OF_ROUTE];
}

/** Sends through the ingress and says which API, if any, the request reached. */
async function send(ingress: Ingress, method: string, target: string, headers: Array<[string, string]> = [], body = '') {
  const before = { user: userApi.received.length, organizer: organizerApi.received.length };
  const response = await exchange(ingress.port, method, target, headers, body);
  const reached = [...(userApi.received.length > before.user ? ['user'] : []), ...(organizerApi.received.length > before.organizer ? ['organizer'] : [])];
  return { response, reached, received: reached.length === 1 ? (reached[0] === 'user' ? userApi : organizerApi).received.at(-1)! : null };
}

/** tokengate's own error answer, as the client receives it through the ingress. */
function expectRefusal(response: WireResponse, status: number, body: { error: string; error_description?: string }, challenge: string | null = null): void {
  expect({ status: response.status, body: response.json() }).toEqual({
    status,
    body: body.error_description === undefined ? { error: body.error, error_description: expect.any(String) } : body,
  });
  expect(response.header('content-type')).toBe('application/json; charset=utf-8');
  expect(response.header('cache-control')).toBe('no-store');
  expect(response.header('www-authenticate')).toBe(challenge);
  expect(response.header('x-request-id')).toMatch(/^[A-Za-z0-9_-]{16}-[0-9a-z]+$/);
}

describe('the examples', () => {
  it('give tokengate the ticketing routes without upstreams, and a decision listener where the ingresses ask', () => {
    const { decisions, routes } = EXAMPLE_CONFIG;
    expect({ enabled: decisions.enabled, address: `${decisions.host}:${decisions.port}` }).toEqual({ enabled: true, address: EXAMPLE_ADDRESSES.decisions });
    const { me, tickets, events } = PATH_ROUTES;
    expect(routes.map(({ path, token, scopes, upstream, upstreams }) => ({ path, token, scopes, upstream, upstreams }))).toEqual(
      [me, tickets, events].map(({ path, token, scopes }) => ({ path, token, scopes, upstream: undefined, upstreams: undefined })),
    );
  });

  it('run as shipped, with only their addresses changed', () => {
    const nginx = nginxConf({ ...EXAMPLE_ADDRESSES });
    expect(nginx).toBe(readFileSync(join(ROOT, 'examples/ingress/nginx.conf'), 'utf8'));
    expect(nginx).toContain('proxy_pass http://tokengate_decisions/auth-request;');
    expect(nginx).toContain('proxy_set_header X-Original-URI $request_uri;');
    expect(nginxDecisionCacheConf({ ...EXAMPLE_ADDRESSES })).toBe(readFileSync(join(ROOT, 'examples/ingress/nginx-decision-cache.conf'), 'utf8'));
    expect(caddyfile({ ...EXAMPLE_ADDRESSES })).toBe(readFileSync(join(ROOT, 'examples/ingress/Caddyfile'), 'utf8'));
    expect(nginxConf({ ...EXAMPLE_ADDRESSES, decisions: '10.0.0.9:9', userApi: '10.0.0.9:1' }, { workerProcesses: 1 })).toMatch(
      /worker_processes 1;[^]*server 10\.0\.0\.9:9;[^]*server 10\.0\.0\.9:1;[^]*server 127\.0\.0\.1:3002;/,
    );
  });
});

describe.each([NGINX, NGINX_DECISION_CACHE, CADDY])('$name in front of the decision listener (examples/ingress)', (kind) => {
  let ingress: Ingress;
  beforeAll(async () => {
    ingress = await startExample(kind, addressOf(tokengate.decisionsUrl!));
  });
  afterAll(async () => {
    await ingress?.close();
  });
  const through = (method: string, target: string, headers: Array<[string, string]> = [], body = '') => send(ingress, method, target, headers, body);

  it('lets user and application tokens reach only their routes, with the identity tokengate vouches for', async () => {
    const cases: Array<[string, string, keyof typeof tokens, number, 'user' | 'organizer' | null]> = [
      ['GET', '/api/public/me', 'user', 200, 'user'],
      ['GET', '/api/public/tickets', 'user', 200, 'user'],
      ['GET', '/api/public/events', 'application', 200, 'organizer'],
      ['GET', '/api/public/events/admin/keys', 'admin', 404, 'organizer'],
      ['GET', '/api/public/me', 'application', 403, null],
      ['GET', '/api/public/tickets', 'application', 403, null],
      ['GET', '/api/public/events', 'user', 403, null],
      ['GET', '/api/public/events/admin/keys', 'application', 403, null],
    ];
    for (const [method, target, kind, status, api] of cases) {
      const { response, reached } = await through(method, target, [bearer(tokens[kind])]);
      expect({ target, kind, status: response.status, reached }).toEqual({ target, kind, status, reached: api === null ? [] : [api] });
    }
    const { response, received } = await through('GET', '/api/public/me', [bearer(tokens.user)]);
    expect((response.json() as { user_id: string }).user_id).toBe(USER_TOKEN.userId);
    expect(received!.headers).toMatchObject({
      [IDENTITY_HEADERS.userId]: USER_TOKEN.userId,
      [IDENTITY_HEADERS.clientId]: USER_TOKEN.clientId,
      [IDENTITY_HEADERS.scope]: 'public',
      [IDENTITY_HEADERS.tokenKind]: 'user',
    });
    // The credential stays at nginx; the request id is tokengate's, the one the client could quote.
    expect(received!.headers.authorization).toBeUndefined();
    expect(received!.headers['x-request-id']).toMatch(/^[A-Za-z0-9_-]{16}-[0-9a-z]+$/);
    const application = await through('GET', '/api/public/events', [bearer(tokens.application)]);
    expect(application.received!.headers).toMatchObject({
      [IDENTITY_HEADERS.clientId]: APPLICATION_TOKEN.clientId,
      [IDENTITY_HEADERS.tokenKind]: 'application',
    });
    // No user id: nginx sends none (it omits an empty header), Caddy tokengate's empty one.
    expect(application.received!.headers[IDENTITY_HEADERS.userId] ?? '').toBe('');
  });

  it('refuses forged, unknown, revoked and missing tokens with the challenge and body tokengate gives', async () => {
    const forged = `${tokens.user.slice(0, -4)}AAAA`;
    for (const token of [forged, tokengate.tokengate.context.minter.mint()]) {
      const { response, reached } = await through('GET', '/api/public/me', [bearer(token)]);
      expect(reached).toEqual([]);
      expectRefusal(response, 401, INVALID_TOKEN, INVALID_TOKEN_CHALLENGE);
    }
    const revoked = await tokengate.issue();
    expect((await through('GET', '/api/public/me', [bearer(revoked)])).response.status).toBe(200);
    await tokengate.store.tokens.revokeAccessToken(tokenDigest(revoked));
    const afterRevocation = await through('GET', '/api/public/me', [bearer(revoked)]);
    expect(afterRevocation.reached).toEqual([]);
    expectRefusal(afterRevocation.response, 401, INVALID_TOKEN, INVALID_TOKEN_CHALLENGE);

    const missing = await through('GET', '/api/public/me');
    expectRefusal(missing.response, 401, { error: 'invalid_token', error_description: 'An access token is required.' }, MISSING_TOKEN_CHALLENGE);
  });

  it("answers every other refusal with tokengate's own status, headers and JSON body", async () => {
    const wrongKind = await through('GET', '/api/public/me', [bearer(tokens.application)]);
    const description = 'This route requires a user token.';
    expectRefusal(
      wrongKind.response,
      403,
      { error: 'insufficient_scope', error_description: description },
      `Bearer realm="${REALM}", error="insufficient_scope", error_description="${description}", scope="public"`,
    );
    expectRefusal((await through('GET', '/api/public/me/../events', [bearer(tokens.user)])).response, 400, { error: 'invalid_request' });
    expectRefusal((await through('GET', '/api/private', [bearer(tokens.user)])).response, 404, { error: 'not_found' });
    const notAllowed = await through('DELETE', '/api/public/me', [bearer(tokens.user)]);
    expectRefusal(notAllowed.response, 405, { error: 'method_not_allowed' });
    expect(notAllowed.response.header('allow')).toBe('GET, HEAD');
    const malformed = await through('GET', '/api/public/me', [['Authorization', 'Bearer a b']]);
    expect(malformed.response.status).toBe(400);
    expect(malformed.response.header('www-authenticate')).toMatch(/^Bearer realm="ticketing", error="invalid_request"/);
    for (const answer of [wrongKind, notAllowed, malformed]) expect(answer.reached).toEqual([]);
  });

  it('refuses a token in the query unless the route opts in, and then passes the query on as sent', async () => {
    const refused = await through('GET', `/api/public/me?access_token=${tokens.user}`);
    expect(refused.reached).toEqual([]);
    expectRefusal(
      refused.response,
      400,
      { error: 'invalid_request', error_description: 'This route does not accept the access_token query parameter; send an Authorization header.' },
      `Bearer realm="${REALM}", error="invalid_request", error_description="This route does not accept the access_token query parameter; send an Authorization header."`,
    );
    const optedIn = await through('GET', `/api/public/stream?access_token=${tokens.user}&since=3`);
    expect(optedIn.reached).toEqual(['user']);
    // The ingress forwards the query as the client sent it: the upstream sees the token.
    expect(optedIn.received!.url).toBe(`/api/public/stream?access_token=${tokens.user}&since=3`);
    expect(optedIn.received!.headers[IDENTITY_HEADERS.userId]).toBe(USER_TOKEN.userId);
  });

  it('never reads a token from the body: the ingress does not pass it to the check', async () => {
    const { response, reached } = await through(
      'POST',
      '/api/public/tickets',
      [['Content-Type', 'application/x-www-form-urlencoded']],
      `access_token=${tokens.user}&event=42`,
    );
    expect(reached).toEqual([]);
    expectRefusal(response, 401, { error: 'invalid_token', error_description: 'An access token is required.' }, MISSING_TOKEN_CHALLENGE);
  });

  it('lets no spoofed identity header reach an API, in any spelling', async () => {
    const spoofed: Array<[string, string]> = [
      ['X-Auth-User-Id', 'victim'],
      ['x-auth-user-id', 'victim-2'],
      ['X_Auth_User_Id', 'victim-3'],
      ['X-Auth-Scope', 'admin'],
      ['X-Auth-Token-Kind', 'user'],
      ['X-Auth-Client-Id', 'someone-else'],
      ['X-Auth-Actor-Client-Id', 'someone-else'],
      ['X_Auth_Actor_Client_Id', 'someone-else'],
    ];
    // An application token has no user id: the ingress must not leave the client's in place.
    const application = await through('GET', '/api/public/events', [bearer(tokens.application), ...spoofed]);
    expect(application.reached).toEqual(['organizer']);
    // Every identity header that arrives, in any spelling, is once and tokengate's (no user id, no actor: absent or empty).
    const identity = pairs(application.received!.rawHeaders).filter(([name]) => name.toLowerCase().replaceAll('_', '-').startsWith('x-auth-'));
    expect(identity.map(([name, value]) => [name.toLowerCase(), value]).sort()).toEqual(
      [
        ['x-auth-client-id', APPLICATION_TOKEN.clientId],
        ['x-auth-scope', 'public'],
        ['x-auth-token-kind', 'application'],
        ...(identity.some(([name]) => name.toLowerCase() === 'x-auth-user-id') ? [['x-auth-user-id', '']] : []),
        // Nor an acting service: this token is not an exchanged one.
        ...(identity.some(([name]) => name.toLowerCase() === 'x-auth-actor-client-id') ? [['x-auth-actor-client-id', '']] : []),
      ].sort(),
    );
    const user = await through('GET', '/api/public/me', [bearer(tokens.user), ...spoofed]);
    expect(pairs(user.received!.rawHeaders).filter(([, value]) => value.startsWith('victim') || value === 'admin' || value === 'someone-else')).toEqual([]);
    expect(user.received!.headers[IDENTITY_HEADERS.userId]).toBe(USER_TOKEN.userId);
    // Without a token, spoofed headers get nowhere at all.
    expect((await through('GET', '/api/public/me', spoofed)).reached).toEqual([]);
  });

  it('lets no header the client sends choose the route that is checked', async () => {
    // The ingress sets the headers its endpoint reads itself; the endpoint reads no others.
    const forgedOriginal = await through('DELETE', '/api/public/events/3', [
      bearer(tokens.user),
      ['X-Original-URI', '/api/public/tickets'],
      ['X-Original-Method', 'GET'],
      ['X-Forwarded-Uri', '/api/public/tickets'],
      ['X-Forwarded-Method', 'GET'],
    ]);
    expect(forgedOriginal.reached).toEqual([]);
    expect(forgedOriginal.response.status).toBe(403);
  });

  it(`sends none of ${PATH_ATTEMPTS.length} crafted paths anywhere but as the very target tokengate checked, to its route's API`, async () => {
    const seen = [];
    for (const [target, kind, outcome] of PATH_ATTEMPTS) {
      const asked = checked.length;
      const { reached, received } = await through('GET', target, [bearer(tokens[kind])]);
      seen.push({ target, kind, outcome, reached, received: received?.url ?? null, checked: checked.slice(asked) });
    }
    for (const { target, kind, outcome, reached, received, checked: targets } of seen) {
      if (received === null) {
        expect({ target, reached }).toEqual({ target, reached: [] });
        continue;
      }
      // What the API received is what tokengate was asked about (once), for the API's own route.
      expect({ target, kind, reached, checked: targets }).toEqual({ target, kind, reached: [apiOfTarget(received)], checked: [received] });
      if ('reaches' in outcome) expect({ target, reached }).toEqual({ target, reached: [API_OF_ROUTE[outcome.reaches]] });
      // A target the gateway refuses goes nowhere as sent; an ingress may only pass on its own re-encoding of it.
      else expect({ target, received, reencoded: received !== target }).toEqual({ target, received, reencoded: true });
    }
    // Both outcomes happened.
    expect(seen.filter((attempt) => attempt.received !== null).length).toBeGreaterThan(10);
    expect(seen.filter((attempt) => attempt.received === null).length).toBeGreaterThan(40);
  });
});

describe('what a client sees', () => {
  it("through nginx without the example's error_page: nginx's own 401 and 403, and 500 for every other refusal", async () => {
    const plain = await startExample(NGINX, addressOf(tokengate.decisionsUrl!), (config) => config.replace('error_page 401 403 500 = @tokengate_refused;', ''));
    try {
      const ask = (method: string, target: string, headers: Array<[string, string]>) => exchange(plain.port, method, target, headers);
      const seen = {
        missingToken: await ask('GET', '/api/public/me', []),
        wrongKind: await ask('GET', '/api/public/me', [bearer(tokens.application)]),
        badPath: await ask('GET', '/api/public/me/../events', [bearer(tokens.user)]),
        noRoute: await ask('GET', '/api/private', [bearer(tokens.user)]),
        wrongMethod: await ask('DELETE', '/api/public/me', [bearer(tokens.user)]),
      };
      expect(Object.fromEntries(Object.entries(seen).map(([name, response]) => [name, response.status]))).toEqual({
        missingToken: 401,
        wrongKind: 403,
        badPath: 500,
        noRoute: 500,
        wrongMethod: 500,
      });
      // nginx copies a 401's challenge, not a 403's; its bodies are its own HTML pages.
      expect(seen.missingToken.header('www-authenticate')).toBe(MISSING_TOKEN_CHALLENGE);
      expect(seen.wrongKind.header('www-authenticate')).toBeNull();
      for (const response of Object.values(seen)) expect(response.header('content-type')).toBe('text/html');
    } finally {
      await plain.close();
    }
  });

  it.each([
    {
      kind: NGINX,
      unanswered: { status: 503, body: '{"error":"temporarily_unavailable","error_description":"The token check is unavailable; try again shortly."}' },
    },
    {
      kind: NGINX_DECISION_CACHE,
      unanswered: { status: 503, body: '{"error":"temporarily_unavailable","error_description":"The token check is unavailable; try again shortly."}' },
    },
    { kind: CADDY, unanswered: { status: 502, body: '' } },
  ])(
    'through $kind.name: a 503 from tokengate (its store unreachable) as tokengate sent it; no answer at all as $unanswered.status',
    async ({ kind, unanswered }) => {
      const outage = await startTokengate('ingress-outage', {
        config: { gateway: { realm: REALM }, decisions: { enabled: true }, routes: ROUTES },
        store: createTestRedisStore(uniquePrefix('ingress-outage'), { url: `redis://127.0.0.1:${await freePort()}`, commandTimeoutMs: 200 }),
      });
      const withOutage = await startExample(kind, addressOf(outage.decisionsUrl!));
      const nobody = await startExample(kind, `127.0.0.1:${await freePort()}`);
      try {
        // A token of this deployment, not cached: checking it needs the store.
        const token = outage.tokengate.context.minter.mint();
        const unavailable = await exchange(withOutage.port, 'GET', '/api/public/me', [bearer(token)]);
        expectRefusal(unavailable, 503, { error: 'temporarily_unavailable', error_description: 'The token store is unreachable; try again shortly.' });
        expect(unavailable.header('retry-after')).toBe('1');
        const answer = await exchange(nobody.port, 'GET', '/api/public/me', [bearer(tokens.user)]);
        expect({ status: answer.status, body: answer.body }).toEqual(unanswered);
      } finally {
        await Promise.all([withOutage.close(), nobody.close()]);
        await outage.close();
      }
    },
  );
});

/** The bound of the route the revocation test uses: longer than the test, which the revocation feed does not wait out. */
const REVOCATION_BOUND_SECONDS = 30;
/** The decision listener's default, which the routes without decisionCacheSeconds (tickets) take, and the rate limited one does not. */
const DEFAULT_BOUND_SECONDS = 60;

describe('nginx with the decision cache (examples/ingress/nginx-decision-cache.conf)', () => {
  let cached: RunningTokengate;
  let ingress: Ingress;
  /** What the decision listener of `cached` was asked about. */
  const asked: string[] = [];
  const through = (method: string, target: string, headers: Array<[string, string]> = []) => send(ingress, method, target, headers);
  /** Sends through nginx and says whether the decision listener was asked. */
  async function sendCounted(method: string, target: string, headers: Array<[string, string]>) {
    const before = asked.length;
    const sent = await through(method, target, headers);
    return { ...sent, asked: asked.length - before };
  }

  beforeAll(async () => {
    cached = await startTokengate('ingress-decision-cache', {
      config: {
        gateway: { realm: REALM },
        decisions: { enabled: true, cacheSeconds: DEFAULT_BOUND_SECONDS },
        rateLimits: { organizers: { requestsPerSecond: 1_000, burst: 1_000 } },
        routes: [
          { path: '/api/public/me', methods: ['GET', 'HEAD'], token: 'user', scopes: ['public'], decisionCacheSeconds: REVOCATION_BOUND_SECONDS },
          { path: '/api/public/tickets', token: 'user', scopes: ['public'] },
          { path: '/api/public/events', token: 'application', scopes: ['public'], rateLimit: 'organizers' },
        ],
      },
    });
    recordChecks(cached, asked);
    ingress = await startExample(NGINX_DECISION_CACHE, addressOf(cached.decisionsUrl!));
    // nginx keeps decisions once it hears the revocation feed: a probe token's decision is kept.
    const probe = await cached.issue();
    await eventually(async () => (await sendCounted('GET', '/api/public/tickets?probe', [bearer(probe)])).asked === 0, 5_000);
  });
  afterAll(async () => {
    await ingress?.close();
    await cached?.close();
  });

  it("answers a cached route's next request with the same token without asking, with the same identity", async () => {
    const token = await cached.issue();
    const first = await sendCounted('GET', '/api/public/tickets', [bearer(token)]);
    const second = await sendCounted('GET', '/api/public/tickets', [bearer(token), ['X-Request-Id', 'client-chosen-7']]);
    expect([first.asked, first.response.status, first.reached]).toEqual([1, 200, ['user']]);
    expect([second.asked, second.response.status, second.reached]).toEqual([0, 200, ['user']]);
    const identity = (received: typeof first.received) => Object.fromEntries(Object.values(IDENTITY_HEADERS).map((name) => [name, received!.headers[name]]));
    expect(identity(second.received)).toEqual(identity(first.received));
    expect(identity(second.received)).toEqual({
      [IDENTITY_HEADERS.userId]: USER_TOKEN.userId,
      [IDENTITY_HEADERS.clientId]: USER_TOKEN.clientId,
      [IDENTITY_HEADERS.scope]: 'public',
      [IDENTITY_HEADERS.tokenKind]: 'user',
    });
    // Neither leg lets the credential through; a cached one names the client's request id, as tokengate would.
    expect([first.received!.headers.authorization, second.received!.headers.authorization]).toEqual([undefined, undefined]);
    expect(second.received!.headers['x-request-id']).toBe('client-chosen-7');
    // Another method or another URI is another decision: tokengate is asked.
    expect((await sendCounted('POST', '/api/public/tickets', [bearer(token)])).asked).toBe(1);
    expect((await sendCounted('GET', '/api/public/tickets?page=2', [bearer(token)])).asked).toBe(1);
    expect((await sendCounted('DELETE', '/api/public/me', [bearer(token)])).response.status).toBe(405);
  });

  it('never lets two tokens share an entry, nor keeps a refusal', async () => {
    const ana = await cached.issue({ userId: 'ana' });
    const bo = await cached.issue({ userId: 'bo' });
    const userOf = (sent: Awaited<ReturnType<typeof sendCounted>>) => sent.received?.headers[IDENTITY_HEADERS.userId];
    expect(userOf(await sendCounted('GET', '/api/public/tickets', [bearer(ana)]))).toBe('ana');
    const boFirst = await sendCounted('GET', '/api/public/tickets', [bearer(bo)]);
    expect([boFirst.asked, userOf(boFirst)]).toEqual([1, 'bo']);
    const [anaAgain, boAgain] = [await sendCounted('GET', '/api/public/tickets', [bearer(ana)]), await sendCounted('GET', '/api/public/tickets', [bearer(bo)])];
    expect([anaAgain.asked, userOf(anaAgain), boAgain.asked, userOf(boAgain)]).toEqual([0, 'ana', 0, 'bo']);
    // A token one character off a cached one is its own (forged) credential, refused each time it comes.
    const forged = `${ana.slice(0, -1)}${ana.endsWith('A') ? 'B' : 'A'}`;
    for (let attempt = 0; attempt < 2; attempt++) {
      const refused = await sendCounted('GET', '/api/public/tickets', [bearer(forged)]);
      expect([refused.asked, refused.reached]).toEqual([1, []]);
      expectRefusal(refused.response, 401, INVALID_TOKEN, INVALID_TOKEN_CHALLENGE);
    }
    // The application token's 403 on a user route, twice: asked twice.
    const application = await cached.issue(APPLICATION_TOKEN);
    for (let attempt = 0; attempt < 2; attempt++) expect((await sendCounted('GET', '/api/public/tickets', [bearer(application)])).asked).toBe(1);
  });

  it(`refuses a revoked token once the revocation feed names it, within a second, not at the end of the route's bound (${REVOCATION_BOUND_SECONDS} s)`, async () => {
    const token = await cached.issue();
    expect((await sendCounted('GET', '/api/public/me', [bearer(token)])).asked).toBe(1);
    expect((await sendCounted('GET', '/api/public/me', [bearer(token)])).asked).toBe(0);
    await cached.store.tokens.revokeAccessToken(tokenDigest(token));
    let refused = await sendCounted('GET', '/api/public/me', [bearer(token)]);
    await eventually(async () => {
      refused = await sendCounted('GET', '/api/public/me', [bearer(token)]);
      return refused.response.status !== 200;
    }, 1_000);
    expect({ status: refused.response.status, asked: refused.asked, reached: refused.reached }).toEqual({ status: 401, asked: 1, reached: [] });
  });

  it(`refuses a token past its expiry at once, although the route's bound (${DEFAULT_BOUND_SECONDS} s) is longer`, async () => {
    const expiresAt = Date.now() + 2_500;
    const token = await cached.issue({ expiresAt });
    expect((await sendCounted('GET', '/api/public/tickets', [bearer(token)])).asked).toBe(1);
    expect((await sendCounted('GET', '/api/public/tickets', [bearer(token)])).asked).toBe(0);
    await sleep(expiresAt - Date.now() + 1);
    const expired = await sendCounted('GET', '/api/public/tickets', [bearer(token)]);
    expect({ status: expired.response.status, asked: expired.asked, reached: expired.reached }).toEqual({ status: 401, asked: 1, reached: [] });
  });

  it('asks about every request of a rate limited route, and of a request with a DPoP header', async () => {
    const application = await cached.issue(APPLICATION_TOKEN);
    for (let attempt = 0; attempt < 3; attempt++) {
      const metered = await sendCounted('GET', '/api/public/events', [bearer(application)]);
      expect([metered.asked, metered.response.status]).toEqual([1, 200]);
      expect(metered.response.header('ratelimit-policy')).toBe('"organizers";q=1000;w=1');
    }
    // A request with a DPoP header is asked about, though its Bearer token's decision is cached
    // (tokengate ignores a proof beside an unbound Bearer token), and its own decision is not kept.
    const token = await cached.issue();
    expect((await sendCounted('GET', '/api/public/tickets', [bearer(token)])).asked).toBe(1);
    for (let attempt = 0; attempt < 2; attempt++) expect((await sendCounted('GET', '/api/public/tickets', [bearer(token), ['DPoP', 'x.y.z']])).asked).toBe(1);
    expect((await sendCounted('GET', '/api/public/tickets', [bearer(token)])).asked).toBe(0);
  });

  it('holds no token in its shared memory or its files, only digests and identities', async () => {
    const token = await cached.issue({ userId: 'memory-check' });
    expect((await sendCounted('GET', '/api/public/tickets', [bearer(token)])).asked).toBe(1);
    expect((await sendCounted('GET', '/api/public/tickets', [bearer(token)])).asked).toBe(0);
    const memory = sharedMemoryOf(ingress.pid);
    // What the entry is: the digest of what the decision depends on, and the identity to reuse.
    const key = createHash('sha256').update(`GET /api/public/tickets\nBearer ${token}\n`).digest();
    expect(memory.includes(key)).toBe(true);
    expect(memory.includes(`memory-check\n${USER_TOKEN.clientId}\npublic\nuser`)).toBe(true);
    expect(memory.includes(token)).toBe(false);
    expect(memory.includes(token.slice(0, 16))).toBe(false);
    const files = filesUnder(ingress.dir);
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) expect({ file, holdsToken: readFileSync(file).includes(token) }).toEqual({ file, holdsToken: false });
  });

  it("is what Caddy's forward_auth cannot do: Caddy asks about every request of the same cached route", async () => {
    const caddy = await startExample(CADDY, addressOf(cached.decisionsUrl!));
    try {
      const token = await cached.issue();
      for (let attempt = 0; attempt < 3; attempt++) {
        const before = asked.length;
        expect((await send(caddy, 'GET', '/api/public/tickets', [bearer(token)])).response.status).toBe(200);
        expect(asked.length - before).toBe(1);
      }
    } finally {
      await caddy.close();
    }
  });
});

/** Every shared memory mapping of a process (nginx's zones, the decision cache among them), read from /proc. */
function sharedMemoryOf(pid: number): Buffer {
  const zones = readFileSync(`/proc/${pid}/maps`, 'utf8')
    .split('\n')
    .map((line) => /^([0-9a-f]+)-([0-9a-f]+) rw-s .*\/dev\/zero \(deleted\)$/.exec(line))
    .filter((match) => match !== null);
  expect(zones.length).toBeGreaterThan(0);
  const memory = openSync(`/proc/${pid}/mem`, 'r');
  try {
    return Buffer.concat(
      zones.map(([, start, end]) => {
        const zone = Buffer.alloc(Number.parseInt(end!, 16) - Number.parseInt(start!, 16));
        readSync(memory, zone, 0, zone.length, Number.parseInt(start!, 16));
        return zone;
      }),
    );
  } finally {
    closeSync(memory);
  }
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
}

/** The parts of examples/ingress/envoy.yaml the test reads. */
interface EnvoyCluster {
  name: string;
  load_assignment: { endpoints: Array<{ lb_endpoints: Array<{ endpoint: { address: { socket_address: { address: string; port_value: number } } } }> }> };
  typed_extension_protocol_options?: Record<string, { common_http_protocol_options: { idle_timeout: string } }>;
}
interface EnvoyExample {
  static_resources: {
    clusters: EnvoyCluster[];
    listeners: Array<{
      filter_chains: Array<{
        filters: Array<{
          typed_config: {
            common_http_protocol_options: { headers_with_underscores_action: string };
            route_config: {
              virtual_hosts: Array<{ request_headers_to_remove: string[]; routes: Array<{ match: { prefix: string }; route: { cluster: string } }> }>;
            };
            http_filters: Array<{
              name: string;
              typed_config: {
                failure_mode_allow?: boolean;
                status_on_error?: { code: string };
                with_request_body?: unknown;
                http_service: {
                  server_uri: { cluster: string };
                  path_prefix: string;
                  authorization_response: { allowed_upstream_headers: { patterns: Array<{ exact: string }> }; allowed_client_headers?: unknown };
                };
              };
            }>;
          };
        }>;
      }>;
    }>;
  };
}
/** The parts of examples/ingress/traefik.yml and traefik-dynamic.yml the test reads. */
interface TraefikStatic {
  entryPoints: { web: { address: string } };
  providers: { file: { filename: string } };
}
interface TraefikDynamic {
  http: {
    middlewares: {
      tokengate: { forwardAuth: { address: string; trustForwardHeader: boolean; authResponseHeaders: string[] } };
      'upstream-request': { headers: { customRequestHeaders: Record<string, string> } };
    };
    routers: Record<string, { rule: string; middlewares: string[]; service: string }>;
    services: Record<string, { loadBalancer: { servers: Array<{ url: string }> } }>;
  };
}

describe('the Envoy and Traefik examples, read as Envoy and Traefik read them (neither runs here)', () => {
  const read = <Shape>(file: string) => parse(readFileSync(join(ROOT, file), 'utf8')) as Shape;
  const defaults = parseConfig('{}', 'defaults', {});
  const identityHeaders = Object.values(defaults.gateway.identityHeaders).map((name) => name.toLowerCase());
  const decisionsListener = `${defaults.decisions.host}:${defaults.decisions.port}`;

  it('the shipped default decision listener is the one every example asks', () => {
    expect(decisionsListener).toBe(EXAMPLE_ADDRESSES.decisions);
  });

  it('Envoy: ext_authz to /ext-authz before the router, identity headers replaced, no request through without an answer', async () => {
    const envoy = read<EnvoyExample>('examples/ingress/envoy.yaml');
    const clusters = new Map<string, string>(
      envoy.static_resources.clusters.map((cluster) => {
        const { address, port_value } = cluster.load_assignment.endpoints[0]!.lb_endpoints[0]!.endpoint.address.socket_address;
        return [cluster.name, `${address}:${port_value}`];
      }),
    );
    const manager = envoy.static_resources.listeners[0]!.filter_chains[0]!.filters[0]!.typed_config;
    expect(manager.http_filters.map((filter) => filter.name)).toEqual(['envoy.filters.http.ext_authz', 'envoy.filters.http.router']);
    expect(manager.common_http_protocol_options.headers_with_underscores_action).toBe('DROP_HEADER');
    const authz = manager.http_filters[0]!.typed_config;
    expect({ failureModeAllow: authz.failure_mode_allow, onError: authz.status_on_error?.code, body: authz.with_request_body }).toEqual({
      failureModeAllow: false,
      onError: 'ServiceUnavailable',
      body: undefined,
    });
    const service = authz.http_service;
    expect(clusters.get(service.server_uri.cluster)).toBe(EXAMPLE_ADDRESSES.decisions);
    expect(service.authorization_response.allowed_upstream_headers.patterns.map((pattern) => pattern.exact)).toEqual(identityHeaders);
    expect(service.authorization_response.allowed_client_headers).toBeUndefined();
    const idle = /^(\d+)s$/.exec(
      envoy.static_resources.clusters.find((cluster) => cluster.name === service.server_uri.cluster)!.typed_extension_protocol_options![
        'envoy.extensions.upstreams.http.v3.HttpProtocolOptions'
      ]!.common_http_protocol_options.idle_timeout,
    );
    expect(Number(idle![1]) * 1000).toBeLessThan(DECISION_KEEP_ALIVE_MS);
    const host = manager.route_config.virtual_hosts[0]!;
    expect(host.request_headers_to_remove).toEqual(['authorization']);
    expect(host.routes.map((route) => [route.match.prefix, clusters.get(route.route.cluster)])).toEqual([
      ['/api/public/events', EXAMPLE_ADDRESSES.organizerApi],
      ['/api/public/', EXAMPLE_ADDRESSES.userApi],
    ]);
    // What Envoy sends (the original method, path_prefix + the original path): the listener decides it.
    const port = Number(new URL(tokengate.decisionsUrl!).port);
    expect((await exchange(port, 'HEAD', `${service.path_prefix}/api/public/me`, [bearer(tokens.user)])).status).toBe(200);
    expect((await exchange(port, 'DELETE', `${service.path_prefix}/api/public/me`, [bearer(tokens.user)])).status).toBe(405);
  });

  it('Traefik: ForwardAuth to /forward-auth, its own X-Forwarded-* trusted only, identity headers replaced', async () => {
    const staticConfig = read<TraefikStatic>('examples/ingress/traefik.yml');
    expect(staticConfig.entryPoints.web.address).toBe(EXAMPLE_ADDRESSES.ingress);
    const dynamicFile = staticConfig.providers.file.filename as string;
    expect(dynamicFile).toBe('examples/ingress/traefik-dynamic.yml');
    const { http } = read<TraefikDynamic>(dynamicFile);
    const forward = http.middlewares.tokengate.forwardAuth;
    const address = new URL(forward.address);
    expect({ host: address.host, trustForwardHeader: forward.trustForwardHeader }).toEqual({ host: EXAMPLE_ADDRESSES.decisions, trustForwardHeader: false });
    expect(forward.authResponseHeaders.map((name: string) => name.toLowerCase())).toEqual([...identityHeaders, defaults.gateway.requestIdHeader]);
    const removed = http.middlewares['upstream-request'].headers.customRequestHeaders;
    expect(removed).toEqual(
      Object.fromEntries([
        ['Authorization', ''],
        ...forward.authResponseHeaders.slice(0, identityHeaders.length).map((name: string) => [name.replaceAll('-', '_'), '']),
      ]),
    );
    const services = Object.fromEntries(Object.entries(http.services).map(([name, service]) => [name, new URL(service.loadBalancer.servers[0]!.url).host]));
    expect(Object.values(http.routers).map((router) => [router.rule, router.middlewares, services[router.service]])).toEqual([
      ['PathPrefix(`/api/public/events`)', ['tokengate', 'upstream-request'], EXAMPLE_ADDRESSES.organizerApi],
      ['PathPrefix(`/api/public/`)', ['tokengate', 'upstream-request'], EXAMPLE_ADDRESSES.userApi],
    ]);
    // What Traefik sends (a GET to the address, the original in X-Forwarded-Method and -Uri): the listener decides it.
    const port = Number(new URL(tokengate.decisionsUrl!).port);
    const ask = (method: string) =>
      exchange(port, 'GET', address.pathname, [
        ['X-Forwarded-Method', method],
        ['X-Forwarded-Uri', '/api/public/me'],
        ['X-Forwarded-Host', 'api.test'],
        bearer(tokens.user),
      ]);
    expect((await ask('GET')).status).toBe(200);
    expect((await ask('DELETE')).status).toBe(405);
  });
});
