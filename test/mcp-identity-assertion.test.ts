import type { Server } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientDocument, createTestCa, startDocumentServer, startTestDns, type DocumentServer, type TestCa, type TestDns } from './support/client-metadata.js';
import { closeServer } from './support/gateway.js';
import { TestIdentityProvider } from './support/identity-provider.js';
import { clientCredentials, postForm, registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { freePort } from './support/ports.js';
import { startTicketsMcpServer } from './support/mcp.js';
import { EVENT, TestTransmitter } from './support/transmitter.js';
import { eventually } from './support/wait.js';

/**
 * Enterprise-managed authorization for MCP: the company's identity provider (the test's own,
 * its keys on https) hands the MCP client an identity assertion (ID-JAG) for the MCP server's
 * resource; the SDK's own client presents it to tokengate with the JWT bearer grant through
 * the SDK's non-interactive flow (`prepareTokenRequest`), which is how its cross-app access
 * provider works, and calls a tool through the gateway. The same assertion replayed at a
 * second sidecar is refused.
 */

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const EMAIL = 'grace@company.example';
const PUSH_AUTHORIZATION = `Bearer ${randomBytes(24).toString('base64url')}`;

let idp: TestIdentityProvider;
let transmitter: TestTransmitter;
let mcpServer: Server;
let mcpUrl: string;
let first: RunningTokengate;
let second: RunningTokengate;
let client: TestApplication;
let mcpResource: string;
let userId: string;
let ca: TestCa;
let documents: DocumentServer;
let dns: TestDns;
/** A client with no registration: its client_id is the URL of its metadata document, on https under a test CA. */
let clientMetadataUrl: string;

async function startMcpServer(): Promise<void> {
  ({ server: mcpServer, url: mcpUrl } = await startTicketsMcpServer());
}

beforeAll(async () => {
  [idp] = await Promise.all([TestIdentityProvider.start(), startMcpServer()]);
  ca = createTestCa(['assistant.test']);
  [documents, dns] = await Promise.all([startDocumentServer(ca), startTestDns({ 'assistant.test': ['127.0.0.1'] })]);
  clientMetadataUrl = `https://assistant.test:${documents.port}/agent.json`;
  documents.serveJson(
    '/agent.json',
    clientDocument(clientMetadataUrl, ['http://127.0.0.1:9/callback'], { grant_types: ['authorization_code', JWT_BEARER], client_name: 'Agent' }),
    { 'cache-control': 'max-age=300' },
  );
  const port = await freePort();
  mcpResource = `http://127.0.0.1:${port}/mcp`;
  transmitter = TestTransmitter.on(idp, `http://127.0.0.1:${port}`);
  const config = {
    issuer: { issuerUrl: `http://127.0.0.1:${port}` },
    resources: [{ identifier: mcpResource }],
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
    ],
    identityProviders: [
      idp.config({
        sharedSignals: {
          name: 'company',
          configurationUrl: transmitter.configurationUrl,
          delivery: 'push',
          pushAuthorization: PUSH_AUTHORIZATION,
          streamId: 'company-stream',
        },
      }),
    ],
    clientMetadataDocuments: {
      enabled: true,
      allow: [{ url: `https://assistant.test:${documents.port}`, resources: [mcpResource] }],
      caFile: ca.caFile,
      nameServers: [dns.address],
      allowPrivateNetworks: ['127.0.0.1/32'],
    },
  };
  first = await startTokengate('mcp-id-jag', { port, config });
  second = await startTokengate('mcp-id-jag-2', { sharing: first, config });
  client = await registerApplication(first.store, { scopes: ['public'] });
  userId = randomUUID();
  await first.store.users.create({ id: userId, email: EMAIL, passwordHash: 'scrypt$placeholder', createdAt: Date.now() });
});

