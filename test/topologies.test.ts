import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/load-config.js';
import { openStore } from '../src/store/open-store.js';
import { slotOf } from '../src/store/redis-feed.js';
import type { Store } from '../src/store/store.js';
import { tokenDigest } from '../src/token/token-value.js';
import { createTestCa } from './support/client-metadata.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import {
  adminFetch,
  basicAuthorization,
  issueAuthorizationCode,
  postForm,
  registerApplication,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';
import { FormClient, authorizePath, createUser, formFields } from './support/issuer.js';
import { valueOf } from './support/metrics.js';
import { acceptsConnections, freePort } from './support/ports.js';
import { WITHOUT_PERSISTENCE, spawnRedisServer } from './support/redis-cluster.js';
import { createTestRedisStore, deletePrefix, rawRedis, uniquePrefix } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';
import { deleteTopologyPrefix, openTopologyStore, startClusterTopology, startSentinelTopology, type TestTopology } from './support/topologies.js';
import { eventually } from './support/wait.js';

/**
 * The issuer and the gateway on a real Redis Cluster and a real Sentinel set-up, two sidecars
 * each; how the keys spread over a Cluster; data written on one Redis by the previous store, and
 * moved into a Cluster; and the revocation feed following a manual failover.
 */

const ROUTE = '/api/public/me';
const REDIRECT_URI = 'https://app.example/cb';
let cluster: Awaited<ReturnType<typeof startClusterTopology>>;
let sentinel: Awaited<ReturnType<typeof startSentinelTopology>>;
let upstream: Upstream;

beforeAll(async () => {
  [cluster, sentinel, upstream] = await Promise.all([startClusterTopology(), startSentinelTopology(), startUpstream()]);
}, 120_000);
afterAll(async () => {
  await Promise.all([cluster?.stop(), sentinel?.stop(), upstream?.close()]);
});

interface TokenBody {
  access_token: string;
  refresh_token?: string;
}

async function tokens(
  sidecar: RunningTokengate,
  application: TestApplication,
  parameters: Record<string, string>,
): Promise<{ status: number; body: TokenBody }> {
  const response = await postForm(`${sidecar.baseUrl}/oauth/token`, parameters, {
    authorization: basicAuthorization(application.clientId, application.clientSecret!),
  });
  return { status: response.status, body: (await response.json()) as TokenBody };
}

async function gateway(sidecar: RunningTokengate, token: string): Promise<{ status: number; identity: string | undefined }> {
  const response = await fetch(`${sidecar.baseUrl}${ROUTE}`, { headers: { authorization: `Bearer ${token}` } });
  const body = response.status === 200 ? ((await response.json()) as { headers: Record<string, string> }) : (await response.arrayBuffer(), null);
  return { status: response.status, identity: body?.headers['x-auth-client-id'] };
}

