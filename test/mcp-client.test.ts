import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { auth, UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientInformationMixed, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientDocument, createTestCa, startDocumentServer, startTestDns, type DocumentServer, type TestCa, type TestDns } from './support/client-metadata.js';
import { closeServer, startUpstream, type Upstream } from './support/gateway.js';
import { adminFetch, registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { FormClient, createUser, signInAndApprove } from './support/issuer.js';
import { freePort } from './support/ports.js';
import { startTicketsMcpServer } from './support/mcp.js';

/**
 * The Model Context Protocol's authorization flow, end to end, with the SDK's own client and
 * server: an MCP server behind a tokengate route of one resource, and a client that knows
 * nothing but the server's URL and its pre-registered client_id. It must find the resource
 * metadata from the 401's challenge, the issuer from it, sign a user in through the
 * authorization page with PKCE and `resource`, and call a tool; its token must not open
 * another resource's route. A second client has no registration at all: its client_id is the
 * URL of its metadata document (served over https under a test CA), which the operator's list
 * allows.
 */

const EMAIL = 'fan@example.com';
const PASSWORD = 'correct horse battery staple';
const REDIRECT_URI = 'http://127.0.0.1:9/mcp-client/callback';

let mcpServer: Server;
let mcpUrl: string;
let otherApi: Upstream;
let running: RunningTokengate;
let mcpResource: string;
let client: TestApplication;
let ca: TestCa;
let documents: DocumentServer;
let dns: TestDns;
/** The MCP client's own metadata document, on https under the test CA: its client_id. */
let clientMetadataUrl: string;

async function startMcpServer(): Promise<void> {
  ({ server: mcpServer, url: mcpUrl } = await startTicketsMcpServer());
}

beforeAll(async () => {
  await startMcpServer();
  ca = createTestCa(['assistant.test']);
  documents = await startDocumentServer(ca);
  dns = await startTestDns({ 'assistant.test': ['127.0.0.1'] });
  clientMetadataUrl = `https://assistant.test:${documents.port}/mcp-client.json`;
  documents.serveJson('/mcp-client.json', clientDocument(clientMetadataUrl, [REDIRECT_URI], { client_name: 'Assistant' }), { 'cache-control': 'max-age=300' });
  otherApi = await startUpstream();
  const port = await freePort();
  mcpResource = `http://127.0.0.1:${port}/mcp`;
  running = await startTokengate('mcp-client', {
    port,
    config: {
      resources: [{ identifier: mcpResource }, { identifier: `http://127.0.0.1:${port}/api/public` }],
      routes: [
        {
          path: '/mcp',
          methods: ['GET', 'POST', 'DELETE'],
          token: 'user',
          scopes: ['public'],
          upstream: mcpUrl,
          resource: mcpResource,
          allowQueryToken: false,
          allowBodyToken: false,
        },
        { path: '/api/public/me', token: 'user', scopes: ['public'], upstream: otherApi.url, resource: `http://127.0.0.1:${port}/api/public` },
      ],
      // No registration for the client of the second test: its document, on a list the operator keeps.
      clientMetadataDocuments: {
        enabled: true,
        allow: [{ url: `https://assistant.test:${documents.port}`, resources: [mcpResource] }],
        caFile: ca.caFile,
        nameServers: [dns.address],
        allowPrivateNetworks: ['127.0.0.1/32'],
      },
    },
  });
  await createUser(running.store, 'user-fan', EMAIL, PASSWORD);
  // Registered by the operator: a public client (PKCE, no secret), as an MCP client is.
  client = await registerApplication(running.store, { confidential: false, redirectUri: REDIRECT_URI });
});

afterAll(async () => {
  await running?.close();
  if (mcpServer !== undefined) await closeServer(mcpServer);
  await otherApi?.close();
  await documents?.close();
  await dns?.close();
  ca?.remove();
});

/**
 * The MCP client's side of OAuth, as an application would write it: everything kept in memory,
 * the pre-registered client_id, and a user agent that signs the user in on the authorization
 * page (over real HTTP, with the session cookie) and hands back the code the redirect carries.
 */
class SignedInUserProvider implements OAuthClientProvider {
  authorizationUrls: URL[] = [];
  code: string | undefined;
  private savedTokens: OAuthTokens | undefined;
  private verifier = '';
  private information: OAuthClientInformationMixed | undefined;

  /** A pre-registered client_id, or none and the URL of the client's metadata document (the SDK then uses that URL as its client_id). */
  constructor(
    clientId: string | undefined,
    readonly clientMetadataUrl?: string,
  ) {
    this.information = clientId === undefined ? undefined : { client_id: clientId };
  }

  get redirectUrl() {
    return REDIRECT_URI;
  }

  get clientMetadata() {
    return {
      client_name: 'Assistant',
      redirect_uris: [REDIRECT_URI],
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
    };
  }

  clientInformation() {
    return this.information;
  }

  saveClientInformation(information: OAuthClientInformationMixed) {
    this.information = information;
  }

  tokens() {
    return this.savedTokens;
  }

  saveTokens(tokens: OAuthTokens) {
    this.savedTokens = tokens;
  }

  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }

  codeVerifier() {
    return this.verifier;
  }

  async redirectToAuthorization(url: URL) {
    this.authorizationUrls.push(url);
    const browser = new FormClient(url.origin, { 'x-forwarded-for': `10.${randomBytes(3).join('.')}` });
    const { location } = await signInAndApprove(browser, url.pathname + url.search, EMAIL, PASSWORD);
    expect(`${location.origin}${location.pathname}`).toBe(REDIRECT_URI);
    this.code = location.searchParams.get('code') ?? undefined;
  }
}