afterAll(async () => {
  await second?.close();
  await first?.close();
  if (mcpServer !== undefined) await closeServer(mcpServer);
  await idp?.close();
  await documents?.close();
  await dns?.close();
  ca?.remove();
});

/**
 * The MCP client's side: a confidential client whose user signed in at the company's identity
 * provider, which vouches for them to this MCP server's authorization server with an ID-JAG;
 * no browser, no redirect (the SDK's non-interactive flow).
 */
class IdentityAssertionProvider implements OAuthClientProvider {
  /** Every assertion handed to the SDK, in order. */
  readonly assertions: string[] = [];
  private savedTokens: OAuthTokens | undefined;

  /** `application`: a registered client with its secret, or a client metadata document's URL (a public client). */
  constructor(
    private readonly application: TestApplication | string,
    private readonly requestAssertion: () => Promise<string>,
  ) {}

  get redirectUrl(): undefined {
    return undefined;
  }

  get clientMetadata(): OAuthClientMetadata {
    const method = typeof this.application === 'string' ? 'none' : 'client_secret_basic';
    return { client_name: 'Assistant', redirect_uris: [], grant_types: [JWT_BEARER], token_endpoint_auth_method: method };
  }

  clientInformation(): OAuthClientInformationMixed {
    if (typeof this.application === 'string') return { client_id: this.application };
    return { client_id: this.application.clientId, client_secret: this.application.clientSecret };
  }

  tokens() {
    return this.savedTokens;
  }

  saveTokens(tokens: OAuthTokens) {
    this.savedTokens = tokens;
  }

  redirectToAuthorization(): never {
    throw new Error('an identity assertion needs no browser');
  }

  saveCodeVerifier() {}

  codeVerifier(): never {
    throw new Error('an identity assertion needs no PKCE');
  }

  async prepareTokenRequest(): Promise<URLSearchParams> {
    const assertion = await this.requestAssertion();
    this.assertions.push(assertion);
    return new URLSearchParams({ grant_type: JWT_BEARER, assertion });
  }
}

