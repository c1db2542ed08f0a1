import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { tokenDigest } from '../src/token/token-value.js';
import { createTestRedisStore } from './support/redis.js';
import {
  basicAuthorization,
  clientCredentials,
  postForm,
  registerApplication,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';
import { freePort } from './support/ports.js';

let running: RunningTokengate;
let tokenUrl: string;
let confidential: TestApplication;
let publicClient: TestApplication;

beforeAll(async () => {
  running = await startTokengate('issuer-token', { config: { issuer: { scopes: ['public', 'write', 'admin'], defaultScopes: ['public'] } } });
  tokenUrl = `${running.baseUrl}/oauth/token`;
  confidential = await registerApplication(running.store, { scopes: ['public', 'write'] });
  publicClient = await registerApplication(running.store, { confidential: false });
});
afterAll(async () => {
  await running.close();
});

/** Every token endpoint answer, success or error, forbids caching (RFC 6749 section 5.1). */
function expectNoCache(response: Response): void {
  expect(response.headers.get('cache-control')).toBe('no-store');
  expect(response.headers.get('pragma')).toBe('no-cache');
}

async function expectError(response: Response, status: number, error: string): Promise<{ error: string; error_description: string }> {
  const body = (await response.json()) as { error: string; error_description: string };
  expect({ status: response.status, error: body.error }).toEqual({ status, error });
  expect(typeof body.error_description).toBe('string');
  expect(Object.keys(body)).toEqual(['error', 'error_description']);
  expectNoCache(response);
  return body;
}

describe('POST /oauth/token: client_credentials and the wire format', () => {
  it("issues an application token with the ticketing service's keys, in order, and no refresh token", async () => {
    const before = Math.floor(Date.now() / 1000);
    const response = await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential) });
    expect(response.status).toBe(200);
    expectNoCache(response);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    const body = (await response.json()) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(['access_token', 'token_type', 'expires_in', 'scope', 'created_at']);
    expect(body).toMatchObject({ token_type: 'Bearer', expires_in: 7200, scope: 'public' });
    expect(body.access_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(body.created_at).toBeGreaterThanOrEqual(before);
    expect(body.created_at).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    const stored = await running.store.tokens.getAccessToken(tokenDigest(body.access_token as string));
    expect(stored).toMatchObject({ kind: 'application', clientId: confidential.clientId, userId: null, familyId: null, scopes: ['public'] });
    expect(stored!.expiresAt - stored!.issuedAt).toBe(7_200_000);
  });

  it('accepts HTTP Basic credentials, form-urlencoded inside as RFC 6749 2.3.1 requires', async () => {
    const clientId = `odd id:${Date.now()}`;
    const secret = 'se cr+et:with%odd&chars';
    await running.store.applications.put({
      clientId,
      name: 'Odd',
      secretDigest: clientSecretDigest(secret),
      redirectUris: ['https://odd.example/cb'],
      scopes: ['public'],
      confidential: true,
      createdAt: Date.now(),
    });
    const response = await postForm(tokenUrl, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(clientId, secret) });
    expect(response.status).toBe(200);
    // A body client_id naming the same client beside Basic is tolerated.
    const alsoInBody = await postForm(
      tokenUrl,
      { grant_type: 'client_credentials', client_id: clientId },
      { authorization: basicAuthorization(clientId, secret) },
    );
    expect(alsoInBody.status).toBe(200);
  });

  it('accepts a JSON body', async () => {
    const response = await fetch(tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant_type: 'client_credentials', ...clientCredentials(confidential), scope: 'write' }),
    });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { scope: string }).scope).toBe('write');
  });

  it('grants requested scopes the application holds and refuses the others', async () => {
    const granted = await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential), scope: 'write public' });
    expect(((await granted.json()) as { scope: string }).scope).toBe('write public');
    const notAllowed = await expectError(
      await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential), scope: 'admin' }),
      400,
      'invalid_scope',
    );
    expect(notAllowed.error_description).toContain('may not request: admin');
    const unknown = await expectError(
      await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential), scope: 'public root' }),
      400,
      'invalid_scope',
    );
    expect(unknown.error_description).toContain('Unknown scope: root');
    await expectError(
      await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential), scope: 'pub"lic' }),
      400,
      'invalid_scope',
    );
  });

  it('issues 200 concurrent requests 200 distinct tokens, each stored and valid', async () => {
    const responses = await Promise.all(
      Array.from({ length: 200 }, () => postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential) })),
    );
    expect(responses.map((response) => response.status)).toEqual(Array(200).fill(200));
    const tokens = await Promise.all(responses.map(async (response) => ((await response.json()) as { access_token: string }).access_token));
    expect(new Set(tokens).size).toBe(200);
    for (const token of tokens) expect(running.tokengate.context.minter.hasValidTag(token)).toBe(true);
    const records = await Promise.all(tokens.map((token) => running.store.tokens.getAccessToken(tokenDigest(token))));
    expect(records.every((record) => record?.kind === 'application' && record.clientId === confidential.clientId)).toBe(true);
  });

  it('counts issued tokens and errors in the metrics', async () => {
    await postForm(tokenUrl, { grant_type: 'client_credentials', ...clientCredentials(confidential) });
    await postForm(tokenUrl, { grant_type: 'password', ...clientCredentials(confidential) });
    const metrics = await (await fetch(`${running.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/tokengate_tokens_issued_total\{grant_type="client_credentials"\} [1-9]\d*/);
    expect(metrics).toMatch(/tokengate_token_errors_total\{error="unsupported_grant_type"\} [1-9]/);
  });
});

describe('POST /oauth/token: malformed requests', () => {
  const form = () => ({ grant_type: 'client_credentials', ...clientCredentials(confidential) });

  it('refuses bodies that are neither a form nor JSON with 415', async () => {
    for (const contentType of ['text/plain', 'multipart/form-data; boundary=x', 'application/xml']) {
      const response = await fetch(tokenUrl, { method: 'POST', headers: { 'content-type': contentType }, body: 'grant_type=client_credentials' });
      await expectError(response, 415, 'invalid_request');
    }
    // A body without any Content-Type (fetch always sends one, so a raw request).
    const untyped = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const url = new URL(tokenUrl);
      const request = httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-length': '29' } },
        (response) => {
          let body = '';
          response.on('data', (chunk: Buffer) => (body += chunk.toString()));
          response.on('end', () => resolve({ status: response.statusCode!, body }));
        },
      );
      request.on('error', reject);
      request.end('grant_type=client_credentials');
    });
    expect(untyped.status).toBe(415);
    expect(JSON.parse(untyped.body).error).toBe('invalid_request');
  });

  it('refuses malformed JSON, a JSON array and non-string values', async () => {
    const send = (body: string) => fetch(tokenUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    await expectError(await send('{"grant_type":'), 400, 'invalid_request');
    await expectError(await send('["client_credentials"]'), 400, 'invalid_request');
    const nonString = await expectError(await send(JSON.stringify({ ...form(), scope: ['public', 'write'] })), 400, 'invalid_request');
    expect(nonString.error_description).toBe('The scope parameter must appear once, with a string value.');
  });

  it('refuses an oversized body with 413 before parsing it', async () => {
    const response = await postForm(tokenUrl, { ...form(), padding: 'x'.repeat(20_000) });
    await expectError(response, 413, 'invalid_request');
  });

  it('refuses parameters in the URL, where proxies and logs would keep a secret', async () => {
    const response = await postForm(`${tokenUrl}?client_secret=${confidential.clientSecret}`, form());
    const body = await expectError(response, 400, 'invalid_request');
    expect(body.error_description).toContain('not in the URL');
  });

  it('refuses a missing or empty grant_type, and names it', async () => {
    const missing = await expectError(await postForm(tokenUrl, clientCredentials(confidential)), 400, 'invalid_request');
    expect(missing.error_description).toBe('Missing required parameter: grant_type.');
    // RFC 6749 3.1: a parameter without a value is treated as omitted.
    await expectError(await postForm(tokenUrl, { ...form(), grant_type: '' }), 400, 'invalid_request');
    await expectError(await fetch(tokenUrl, { method: 'POST' }), 401, 'invalid_client');
  });

  it('refuses any repeated parameter (RFC 6749 3.2)', async () => {
    for (const name of ['grant_type', 'client_id', 'client_secret', 'scope']) {
      const single: Record<string, string | undefined> = { ...form(), scope: 'public' };
      const parameters = { ...single, [name]: [single[name]!, single[name]!] };
      const body = await expectError(await postForm(tokenUrl, parameters), 400, 'invalid_request');
      expect(body.error_description).toBe(`The ${name} parameter must appear once, with a string value.`);
    }
  });

  it('answers an unknown grant type with unsupported_grant_type', async () => {
    for (const grantType of ['password', 'implicit', 'urn:ietf:params:oauth:grant-type:device_code', '__proto__', 'constructor']) {
      await expectError(await postForm(tokenUrl, { ...form(), grant_type: grantType }), 400, 'unsupported_grant_type');
    }
  });
});

describe('POST /oauth/token: client authentication', () => {
  async function expectInvalidClient(response: Response): Promise<{ error_description: string }> {
    const body = await expectError(response, 401, 'invalid_client');
    expect(response.headers.get('www-authenticate')).toBe('Basic realm="tokengate"');
    return body;
  }

  it('refuses a request without client credentials', async () => {
    const body = await expectInvalidClient(await postForm(tokenUrl, { grant_type: 'client_credentials' }));
    expect(body.error_description).toContain('Client authentication is required');
  });

  it('refuses an unknown client and a wrong secret alike, without echoing the secret', async () => {
    const wrongSecret = 'not-the-secret-0123456789';
    const unknown = await expectInvalidClient(await postForm(tokenUrl, { grant_type: 'client_credentials', client_id: 'nobody', client_secret: wrongSecret }));
    const wrong = await expectInvalidClient(
      await postForm(tokenUrl, { grant_type: 'client_credentials', client_id: confidential.clientId, client_secret: wrongSecret }),
    );
    expect(wrong.error_description).toBe(unknown.error_description);
    expect(JSON.stringify(wrong)).not.toContain(wrongSecret);
    await expectInvalidClient(
      await postForm(tokenUrl, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(confidential.clientId, wrongSecret) }),
    );
    // The secret's digest is not a secret that works.
    await expectInvalidClient(
      await postForm(tokenUrl, {
        grant_type: 'client_credentials',
        client_id: confidential.clientId,
        client_secret: clientSecretDigest(confidential.clientSecret!),
      }),
    );
  });

  it('refuses HTTP Basic and a body secret at once (RFC 6749 2.3), and a body client_id naming another client', async () => {
    const both = await expectError(
      await postForm(
        tokenUrl,
        { grant_type: 'client_credentials', client_secret: confidential.clientSecret },
        { authorization: basicAuthorization(confidential.clientId, confidential.clientSecret!) },
      ),
      400,
      'invalid_request',
    );
    expect(both.error_description).toContain('not both');
    await expectError(
      await postForm(
        tokenUrl,
        { grant_type: 'client_credentials', client_id: publicClient.clientId },
        { authorization: basicAuthorization(confidential.clientId, confidential.clientSecret!) },
      ),
      400,
      'invalid_request',
    );
  });

  it('refuses malformed Basic credentials and other schemes', async () => {
    const headers = [
      'Basic',
      'Basic !!!!',
      `Basic ${Buffer.from('no-colon').toString('base64')}`,
      `Basic ${Buffer.from(':secret-only').toString('base64')}`,
      `Basic ${Buffer.from('%zz:secret').toString('base64')}`,
      'Bearer abc',
      'Digest username="x"',
    ];
    for (const authorization of headers) {
      await expectInvalidClient(await postForm(tokenUrl, { grant_type: 'client_credentials' }, { authorization }));
    }
  });

  it("requires a confidential client's secret", async () => {
    const body = await expectInvalidClient(await postForm(tokenUrl, { grant_type: 'client_credentials', client_id: confidential.clientId }));
    expect(body.error_description).toContain('client secret');
  });

  it('lets a public client identify itself, but not use client_credentials or present a secret', async () => {
    const body = await expectError(
      await postForm(tokenUrl, { grant_type: 'client_credentials', client_id: publicClient.clientId }),
      400,
      'unauthorized_client',
    );
    expect(body.error_description).toContain('Public clients may not use the client_credentials grant');
    await expectInvalidClient(
      await postForm(tokenUrl, { grant_type: 'client_credentials', client_id: publicClient.clientId, client_secret: 'anything-at-all' }),
    );
  });
});

describe('POST /oauth/token: store outage', () => {
  it('answers 503 with Retry-After, never 500 or 401, when Redis is unreachable', async () => {
    const deadPort = await freePort();
    const unreachable = createTestRedisStore('tokengate-test:unreachable:', { url: `redis://127.0.0.1:${deadPort}`, commandTimeoutMs: 200 });
    const outage = await startTokengate('issuer-token-outage', { store: unreachable });
    try {
      const response = await postForm(`${outage.baseUrl}/oauth/token`, { grant_type: 'client_credentials', client_id: 'a', client_secret: 'b' });
      await expectError(response, 503, 'temporarily_unavailable');
      expect(response.headers.get('retry-after')).toBe('1');
    } finally {
      await outage.close();
    }
  });
});