describe.each([
  ['Redis Cluster', () => cluster as TestTopology],
  ['Redis Sentinel', () => sentinel as TestTopology],
])('the issuer and the gateway on %s, two sidecars', (_name, topology) => {
  let first: RunningTokengate;
  let second: RunningTokengate;
  let application: TestApplication;
  const email = 'ana@example.com';
  const password = 'front row seats';

  beforeAll(async () => {
    const config = {
      server: { trustProxy: ['loopback'] },
      routes: [{ path: ROUTE, methods: ['GET'], token: 'any', scopes: ['public'], upstream: upstream.url }],
    };
    first = await startTokengate('topology-flows', { topology: topology(), config });
    second = await startTokengate('topology-flows-2', { sharing: first, config });
    application = await registerApplication(first.store, { redirectUri: REDIRECT_URI });
    await createUser(first.store, `user-${randomUUID()}`, email, password);
  }, 30_000);
  afterAll(async () => {
    await second?.close();
    await first?.close();
  });

  it('signs a user in on one sidecar (session, login counters), exchanges the code on the other, and both accept the token', async () => {
    const browser = new FormClient(first.baseUrl, { 'x-forwarded-for': '10.9.0.1' });
    const login = await browser.get(authorizePath({ client_id: application.clientId, redirect_uri: REDIRECT_URI, response_type: 'code', state: 's' }));
    expect(login.status).toBe(200);
    const wrong = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email, password: 'wrong' });
    expect(wrong.text).toContain('The e-mail or password is incorrect.');
    const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(wrong.text), email, password });
    expect(signedIn.status).toBe(303);
    const consent = await browser.follow(signedIn);
    const approved = await browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    const code = new URL(approved.location!).searchParams.get('code')!;

    const exchanged = await tokens(second, application, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI });
    expect(exchanged.status).toBe(200);
    for (const sidecar of [first, second]) expect(await gateway(sidecar, exchanged.body.access_token)).toEqual({ status: 200, identity: application.clientId });
    // The code was single use on the other sidecar too: replayed, it revokes what it gave.
    expect((await tokens(first, application, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI })).status).toBe(400);
    for (const sidecar of [first, second]) await eventually(async () => (await gateway(sidecar, exchanged.body.access_token)).status === 401);
  });

  it('rotates a refresh token on one sidecar; replayed on the other, it revokes the family everywhere', async () => {
    const userId = (await first.store.users.findByEmail(email))!.id;
    const { code } = await issueAuthorizationCode(first, application, userId);
    const issued = await tokens(first, application, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI });
    const rotated = await tokens(second, application, { grant_type: 'refresh_token', refresh_token: issued.body.refresh_token! });
    expect(rotated.status).toBe(200);
    for (const sidecar of [first, second]) expect((await gateway(sidecar, rotated.body.access_token)).status).toBe(200);
    expect((await tokens(first, application, { grant_type: 'refresh_token', refresh_token: issued.body.refresh_token! })).status).toBe(400);
    for (const sidecar of [first, second]) await eventually(async () => (await gateway(sidecar, rotated.body.access_token)).status === 401);
    expect(await first.store.tokens.getRefreshToken(tokenDigest(rotated.body.refresh_token!))).toBeNull();
  });

  it('revokes an application token through one sidecar: the other, which has it cached, hears it and refuses it', async () => {
    const issued = await tokens(first, application, { grant_type: 'client_credentials' });
    expect((await gateway(second, issued.body.access_token)).status).toBe(200);
    const heard = await valueOf(second.tokengate.context.metrics.revocationMessages);
    const revoked = await postForm(
      `${first.baseUrl}/oauth/revoke`,
      { token: issued.body.access_token },
      { authorization: basicAuthorization(application.clientId, application.clientSecret!) },
    );
    expect(revoked.status).toBe(200);
    await eventually(async () => (await valueOf(second.tokengate.context.metrics.revocationMessages)) > heard);
    expect((await gateway(second, issued.body.access_token)).status).toBe(401);
  });

  it("deletes an application through the admin API: its tokens are refused everywhere, and the application's list and its record agree", async () => {
    const doomed = await registerApplication(first.store);
    const issued = await tokens(second, doomed, { grant_type: 'client_credentials' });
    expect((await gateway(first, issued.body.access_token)).status).toBe(200);
    expect((await first.store.applications.list()).map((each) => each.clientId)).toContain(doomed.clientId);
    const deleted = await adminFetch(second, `/applications/${doomed.clientId}`, { method: 'DELETE' });
    expect(await deleted.json()).toEqual({ client_id: doomed.clientId, deleted: true });
    for (const sidecar of [first, second]) await eventually(async () => (await gateway(sidecar, issued.body.access_token)).status === 401);
    expect((await first.store.applications.list()).map((each) => each.clientId)).not.toContain(doomed.clientId);
  });
});

/** Keys under `prefix` on each master of the Cluster. */
async function keysPerMaster(prefix: string): Promise<number[]> {
  const counts: number[] = [];
  for (const master of await cluster.masters()) {
    const client = master.client();
    let keys = 0;
    let cursor = '0';
    do {
      const [next, found] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      keys += found.length;
      cursor = next;
    } while (cursor !== '0');
    client.disconnect();
    counts.push(keys);
  }
  return counts;
}

