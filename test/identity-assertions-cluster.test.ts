import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUpstream, type Upstream } from './support/gateway.js';
import { TestIdentityProvider } from './support/identity-provider.js';
import { clientCredentials, postForm, registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { freePort } from './support/ports.js';
import { startClusterTopology, type TestTopology } from './support/topologies.js';
import { eventually } from './support/wait.js';

/**
 * Identity assertions on a Redis Cluster (three masters, a replica each): the single-use mark
 * of an assertion is one key on whatever slot its digest falls in, so a replay on the other
 * sidecar, or the same assertion sent to both at once, finds it; a subject's tokens, indexed
 * on other slots than their records, are revoked on both sidecars.
 */

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const EMAIL = 'ada@company.example';

let cluster: TestTopology;
let idp: TestIdentityProvider;
let upstream: Upstream;
let first: RunningTokengate;
let second: RunningTokengate;
let app: TestApplication;
let issuerUrl: string;
let api: string;

beforeAll(async () => {
  [cluster, idp, upstream] = await Promise.all([startClusterTopology(), TestIdentityProvider.start(), startUpstream()]);
  const port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  api = `${issuerUrl}/api`;
  const config = {
    issuer: { issuerUrl },
    resources: [{ identifier: api }],
    routes: [{ path: '/api/tickets', token: 'user', scopes: ['public'], upstream: upstream.url, resource: api }],
    identityProviders: [idp.config()],
  };
  first = await startTokengate('id-jag-cluster', { port, config, topology: cluster });
  second = await startTokengate('id-jag-cluster-2', { sharing: first, config });
  app = await registerApplication(first.store, { scopes: ['public'] });
  await first.store.users.create({ id: randomUUID(), email: EMAIL, passwordHash: 'scrypt$placeholder', createdAt: Date.now() });
}, 120_000);

afterAll(async () => {
  await second?.close();
  await first?.close();
  await upstream?.close();
  await idp?.close();
  await cluster?.stop();
});

function assertion(subject = 'idp-ada'): Promise<string> {
  return idp.assertion({ sub: subject, email: EMAIL, aud: issuerUrl, client_id: app.clientId, resource: api, scope: 'public' });
}

function exchange(sidecar: RunningTokengate, value: string): Promise<Response> {
  return postForm(`${sidecar.baseUrl}/oauth/token`, { grant_type: JWT_BEARER, assertion: value, ...clientCredentials(app) });
}

describe('identity assertions on a Redis Cluster, two sidecars', () => {
  it('refuses an assertion used before, on the other sidecar and on the same one', async () => {
    for (let round = 0; round < 8; round += 1) {
      const value = await assertion();
      expect((await exchange(first, value)).status).toBe(200);
      for (const sidecar of [second, first]) {
        const replay = await exchange(sidecar, value);
        expect(replay.status).toBe(400);
        expect(await replay.json()).toEqual({ error: 'invalid_grant', error_description: "The identity assertion's jti was used before." });
      }
    }
  });

  it('lets exactly one of two sidecars take an assertion sent to both at once', async () => {
    for (let round = 0; round < 8; round += 1) {
      const value = await assertion();
      const statuses = (await Promise.all([exchange(first, value), exchange(second, value)])).map((response) => response.status);
      expect(statuses.sort()).toEqual([200, 400]);
    }
  });

  it("revokes a subject's tokens on both sidecars", async () => {
    const subject = `idp-${randomUUID()}`;
    const tokens = await Promise.all(
      [first, second].map(async (sidecar) => ((await (await exchange(sidecar, await assertion(subject))).json()) as { access_token: string }).access_token),
    );
    const call = (sidecar: RunningTokengate, token: string) => fetch(`${sidecar.baseUrl}/api/tickets`, { headers: { authorization: `Bearer ${token}` } });
    for (const token of tokens) for (const sidecar of [first, second]) expect((await call(sidecar, token)).status).toBe(200);
    expect(await first.store.tokens.revokeIdentityTokens(idp.issuer, subject)).toBe(2);
    await eventually(async () => {
      for (const token of tokens) for (const sidecar of [first, second]) if ((await call(sidecar, token)).status !== 401) return false;
      return true;
    });
  });
});