describe('an MCP client (@modelcontextprotocol/sdk) and an MCP server behind a tokengate route with a resource', () => {
  it('discovers the resource and the issuer from the 401, signs in with PKCE and resource, calls a tool; its token opens no other resource', async () => {
    const serverUrl = new URL(`${running.baseUrl}/mcp`);
    const provider = new SignedInUserProvider(client.clientId);

    // Every request the client makes, with the challenge of each 401.
    const seen: Array<{ method: string; url: string; status: number; challenge: string | null }> = [];
    const recordingFetch = async (input: string | URL | Request, init?: RequestInit) => {
      const response = await fetch(input, init);
      const url = String(input instanceof Request ? input.url : input);
      seen.push({ method: init?.method ?? 'GET', url, status: response.status, challenge: response.headers.get('www-authenticate') });
      return response;
    };

    const mcp = new Client({ name: 'assistant', version: '1.0.0' });
    await expect(mcp.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider, fetch: recordingFetch }))).rejects.toBeInstanceOf(
      UnauthorizedError,
    );
    const metadataUrl = `${running.baseUrl}/.well-known/oauth-protected-resource/mcp`;
    expect(seen.slice(0, 3)).toEqual([
      {
        method: 'POST',
        url: serverUrl.href,
        status: 401,
        challenge: `Bearer realm="tokengate", resource_metadata="${metadataUrl}", DPoP realm="tokengate", algs="ES256 EdDSA Ed25519 RS256 PS256", resource_metadata="${metadataUrl}"`,
      },
      { method: 'GET', url: metadataUrl, status: 200, challenge: null },
      { method: 'GET', url: `${running.baseUrl}/.well-known/oauth-authorization-server`, status: 200, challenge: null },
    ]);
    expect(provider.authorizationUrls).toHaveLength(1);
    const asked = provider.authorizationUrls[0]!;
    expect(asked.origin + asked.pathname).toBe(`${running.baseUrl}/oauth/authorize`);
    expect(asked.searchParams.getAll('resource')).toEqual([mcpResource]);
    expect(asked.searchParams.get('code_challenge_method')).toBe('S256');
    expect(asked.searchParams.get('scope')).toBe('public');
    expect(provider.code).toBeDefined();

    const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider, fetch: recordingFetch });
    await transport.finishAuth(provider.code!);
    expect(seen.at(-1)).toMatchObject({ method: 'POST', url: `${running.baseUrl}/oauth/token`, status: 200 });
    const connected = new Client({ name: 'assistant', version: '1.0.0' });
    await connected.connect(transport);
    const result = await connected.callTool({ name: 'my-tickets', arguments: {} });
    expect(result.content).toEqual([{ type: 'text', text: 'tickets of user-fan' }]);
    await connected.close();

    const token = provider.tokens()!.access_token;
    const other = await fetch(`${running.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(other.status).toBe(401);
    expect(other.headers.get('www-authenticate')).toContain('error="invalid_token"');
    expect(other.headers.get('www-authenticate')).toContain(`resource_metadata="${running.baseUrl}/.well-known/oauth-protected-resource/api/public"`);
  });

  it('with clientMetadataUrl and no registration: the issuer fetches its document, the tool answers 200, refresh works, the operator revokes and the next call is 401', async () => {
    const serverUrl = new URL(`${running.baseUrl}/mcp`);
    const provider = new SignedInUserProvider(undefined, clientMetadataUrl);
    const seen: Array<{ method: string; url: string; status: number }> = [];
    const recordingFetch = async (input: string | URL | Request, init?: RequestInit) => {
      const response = await fetch(input, init);
      seen.push({ method: init?.method ?? 'GET', url: String(input instanceof Request ? input.url : input), status: response.status });
      return response;
    };

    const mcp = new Client({ name: 'assistant', version: '1.0.0' });
    await expect(mcp.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider, fetch: recordingFetch }))).rejects.toBeInstanceOf(
      UnauthorizedError,
    );
    // The metadata said client_id_metadata_document_supported: the SDK used its document's URL as its client_id.
    expect(provider.clientInformation()?.client_id).toBe(clientMetadataUrl);
    const asked = provider.authorizationUrls[0]!;
    expect(asked.searchParams.get('client_id')).toBe(clientMetadataUrl);
    expect(asked.searchParams.getAll('resource')).toEqual([mcpResource]);
    expect(documents.requestsOf('/mcp-client.json')).toBe(1);

    const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider, fetch: recordingFetch });
    await transport.finishAuth(provider.code!);
    const connected = new Client({ name: 'assistant', version: '1.0.0' });
    await connected.connect(transport);
    try {
      expect((await connected.callTool({ name: 'my-tickets', arguments: {} })).content).toEqual([{ type: 'text', text: 'tickets of user-fan' }]);
      expect(seen.filter((request) => request.url === serverUrl.href).map((request) => request.status)).toContain(200);

      // Refresh, as the SDK does it: a new access token, and the tool still answers.
      const before = provider.tokens()!;
      expect(await auth(provider, { serverUrl, fetchFn: recordingFetch })).toBe('AUTHORIZED');
      expect(seen.at(-1)).toMatchObject({ method: 'POST', url: `${running.baseUrl}/oauth/token`, status: 200 });
      expect(provider.tokens()!.access_token).not.toBe(before.access_token);
      expect((await connected.callTool({ name: 'my-tickets', arguments: {} })).content).toEqual([{ type: 'text', text: 'tickets of user-fan' }]);

      // The operator revokes every token of the client, by its client id (the URL).
      const revoked = await adminFetch(running, '/tokens/revoke', {
        method: 'POST',
        body: JSON.stringify({ client_id: clientMetadataUrl }),
      });
      // Both grants' tokens: the first access token and its spent refresh token (kept to catch a replay), the refreshed pair.
      expect(await revoked.json()).toEqual({ revoked: 4 });
      const callsBefore = seen.length;
      await expect(connected.callTool({ name: 'my-tickets', arguments: {} })).rejects.toThrow();
      expect(seen[callsBefore]).toMatchObject({ method: 'POST', url: serverUrl.href, status: 401 });
      // Its refresh token went too: the SDK's attempt to refresh is refused.
      expect(seen.slice(callsBefore)).toContainEqual({ method: 'POST', url: `${running.baseUrl}/oauth/token`, status: 400 });
    } finally {
      await connected.close().catch(() => {});
    }
    expect(documents.requestsOf('/mcp-client.json')).toBe(1);
  });
});