describe('Redis Cluster: where the keys go', () => {
  it('spreads a few hundred minted tokens over the masters: none holds more than 60% of the keys', async () => {
    const issuer = await startTokengate('topology-spread', { topology: cluster });
    try {
      const applications = await Promise.all(Array.from({ length: 5 }, () => registerApplication(issuer.store, { redirectUri: REDIRECT_URI })));
      const userIds = await Promise.all(
        Array.from({ length: 20 }, async (_, index) => {
          const id = `user-${index}-${randomUUID()}`;
          await issuer.store.users.create({ id, email: `${id}@example.com`, passwordHash: 'scrypt$placeholder', createdAt: Date.now() });
          return id;
        }),
      );
      for (let round = 0; round < 40; round++) {
        const application = applications[round % applications.length]!;
        expect((await tokens(issuer, application, { grant_type: 'client_credentials' })).status).toBe(200);
        const { code } = await issueAuthorizationCode(issuer, application, userIds[round % userIds.length]!);
        expect((await tokens(issuer, application, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT_URI })).status).toBe(200);
      }
      for (let index = 0; index < 200; index++) await issuer.issue({ userId: userIds[index % userIds.length]!, familyId: randomUUID() });
      const counts = await keysPerMaster(issuer.prefix);
      const total = counts.reduce((sum, count) => sum + count, 0);
      expect(counts).toHaveLength(3);
      expect(total).toBeGreaterThan(400);
      expect(Math.max(...counts) / total).toBeLessThanOrEqual(0.6);
    } finally {
      await issuer.close();
    }
  });

  it('finds the revocation channel on the node the cluster serves its slot from', async () => {
    const observer = cluster.cluster.nodes[0]!;
    for (const key of ['tokengate:revocations', 'tokengate:at:abc', 'a{b}c', '{}x', 'x{}y{z}', 'ünïcode']) {
      expect(slotOf(key)).toBe(Number(await observer.command('CLUSTER', 'KEYSLOT', key)));
    }
  });
});

