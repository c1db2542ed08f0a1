import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import {
  authorizationPage,
  authorizeFor,
  clientDocument,
  createTestCa,
  startDocumentServer,
  startTestDns,
  type DocumentServer,
  type TestCa,
  type TestDns,
} from './support/client-metadata.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { postForm, startTokengate, type RunningTokengate } from './support/instance.js';
import { FormClient, createUser, signInAndApprove, type PageResponse } from './support/issuer.js';

/**
 * Client ID metadata documents against real parts: documents served over https by a server on
 * the loopback under a test CA, names resolved by a DNS server of the test's own (the fetcher's
 * real lookup and address check on its answers), a real Redis, two sidecars. One tokengate may
 * fetch from 127.0.0.1 (allowPrivateNetworks) and serves the flows; a second one, allowed no
 * private network, meets the names that resolve where documents must never come from.
 */

const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats';
const FETCH_TIMEOUT_MS = 1_500;
const MAX_BYTES = 5_120;

let ca: TestCa;
let documents: DocumentServer;
let dns: TestDns;
let open: RunningTokengate;
let strict: RunningTokengate;
let api: Upstream;
/** `https://assistant.test:<port>`: the allowed origin of the open instance. */
let origin: string;

const documentsConfig = (overrides: Record<string, unknown>) => ({
  enabled: true,
  caFile: ca.caFile,
  nameServers: [dns.address],
  fetchTimeoutMs: FETCH_TIMEOUT_MS,
  maxDocumentBytes: MAX_BYTES,
  ...overrides,
});

beforeAll(async () => {
  ca = createTestCa(['assistant.test', 'elsewhere.test', 'loopback.test', 'metadata.test', 'internal.test', 'mixed.test']);
  documents = await startDocumentServer(ca);
  dns = await startTestDns({
    'assistant.test': ['127.0.0.1'],
    'elsewhere.test': ['127.0.0.1'],
    'loopback.test': ['127.0.0.1'],
    'metadata.test': ['169.254.169.254'],
    'internal.test': ['10.0.0.1'],
    'mixed.test': ['93.184.215.14', '10.0.0.1'],
  });
  origin = `https://assistant.test:${documents.port}`;
  api = await startUpstream();
  open = await startTokengate('cimd-open', {
    config: {
      clientMetadataDocuments: documentsConfig({
        allowPrivateNetworks: ['127.0.0.1/32'],
        minCacheSeconds: 1,
        maxCacheSeconds: 30,
        allow: [{ url: origin }, { url: `${origin}/tiered/`, rateLimit: 'narrow' }, { url: `${origin}/bound/`, dpop: 'required' }],
      }),
      rateLimits: { wide: { requestsPerSecond: 100, burst: 100 }, narrow: { requestsPerSecond: 0.01, burst: 1 } },
      routes: [{ path: '/api/public/me', token: 'user', scopes: ['public'], upstream: api.url, rateLimit: 'wide' }],
    },
  });
  strict = await startTokengate('cimd-strict', {
    config: {
      clientMetadataDocuments: documentsConfig({
        allow: ['loopback.test', 'metadata.test', 'internal.test', 'mixed.test']
          .map((host) => ({ url: `https://${host}:${documents.port}` }))
          .concat({
            url: `https://127.0.0.1:${documents.port}`,
          }),
      }),
    },
  });
  await createUser(open.store, 'user-fan', EMAIL, PASSWORD);
});

afterAll(async () => {
  await open?.close();
  await strict?.close();
  await api?.close();
  await documents?.close();
  await dns?.close();
  ca?.remove();
});

interface SignIn {
  verifier: string;
  consent: PageResponse;
  code: string;
}

/** The person's side: the authorization page, signed in, the consent page approved; the code the redirect carries. */
async function signIn(running: RunningTokengate, clientId: string, redirectUri: string): Promise<SignIn> {
  const verifier = randomBytes(32).toString('base64url');
  const browser = new FormClient(running.baseUrl, { 'x-forwarded-for': `10.${randomBytes(3).join('.')}` });
  const { consent, location } = await signInAndApprove(browser, authorizeFor(clientId, redirectUri, verifier), EMAIL, PASSWORD);
  expect(`${location.origin}${location.pathname}`).toBe(redirectUri);
  return { verifier, consent, code: location.searchParams.get('code')! };
}