describe('an MCP client (@modelcontextprotocol/sdk) with an identity assertion from the company', () => {
  it('gets a token with the JWT bearer grant, calls a tool through the gateway; the assertion replayed at another sidecar is refused', async () => {
    const provider = new IdentityAssertionProvider(client, () =>
      idp.assertion({
        sub: 'idp-grace',
        email: EMAIL,
        aud: first.tokengate.context.config.issuer.issuerUrl,
        client_id: client.clientId,
        resource: mcpResource,
        scope: 'public',
      }),
    );
    const tokenRequests: number[] = [];
    const recordingFetch = async (input: string | URL | Request, init?: RequestInit) => {
      const response = await fetch(input, init);
      if (String(input instanceof Request ? input.url : input).endsWith('/oauth/token')) tokenRequests.push(response.status);
      return response;
    };
    const mcp = new Client({ name: 'assistant', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${first.baseUrl}/mcp`), { authProvider: provider, fetch: recordingFetch }));
    try {
      const result = await mcp.callTool({ name: 'my-tickets', arguments: {} });
      expect(result.content).toEqual([{ type: 'text', text: `tickets of ${userId}` }]);
    } finally {
      await mcp.close();
    }
    expect(tokenRequests).toEqual([200]);
    expect(provider.tokens()).not.toHaveProperty('refresh_token');
    expect(provider.assertions).toHaveLength(1);

    const replayed = await postForm(`${second.baseUrl}/oauth/token`, {
      grant_type: JWT_BEARER,
      assertion: provider.assertions[0]!,
      resource: mcpResource,
      ...clientCredentials(client),
    });
    expect(replayed.status).toBe(400);
    expect(await replayed.json()).toEqual({ error: 'invalid_grant', error_description: "The identity assertion's jti was used before." });
  });

  it('works for a client whose client_id is its metadata document, which has no secret: the assertion names that URL', async () => {
    const provider = new IdentityAssertionProvider(clientMetadataUrl, () =>
      idp.assertion({
        sub: 'idp-grace',
        email: EMAIL,
        aud: first.tokengate.context.config.issuer.issuerUrl,
        client_id: clientMetadataUrl,
        resource: mcpResource,
        scope: 'public',
      }),
    );
    const mcp = new Client({ name: 'agent', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${first.baseUrl}/mcp`), { authProvider: provider }));
    try {
      expect((await mcp.callTool({ name: 'my-tickets', arguments: {} })).content).toEqual([{ type: 'text', text: `tickets of ${userId}` }]);
    } finally {
      await mcp.close();
    }
    expect(documents.requestsOf('/agent.json')).toBe(1);
    // The same client's assertion presented by the registered client: refused, naming client_id.
    const stolen = await idp.assertion({
      sub: 'idp-grace',
      email: EMAIL,
      aud: first.tokengate.context.config.issuer.issuerUrl,
      client_id: clientMetadataUrl,
      resource: mcpResource,
    });
    const refused = await postForm(`${first.baseUrl}/oauth/token`, { grant_type: JWT_BEARER, assertion: stolen, ...clientCredentials(client) });
    expect(await refused.json()).toEqual({ error: 'invalid_grant', error_description: "The identity assertion's client_id is not the authenticated client." });
  });

  it("ends mid-session when the provider revokes the subject's sessions: the token gets 401 within a second, and the SDK's next assertion works again", async () => {
    const subject = 'idp-grace-mid-session';
    const provider = new IdentityAssertionProvider(client, () =>
      idp.assertion({
        sub: subject,
        email: EMAIL,
        aud: first.tokengate.context.config.issuer.issuerUrl,
        client_id: client.clientId,
        resource: mcpResource,
        scope: 'public',
      }),
    );
    /** What each request to the MCP server through the gateway was answered, with the token it carried. */
    const calls: Array<{ token: string; status: number }> = [];
    const recordingFetch = async (input: string | URL | Request, init?: RequestInit) => {
      const response = await fetch(input, init);
      const url = String(input instanceof Request ? input.url : input);
      const authorization = new Headers(init?.headers).get('authorization');
      if (url.endsWith('/mcp') && authorization !== null) calls.push({ token: authorization.slice('Bearer '.length), status: response.status });
      return response;
    };
    const mcp = new Client({ name: 'assistant', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${first.baseUrl}/mcp`), { authProvider: provider, fetch: recordingFetch }));
    try {
      expect((await mcp.callTool({ name: 'my-tickets', arguments: {} })).content).toEqual([{ type: 'text', text: `tickets of ${userId}` }]);
      const token = provider.tokens()!.access_token;
      const gatewayStatus = async (sidecar: RunningTokengate) => {
        const response = await fetch(`${sidecar.baseUrl}/mcp`, { headers: { authorization: `Bearer ${token}` } });
        await response.body?.cancel();
        return response.status;
      };

      const minted = await transmitter.set(EVENT.sessionRevoked, {}, { format: 'iss_sub', iss: idp.issuer, sub: subject });
      expect((await transmitter.push(`${second.baseUrl}/ssf/events/company`, minted.set, PUSH_AUTHORIZATION)).status).toBe(202);
      await eventually(async () => (await gatewayStatus(first)) === 401 && (await gatewayStatus(second)) === 401, 1_000);
      expect(Date.now() - minted.madeAt).toBeLessThanOrEqual(1_000);

      // The client's next call meets the 401 itself, asks its provider for a new assertion, and goes on.
      expect((await mcp.callTool({ name: 'my-tickets', arguments: {} })).content).toEqual([{ type: 'text', text: `tickets of ${userId}` }]);
      expect(calls).toContainEqual({ token, status: 401 });
      expect(provider.assertions).toHaveLength(2);
      expect(provider.tokens()!.access_token).not.toBe(token);
    } finally {
      await mcp.close();
    }
  });
});