describe('data the store already holds', () => {
  it('reads, spends and revokes what the previous version wrote on one Redis: the keys are the same', async () => {
    // Written with the commands of the previous version's scripts, key for key.
    const prefix = uniquePrefix('previous-layout');
    const redis = rawRedis();
    const now = Date.now();
    const expiresAt = now + 3_600_000;
    const token = { kind: 'user', clientId: 'client-old', userId: 'user-old', scopes: ['public'], familyId: 'family-old', issuedAt: now, expiresAt };
    const refresh = { clientId: 'client-old', userId: 'user-old', scopes: ['public'], familyId: 'family-old', issuedAt: now, expiresAt };
    const code = { ...refresh, redirectUri: REDIRECT_URI, codeChallenge: null, codeChallengeMethod: null };
    const app = {
      clientId: 'client-old',
      name: 'Old',
      secretDigest: null,
      redirectUris: [REDIRECT_URI],
      scopes: ['public'],
      confidential: false,
      createdAt: 1,
    };
    const user = { id: 'user-old', email: 'old@example.com', passwordHash: 'scrypt$x', createdAt: 1 };
    await redis.set(`${prefix}app:client-old`, JSON.stringify(app));
    await redis.sadd(`${prefix}apps`, 'client-old');
    await redis.set(`${prefix}user-email:old@example.com`, 'user-old');
    await redis.set(`${prefix}user:user-old`, JSON.stringify(user));
    await redis.sadd(`${prefix}users`, 'user-old');
    await redis.set(`${prefix}at:access-old`, JSON.stringify(token), 'PX', expiresAt - now);
    await redis.hset(`${prefix}rt:refresh-old`, 'r', JSON.stringify(refresh));
    await redis.pexpire(`${prefix}rt:refresh-old`, expiresAt - now);
    await redis.hset(`${prefix}code:code-old`, 'r', JSON.stringify(code));
    for (const index of ['idx:client:client-old', 'idx:user:user-old', 'idx:family:family-old']) {
      await redis.zadd(`${prefix}${index}`, expiresAt, 'at:access-old', expiresAt, 'rt:refresh-old');
      await redis.pexpireat(`${prefix}${index}`, expiresAt);
    }
    await redis.set(`${prefix}secret:token-tag-key`, 'the-old-key');
    await redis.set(`${prefix}session:session-old`, JSON.stringify({ userId: 'user-old', createdAt: 1 }), 'PX', 60_000);
    await redis.set(`${prefix}counter:login:old`, '2', 'PX', 60_000);
    const store = createTestRedisStore(prefix);
    try {
      expect(await store.applications.get('client-old')).toEqual(app);
      expect(await store.applications.list()).toEqual([app]);
      expect(await store.users.findByEmail('old@example.com')).toEqual(user);
      expect(await store.tokens.getAccessToken('access-old')).toEqual(token);
      expect(await store.tokens.getRefreshToken('refresh-old')).toEqual(refresh);
      expect(await store.codes.consume('code-old')).toEqual({ record: code, firstUse: true });
      expect(await store.secrets.getOrCreate('token-tag-key', 'a-new-key')).toBe('the-old-key');
      expect(await store.sessions.get('session-old')).toEqual({ userId: 'user-old', createdAt: 1 });
      expect(await store.counters.increment('login:old', 60_000)).toBe(3);
      expect(await store.tokens.revokeUserTokens('user-old')).toBe(2);
      expect(await store.tokens.getAccessToken('access-old')).toBeNull();
      expect(await store.tokens.getRefreshToken('refresh-old')).toBeNull();
    } finally {
      await store.close();
      redis.disconnect();
      await deletePrefix(prefix);
    }
  });

  it('moves from one Redis into a Cluster with redis-cli --cluster import, and the Cluster serves the same tokens, users and applications', async () => {
    const source = await ThrowawayRedis.start();
    const prefix = uniquePrefix('moved');
    const before = createTestRedisStore(prefix, { url: source.url });
    let after: Store | null = null;
    try {
      const application = await registerApplication(before);
      await before.users.create({ id: 'user-moved', email: 'moved@example.com', passwordHash: 'scrypt$x', createdAt: 1 });
      const now = Date.now();
      const record = {
        kind: 'user' as const,
        clientId: application.clientId,
        userId: 'user-moved',
        scopes: ['public'],
        familyId: 'family-moved',
        issuedAt: now,
        expiresAt: now + 3_600_000,
      };
      await before.tokens.saveAccessToken('access-moved', record);
      await before.tokens.saveRefreshToken('refresh-moved', { ...record, familyId: 'family-moved' });
      await before.close();

      const target = cluster.cluster.nodes[0]!.address;
      const moved = spawnSync('redis-cli', ['--cluster', 'import', target, '--cluster-from', `127.0.0.1:${source.port}`, '--cluster-copy'], {
        encoding: 'utf8',
      });
      expect(moved.status, moved.stdout + moved.stderr).toBe(0);

      after = await openTopologyStore(cluster, prefix);
      expect((await after.applications.get(application.clientId))?.clientId).toBe(application.clientId);
      expect((await after.users.findByEmail('moved@example.com'))?.id).toBe('user-moved');
      expect(await after.tokens.getAccessToken('access-moved')).toEqual(record);
      expect(await after.tokens.revokeFamily('family-moved')).toBe(2);
      expect(await after.tokens.getRefreshToken('refresh-moved')).toBeNull();
    } finally {
      await before.close().catch(() => {});
      await after?.close();
      await source.kill();
      await deleteTopologyPrefix(cluster, prefix);
    }
  });
});