/** A document the open instance serves at `path` of the allowed origin, listing `redirectUri`. */
function publish(path: string, redirectUri: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): string {
  const clientId = `${origin}${path}`;
  documents.serveJson(path, clientDocument(clientId, [redirectUri], extra), headers);
  return clientId;
}

function tokenRequest(running: RunningTokengate, parameters: Record<string, string>, headers: Record<string, string> = {}) {
  return postForm(`${running.baseUrl}/oauth/token`, parameters, headers);
}

describe('an allowed client ID metadata document', () => {
  it('signs the person in, names the client by its host, and its tokens work as a public client: PKCE, refresh, revocation', async () => {
    const redirectUri = 'https://assistant.test/callback';
    const clientId = publish('/clients/assistant.json', redirectUri, { client_name: 'Official Ticketing App' }, { 'cache-control': 'max-age=30' });

    const { verifier, consent, code } = await signIn(open, clientId, redirectUri);
    expect(consent.text).toContain(`<h1 id="title"><strong>assistant.test:${documents.port}</strong> wants to access your Ticketing account</h1>`);
    expect(consent.text).toContain(`identifies itself by its address <strong>${clientId}</strong>, and calls itself “Official Ticketing App”`);

    // Public: no secret, and the code is redeemed with the PKCE verifier.
    const withoutVerifier = await tokenRequest(open, { grant_type: 'authorization_code', code, redirect_uri: redirectUri, client_id: clientId });
    expect(withoutVerifier.status).toBe(400);
    const { code: second, verifier: secondVerifier } = await signIn(open, clientId, redirectUri);
    const tokens = await tokenRequest(open, {
      grant_type: 'authorization_code',
      code: second,
      redirect_uri: redirectUri,
      client_id: clientId,
      code_verifier: secondVerifier,
    });
    expect(tokens.status).toBe(200);
    const issued = (await tokens.json()) as { access_token: string; refresh_token: string };
    expect((await open.store.tokens.getAccessToken(tokenDigest(issued.access_token)))?.clientId).toBe(clientId);
    expect(verifier).not.toBe(secondVerifier);

    const refreshed = await tokenRequest(open, { grant_type: 'refresh_token', refresh_token: issued.refresh_token, client_id: clientId });
    expect(refreshed.status).toBe(200);
    const { access_token: accessToken } = (await refreshed.json()) as { access_token: string };
    const called = await fetch(`${open.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${accessToken}` } });
    expect(called.status).toBe(200);
    expect(called.headers.get('ratelimit-policy')).toContain('"wide"');

    // Introspection is for confidential clients: a public one, URL or not, is refused.
    const introspected = await postForm(`${open.baseUrl}/oauth/introspect`, { token: accessToken, client_id: clientId });
    expect(introspected.status).toBe(401);
    expect(await postForm(`${open.baseUrl}/oauth/revoke`, { token: accessToken, client_id: clientId })).toHaveProperty('status', 200);
    expect(await open.store.tokens.getAccessToken(tokenDigest(accessToken))).toBeNull();
    // Fetched once for all of it: the cache served every later look.
    expect(documents.requestsOf('/clients/assistant.json')).toBe(1);
  });

  it('gets the tier and the DPoP rule of its entry on the list, as an application gets its own', async () => {
    const redirectUri = 'https://assistant.test/tiered-callback';
    const tiered = publish('/tiered/client.json', redirectUri);
    const { code, verifier } = await signIn(open, tiered, redirectUri);
    const tokens = await tokenRequest(open, { grant_type: 'authorization_code', code, redirect_uri: redirectUri, client_id: tiered, code_verifier: verifier });
    const { access_token: accessToken } = (await tokens.json()) as { access_token: string };
    const first = await fetch(`${open.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${accessToken}` } });
    const second = await fetch(`${open.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${accessToken}` } });
    expect([first.status, second.status]).toEqual([200, 429]);
    expect(second.headers.get('ratelimit-policy')).toContain('"narrow"');

    const bound = publish('/bound/client.json', redirectUri);
    const boundSignIn = await signIn(open, bound, redirectUri);
    const withoutProof = await tokenRequest(open, {
      grant_type: 'authorization_code',
      code: boundSignIn.code,
      redirect_uri: redirectUri,
      client_id: bound,
      code_verifier: boundSignIn.verifier,
    });
    expect(withoutProof.status).toBe(400);
    expect(await withoutProof.json()).toMatchObject({ error: 'invalid_dpop_proof' });
  });

  it('is announced in the authorization server metadata when on, and only then', async () => {
    const on = (await (await fetch(`${open.baseUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    expect(on.client_id_metadata_document_supported).toBe(true);
    const off = await startTokengate('cimd-off');
    try {
      const metadata = (await (await fetch(`${off.baseUrl}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
      expect(metadata).not.toHaveProperty('client_id_metadata_document_supported');
      // Off, a URL client_id is an unknown application like any other, and nothing is fetched.
      const page = await authorizationPage(off, publish('/clients/off.json', 'https://assistant.test/callback'));
      expect([page.status, page.title]).toEqual([400, 'Unknown application']);
      expect(documents.requestsOf('/clients/off.json')).toBe(0);
    } finally {
      await off.close();
    }
  });
});