describe('the revocation feed through a manual failover (the old master stays up and becomes a replica)', () => {
  async function sidecarPair(topology: TestTopology): Promise<[RunningTokengate, RunningTokengate]> {
    const first = await startTokengate('topology-feed', {
      topology,
      config: { routes: [{ path: ROUTE, methods: ['GET'], token: 'any', upstream: upstream.url }] },
    });
    const second = await startTokengate('topology-feed-2', {
      sharing: first,
      config: { routes: [{ path: ROUTE, methods: ['GET'], token: 'any', upstream: upstream.url }] },
    });
    return [first, second];
  }

  async function expectFeedMoved(first: RunningTokengate, second: RunningTokengate, failOver: () => Promise<void>): Promise<void> {
    const cachedToken = await first.issue();
    expect((await gateway(second, cachedToken)).status).toBe(200);
    await failOver();
    // The subscription left the old master: cut, then subscribed on the new one, the cache cleared.
    for (const sidecar of [first, second]) await eventually(async () => (await valueOf(sidecar.tokengate.context.metrics.cacheResets)) === 1, 15_000);
    // A write sent as a connection to the old master closed fails (503) and is not sent again.
    let token = '';
    await eventually(() =>
      first.issue().then(
        (issued) => ((token = issued), true),
        () => false,
      ),
    );
    expect((await gateway(second, token)).status).toBe(200);
    const heard = await valueOf(second.tokengate.context.metrics.revocationMessages);
    await first.store.tokens.revokeAccessToken(tokenDigest(token));
    await eventually(async () => (await valueOf(second.tokengate.context.metrics.revocationMessages)) > heard);
    expect((await gateway(second, token)).status).toBe(401);
  }

  it('on Redis Cluster: CLUSTER FAILOVER of the master that serves the channel', { timeout: 60_000 }, async () => {
    const [first, second] = await sidecarPair(cluster);
    try {
      const master = await cluster.cluster.masterOfSlot(slotOf(`${first.prefix}revocations`));
      const replica = await cluster.cluster.replicaOf(master);
      await expectFeedMoved(first, second, async () => {
        await replica.command('CLUSTER', 'FAILOVER');
        // While the slot changes hands, a node may list it nowhere for a moment.
        await eventually(async () => (await cluster.cluster.masterOfSlot(slotOf(`${first.prefix}revocations`)).catch(() => null)) === replica, 15_000);
      });
    } finally {
      await second.close();
      await first.close();
    }
  });

  it('on Redis Sentinel: SENTINEL FAILOVER', { timeout: 60_000 }, async () => {
    const [first, second] = await sidecarPair(sentinel);
    try {
      const master = await sentinel.sentinel.currentMaster();
      const replica = sentinel.sentinel.servers.find((server) => server !== master)!;
      await expectFeedMoved(first, second, async () => {
        await sentinel.sentinel.sentinels[0]!.command('SENTINEL', 'FAILOVER', sentinel.sentinel.masterName);
        await sentinel.sentinel.waitForMaster(replica);
        // Writes wait for a replica: the old master's, once it follows the new one.
        await eventually(async () => /master_link_status:up/.test(String(await master.command('INFO', 'replication'))), 20_000);
      });
    } finally {
      await second.close();
      await first.close();
    }
  });
});

describe('TLS', () => {
  it('reaches a Redis that speaks only TLS when store.tls.caFile names its CA, and says TLS failed when it does not', { timeout: 30_000 }, async () => {
    const ca = createTestCa([]);
    const port = await freePort();
    const server = spawnRedisServer([
      '--port',
      '0',
      '--bind',
      '127.0.0.1',
      '--tls-port',
      String(port),
      '--tls-cert-file',
      join(ca.dir, 'server.pem'),
      '--tls-key-file',
      join(ca.dir, 'server.key'),
      '--tls-auth-clients',
      'no',
      ...WITHOUT_PERSISTENCE,
    ]);
    await eventually(() => acceptsConnections(port), 10_000);
    const load = (tls: string) =>
      parseConfig(
        `store:\n  driver: redis\n  url: rediss://127.0.0.1:${port}\n  keyPrefix: "${uniquePrefix('tls')}"\n  startupTimeoutMs: 1000\n${tls}issuer:\n  issuerUrl: http://localhost:8080\n`,
        'tls.yaml',
        {},
      ).store;
    try {
      const store = await openStore(load(`  tls:\n    caFile: ${ca.caFile}\n`));
      await store.sessions.save('over-tls', { userId: 'u', createdAt: 1 }, 5_000);
      expect(await store.sessions.get('over-tls')).toEqual({ userId: 'u', createdAt: 1 });
      await store.close();
      await expect(openStore(load(''))).rejects.toThrow(
        /^Redis at rediss:\/\/127\.0\.0\.1:\d+ \(store\.url\) did not answer within 1000 ms \(store\.startupTimeoutMs\): TLS failed \(.*certificate.*\)\./,
      );
    } finally {
      server.signal('SIGKILL');
      await server.exited;
      ca.remove();
    }
  });
});