describe('a document tokengate refuses: an error page, never a redirect, and nothing fetched past the limits', () => {
  it('a client id on an origin off the list: nothing is fetched', async () => {
    const clientId = `https://elsewhere.test:${documents.port}/client.json`;
    documents.serveJson('/client.json', clientDocument(clientId, ['https://assistant.test/callback']));
    const page = await authorizationPage(open, clientId);
    expect([page.status, page.title, page.location]).toEqual([400, 'This application is not allowed', null]);
    expect(page.text).toContain(`elsewhere.test:${documents.port} (${clientId}) is not on this service`);
    expect(documents.requestsOf('/client.json')).toBe(0);
    // The token endpoint refuses it too: invalid_client, saying why.
    const token = await tokenRequest(open, { grant_type: 'refresh_token', refresh_token: 'x', client_id: clientId });
    expect(token.status).toBe(401);
    expect(await token.json()).toMatchObject({ error: 'invalid_client', error_description: expect.stringContaining('not on this service') });
  });

  it('a document whose client_id differs from its URL', async () => {
    documents.serveJson('/impostor.json', clientDocument('https://claude.ai/oauth/client', ['https://assistant.test/callback']));
    const page = await authorizationPage(open, `${origin}/impostor.json`);
    expect([page.status, page.title, page.location]).toEqual([502, 'This application could not be verified', null]);
    expect(page.text).toContain('names another client_id than the URL it was fetched from');
  });

  it('a redirect URI the document does not list', async () => {
    const clientId = publish('/listed.json', 'https://assistant.test/callback');
    const page = await authorizationPage(open, clientId, 'https://attacker.example/callback');
    expect([page.status, page.title, page.location]).toEqual([400, 'This sign-in link is not valid', null]);
    expect(page.text).toContain('its own metadata document');
  });

  it('a document that claims a secret, or a secret-based authentication method', async () => {
    const secret = publish('/secret.json', 'https://assistant.test/callback', { client_secret: 'hunter2' });
    expect(await authorizationPage(open, secret)).toMatchObject({ status: 502, text: expect.stringContaining('carries client_secret') });
    const basic = publish('/basic.json', 'https://assistant.test/callback', { token_endpoint_auth_method: 'client_secret_basic' });
    expect(await authorizationPage(open, basic)).toMatchObject({ status: 502, text: expect.stringContaining('only &quot;none&quot;') });
  });

  it('a document of 10 MB: cut at the limit, whether or not it says its length', async () => {
    const written = { declared: 0, streamed: 0 };
    const serveLarge = (kind: 'declared' | 'streamed') => (_request: unknown, response: ServerResponse) => {
      const total = 10 * 1024 * 1024;
      response.writeHead(200, { 'content-type': 'application/json', ...(kind === 'declared' ? { 'content-length': String(total) } : {}) });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = () => {
        while (written[kind] < total && !response.destroyed) {
          written[kind] += chunk.length;
          if (!response.write(chunk)) return void response.once('drain', pump);
        }
        response.end();
      };
      pump();
    };
    documents.route('/declared.json', serveLarge('declared'));
    documents.route('/streamed.json', serveLarge('streamed'));
    for (const path of ['/declared.json', '/streamed.json'] as const) {
      const page = await authorizationPage(open, `${origin}${path}`);
      expect([page.status, page.title]).toEqual([502, 'This application could not be verified']);
      expect(page.text).toMatch(path === '/declared.json' ? /is 10485760 bytes, more than the 5120 allowed/ : /larger than the 5120 bytes allowed/);
    }
    // The connection was cut: far less than the 10 MB left the server (socket buffers hold the rest).
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(written.streamed).toBeLessThan(10 * 1024 * 1024);
    expect(written.declared).toBeLessThan(10 * 1024 * 1024);
  });

  it('a server that answers one byte a second: cut at the timeout', async () => {
    let closedAfterBytes = -1;
    documents.route('/slow.json', (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      let sent = 0;
      const timer = setInterval(() => {
        response.write('{"client_id":"'.charAt(sent % 14));
        sent += 1;
      }, 1_000);
      response.on('close', () => {
        clearInterval(timer);
        closedAfterBytes = sent;
      });
    });
    const started = Date.now();
    const page = await authorizationPage(open, `${origin}/slow.json`);
    const took = Date.now() - started;
    expect([page.status, page.title]).toEqual([502, 'This application could not be verified']);
    expect(page.text).toContain(`did not send the document within ${FETCH_TIMEOUT_MS} ms`);
    expect(took).toBeGreaterThanOrEqual(FETCH_TIMEOUT_MS - 50);
    expect(took).toBeLessThan(FETCH_TIMEOUT_MS + 3_000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(closedAfterBytes).toBeGreaterThanOrEqual(0);
    expect(closedAfterBytes).toBeLessThanOrEqual(2);
  });

  it('a redirect to another host: not followed', async () => {
    documents.serveJson('/moved-here.json', clientDocument(`${origin}/moved.json`, ['https://assistant.test/callback']));
    documents.route('/moved.json', (_request, response) =>
      response.writeHead(302, { location: `https://elsewhere.test:${documents.port}/moved-here.json` }).end(),
    );
    const page = await authorizationPage(open, `${origin}/moved.json`);
    expect([page.status, page.location]).toEqual([502, null]);
    expect(page.text).toContain('answered a redirect (HTTP 302), which is not followed');
    expect(documents.requestsOf('/moved-here.json')).toBe(0);
  });

  it('a document that is not served as JSON, or is not there', async () => {
    documents.route('/page.json', (_request, response) => response.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>'));
    expect(await authorizationPage(open, `${origin}/page.json`)).toMatchObject({ status: 502, text: expect.stringContaining('served as text/html') });
    expect(await authorizationPage(open, `${origin}/missing.json`)).toMatchObject({ status: 502, text: expect.stringContaining('HTTP 404') });
  });

  it('a client id URL that is not in its one spelling, or carries a query', async () => {
    for (const clientId of [`https://ASSISTANT.test:${documents.port}/clients/x.json`, `${origin}/clients/../x.json`, `${origin}/x.json?v=2`]) {
      const page = await authorizationPage(open, clientId);
      expect([page.status, page.title]).toEqual([400, 'This application is not allowed']);
    }
  });
});

/** Every connection undici (tokengate's fetcher, and the test's own fetch) tried while `run` ran, and what became of it. */
async function connectionsDuring(run: () => Promise<void>) {
  const seen: Array<{ event: 'connected' | 'refused'; host: string; port: string; code?: string }> = [];
  const connected = (message: unknown) => {
    const { connectParams } = message as { connectParams: { hostname: string; port: string } };
    seen.push({ event: 'connected', host: connectParams.hostname, port: String(connectParams.port) });
  };
  const refused = (message: unknown) => {
    const { connectParams, error } = message as { connectParams: { hostname: string; port: string }; error: { code?: string } };
    seen.push({ event: 'refused', host: connectParams.hostname, port: String(connectParams.port), code: error.code });
  };
  subscribe('undici:client:connected', connected);
  subscribe('undici:client:connectError', refused);
  try {
    await run();
  } finally {
    unsubscribe('undici:client:connected', connected);
    unsubscribe('undici:client:connectError', refused);
  }
  return seen;
}

describe('names that resolve where documents must never come from (no private network allowed)', () => {
  it.each([
    ['loopback.test', '127.0.0.1', 'loopback'],
    ['metadata.test', '169.254.169.254', 'linkLocal'],
    ['internal.test', '10.0.0.1', 'private'],
    ['mixed.test', '10.0.0.1', 'private'],
  ])('%s (%s): refused after the lookup, before any connection', async (host, address, range) => {
    const clientId = `https://${host}:${documents.port}/client.json`;
    documents.serveJson('/client.json', clientDocument(clientId, ['https://assistant.test/callback']));
    const connectionsBefore = documents.connections;
    const questionsBefore = dns.questions.length;
    let page: Awaited<ReturnType<typeof authorizationPage>> | undefined;
    const started = Date.now();
    const seen = await connectionsDuring(async () => {
      page = await authorizationPage(strict, clientId);
    });
    expect(Date.now() - started).toBeLessThan(FETCH_TIMEOUT_MS);
    expect([page!.status, page!.title, page!.location]).toEqual([502, 'This application could not be verified', null]);
    expect(page!.text).toContain(`${host} resolves to ${address} (${range}), which documents may not be fetched from`);
    // The name was asked of the DNS server; the connection it would have led to never happened.
    expect(dns.questions.slice(questionsBefore)).toContain(`${host} A`);
    expect(seen.filter((connection) => connection.host === host)).toEqual([
      { event: 'refused', host, port: String(documents.port), code: 'ERR_CLIENT_METADATA_FORBIDDEN_ADDRESS' },
    ]);
    expect(documents.connections).toBe(connectionsBefore);
  });

  it('an address written in the URL itself: refused without a lookup or a connection', async () => {
    const clientId = `https://127.0.0.1:${documents.port}/client.json`;
    const connectionsBefore = documents.connections;
    const seen = await connectionsDuring(async () => {
      const page = await authorizationPage(strict, clientId);
      expect(page.status).toBe(502);
      expect(page.text).toContain('127.0.0.1 resolves to 127.0.0.1 (loopback)');
    });
    // The test's own requests to tokengate go through undici too: only the document server's port counts.
    expect(seen.filter((connection) => connection.port === String(documents.port))).toEqual([]);
    expect(documents.connections).toBe(connectionsBefore);
  });
});

describe('the document cache, shared by two sidecars', () => {
  let second: RunningTokengate;
  beforeAll(async () => {
    second = await startTokengate('cimd-second', {
      sharing: open,
      config: { clientMetadataDocuments: documentsConfig({ allowPrivateNetworks: ['127.0.0.1/32'], minCacheSeconds: 1, allow: [{ url: origin }] }) },
    });
  });
  afterAll(async () => {
    await second?.close();
  });

  it('100 concurrent sign-ins across both fetch the document once per cache life', async () => {
    const path = '/clients/burst.json';
    const lifeMs = 3_000;
    const clientId = publish(path, 'https://assistant.test/callback', {}, { 'cache-control': `max-age=${lifeMs / 1000}` });
    const burst = async () => {
      const pages = await Promise.all(Array.from({ length: 100 }, (_, index) => authorizationPage(index % 2 === 0 ? open : second, clientId)));
      expect(pages.map((page) => page.status)).toEqual(Array(100).fill(200));
    };
    await burst();
    await burst();
    // Past its max-age: fetched again.
    await new Promise((resolve) => setTimeout(resolve, lifeMs + 200));
    await burst();
    // However long the bursts took on a loaded machine: never two fetches within one cache life.
    const fetchedAt = documents.arrivals.get(path) ?? [];
    expect(fetchedAt.length).toBeGreaterThanOrEqual(2);
    expect(
      fetchedAt
        .slice(1)
        .map((at, index) => at - fetchedAt[index]!)
        .filter((gap) => gap < lifeMs),
    ).toEqual([]);
  });

  it('a document that can no longer be fetched works for its cached life, then sign-ins fail closed', async () => {
    const path = '/clients/fading.json';
    const clientId = publish(path, 'https://assistant.test/callback', {}, { 'cache-control': 'max-age=5' });
    expect((await authorizationPage(second, clientId)).status).toBe(200);
    documents.route(path, (_request, response) => response.writeHead(503, { 'content-type': 'text/plain' }).end('down'));
    expect((await authorizationPage(open, clientId)).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 5_200));
    const page = await authorizationPage(open, clientId);
    expect([page.status, page.title]).toEqual([502, 'This application could not be verified']);
    expect(documents.requestsOf(path)).toBe(2);
  });
});
