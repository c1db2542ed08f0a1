import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { parseConfig, type ConfigError } from '../src/load-config.js';
import { MemoryStore } from '../src/store/memory.js';
import type { RedisStore } from '../src/store/redis.js';
import { APPLICATION_TOKEN, startUpstream, type Upstream } from './support/gateway.js';
import { exchange } from './support/ingress.js';
import { adminFetch, registerApplication, startTokengate, type RunningTokengate } from './support/instance.js';
import { accessLines, captureLog } from './support/log.js';
import { valueOf } from './support/metrics.js';
import { startClusterTopology } from './support/topologies.js';
import { eventually } from './support/wait.js';

/**
 * Rate limit policies through a real gateway and decision listener on the shared Redis: what an
 * admitted and a refused request carry, quotas, per-user budgets, tiers given through the admin
 * API, and the config's checks. The exactness across sidecars is test/rate-limits-sidecars.test.ts.
 */

let upstream: Upstream;
let running: RunningTokengate;
/** A second sidecar of the same deployment. */
let other: RunningTokengate;

const rateLimits = {
  // Slow enough that a test's requests come far faster than permits accrue.
  tight: { requestsPerSecond: 0.2, burst: 3 },
  quota: { requestsPerSecond: 100, burst: 100, requestsPerHour: 4 },
  perUser: { by: 'user', requestsPerSecond: 0.2, burst: 2 },
  gold: { requestsPerSecond: 100, burst: 50 },
};

beforeAll(async () => {
  upstream = await startUpstream();
  const config = {
    decisions: { enabled: true },
    rateLimits,
    routes: [
      { path: '/api/tight', token: 'any', upstream: upstream.url, rateLimit: 'tight' },
      { path: '/api/quota', token: 'any', upstream: upstream.url, rateLimit: 'quota' },
      { path: '/api/per-user', token: 'user', upstream: upstream.url, rateLimit: 'perUser' },
      { path: '/api/open', token: 'any', upstream: upstream.url },
    ],
  };
  running = await startTokengate('rate-limits', { config });
  other = await startTokengate('rate-limits', { config, sharing: running });
});

afterAll(async () => {
  await other?.close();
  await running?.close();
  await upstream?.close();
});

const getFrom = (sidecar: RunningTokengate, path: string, token: string) =>
  fetch(`${sidecar.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });
const get = (path: string, token: string) => fetch(`${running.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });

async function statuses(path: string, token: string, count: number): Promise<number[]> {
  const answers: number[] = [];
  for (let index = 0; index < count; index += 1) answers.push((await get(path, token)).status);
  return answers;
}

async function applicationToken(): Promise<{ clientId: string; token: string }> {
  const { clientId } = await registerApplication(running.store);
  return { clientId, token: await running.issue({ ...APPLICATION_TOKEN, clientId }) };
}

describe('a rate limited route', () => {
  it('admits the burst with RateLimit fields, then answers 429 rate_limited with Retry-After and the same fields', async () => {
    const { token } = await applicationToken();
    const first = await get('/api/tight', token);
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit-policy')).toBe('"tight";q=1;w=5');
    expect(first.headers.get('ratelimit')).toMatch(/^"tight";r=\d+;t=\d+$/);
    expect(await statuses('/api/tight', token, 2)).toEqual([200, 200]);
    const refused = await get('/api/tight', token);
    expect(refused.status).toBe(429);
    // One permit every 5 s: the next one is 5 s away (and the sidecar asks for it a quarter second later at most).
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(4);
    expect(retryAfter).toBeLessThanOrEqual(6);
    expect(refused.headers.get('ratelimit-policy')).toBe('"tight";q=1;w=5');
    expect(refused.headers.get('ratelimit')).toBe('"tight";r=0;t=15');
    expect(await refused.json()).toEqual({ error: 'rate_limited', error_description: expect.stringContaining('rate') });
    expect(
      await valueOf(running.tokengate.context.metrics.rateLimited, { route: '/api/tight', policy: 'tight', reason: 'rate_limited' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('meters each application apart, and leaves routes without a policy alone', async () => {
    const a = await applicationToken();
    const b = await applicationToken();
    expect(await statuses('/api/tight', a.token, 4)).toEqual([200, 200, 200, 429]);
    expect(await statuses('/api/tight', b.token, 3)).toEqual([200, 200, 200]);
    const open = await statuses('/api/open', a.token, 10);
    expect(open.every((status) => status === 200)).toBe(true);
    expect((await get('/api/open', a.token)).headers.get('ratelimit')).toBeNull();
  });

  it('holds a quota to the request: the fifth of an hourly quota of 4 is quota_exceeded until the hour ends', async () => {
    const { clientId, token } = await applicationToken();
    expect(await statuses('/api/quota', token, 4)).toEqual([200, 200, 200, 200]);
    const refused = await get('/api/quota', token);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: string }).error).toBe('quota_exceeded');
    const secondsToHourEnd = 3600 - Math.floor((Date.now() / 1000) % 3600);
    expect(Math.abs(Number(refused.headers.get('retry-after')) - secondsToHourEnd)).toBeLessThanOrEqual(2);
    expect(refused.headers.get('ratelimit-policy')).toBe('"quota";q=100;w=1, "quota-hour";q=4;w=3600');
    // Nothing more gets through, however it is asked.
    expect(await statuses('/api/quota', token, 5)).toEqual([429, 429, 429, 429, 429]);
    const budget = await adminFetch(running, `/applications/${encodeURIComponent(clientId)}/rate-limit`);
    const { budgets } = (await budget.json()) as { budgets: Array<{ policy: string; quota_left: number | null }> };
    expect(budgets.find((entry) => entry.policy === 'quota')?.quota_left).toBe(0);
  });

  it('admits no more than the burst when many requests of a fresh application arrive at once (they share one lease)', async () => {
    const { token } = await applicationToken();
    const answers = await Promise.all(Array.from({ length: 50 }, () => get('/api/tight', token).then((answer) => answer.status)));
    expect(answers.filter((status) => status === 200)).toHaveLength(3);
    expect(answers.filter((status) => status === 429)).toHaveLength(47);
  });

  it("a user cannot take another application's budget, nor widen its own by switching users on a by-application policy", async () => {
    const { clientId } = await registerApplication(running.store);
    const tokens = await Promise.all(['ana', 'ben', 'cy', 'dee'].map((userId) => running.issue({ clientId, userId })));
    const answers = [];
    for (const token of tokens) answers.push(...(await statuses('/api/tight', token, 2)));
    expect(answers.filter((status) => status === 200)).toHaveLength(3);
  });

  it('meters by user when the policy says so: two users of one application each have their own budget', async () => {
    const { clientId } = await registerApplication(running.store);
    const ana = await running.issue({ clientId, userId: 'ana' });
    const ben = await running.issue({ clientId, userId: 'ben' });
    expect(await statuses('/api/per-user', ana, 3)).toEqual([200, 200, 429]);
    expect(await statuses('/api/per-user', ben, 3)).toEqual([200, 200, 429]);
  });

  it('answers the same through the decision listener: 429 with Retry-After and the body in a header for nginx', async () => {
    const { token } = await applicationToken();
    const port = Number(new URL(running.decisionsUrl!).port);
    const ask = () =>
      exchange(port, 'GET', '/auth-request', [
        ['X-Original-Method', 'GET'],
        ['X-Original-URI', '/api/tight/x'],
        ['Authorization', `Bearer ${token}`],
      ]);
    const admitted = await ask();
    expect(admitted.status).toBe(200);
    expect(admitted.header('ratelimit-policy')).toBe('"tight";q=1;w=5');
    await ask();
    await ask();
    const refused = await ask();
    expect(refused.status).toBe(429);
    expect(Number(refused.header('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(refused.header('x-tokengate-error-body')!).error).toBe('rate_limited');
  });
});

describe('tiers', () => {
  it('an application given another policy through the admin API is metered by it on the next requests, and "default" gives the route policy back', async () => {
    const { clientId, token } = await applicationToken();
    expect(await statuses('/api/tight', token, 4)).toEqual([200, 200, 200, 429]);
    expect((await getFrom(other, '/api/tight', token)).status).toBe(429);
    const patch = (rate_limit: string | null) =>
      adminFetch(running, `/applications/${encodeURIComponent(clientId)}`, {
        method: 'PATCH',
        body: JSON.stringify({ rate_limit }),
      });
    const updated = await patch('gold');
    expect(updated.status).toBe(200);
    expect(((await updated.json()) as { rate_limit: string }).rate_limit).toBe('gold');
    // Within a second every sidecar reads the tier again: this one, and a second one that already metered the application.
    await eventually(async () => (await get('/api/tight', token)).headers.get('ratelimit-policy') === '"gold";q=100;w=1', 2_000);
    await eventually(async () => (await getFrom(other, '/api/tight', token)).headers.get('ratelimit-policy') === '"gold";q=100;w=1', 2_000);
    expect(await statuses('/api/tight', token, 20)).toEqual(Array(20).fill(200));
    expect((await patch('default')).status).toBe(200);
    await eventually(async () => (await get('/api/tight', token)).status === 429, 2_000);
  });

  it('refuses a tier the config does not define, naming the ones it does', async () => {
    const { clientId } = await applicationToken();
    const answer = await adminFetch(running, `/applications/${encodeURIComponent(clientId)}`, {
      method: 'PATCH',
      body: JSON.stringify({ rate_limit: 'platinum' }),
    });
    expect(answer.status).toBe(400);
    expect(((await answer.json()) as { error_description: string }).error_description).toContain('tight, quota, perUser, gold');
  });
});

describe('the config', () => {
  const load = (document: object) => parseConfig(stringify(document), 'rate.yaml', {});
  const problems = (document: object): string[] => {
    try {
      load(document);
      return [];
    } catch (error) {
      return (error as ConfigError).problems.map((problem) => `${problem.path}: ${problem.message}`);
    }
  };

  it('names the key of a route whose policy does not exist, of a malformed policy and of a reserved name', () => {
    const route = { path: '/api/x', upstream: 'http://127.0.0.1:1', rateLimit: 'partner' };
    expect(problems({ rateLimits: { partners: { requestsPerSecond: 5, burst: 10 } }, routes: [route] })).toEqual([
      'routes[0].rateLimit: "partner" is not a policy of rateLimits (defined: partners)',
    ]);
    expect(problems({ rateLimits: { partners: { requestsPerSecond: 0, burst: 10 } } })[0]).toMatch(/^rateLimits\.partners\.requestsPerSecond: /);
    expect(problems({ rateLimits: { partners: { requestsPerSecond: 5 } } })[0]).toMatch(/^rateLimits\.partners\.burst/);
    expect(problems({ rateLimits: { default: { requestsPerSecond: 5, burst: 1 } } })).toEqual([
      'rateLimits.default: "default" is reserved: it gives an application its routes\' own policies back',
    ]);
    expect(problems({ rateLimits: { 'a b': { requestsPerSecond: 5, burst: 1 } } })[0]).toMatch(/^rateLimits\.a b: /);
  });

  it('gives the line of the key in the file', () => {
    const text =
      'rateLimits:\n  partners:\n    requestsPerSecond: 5\n    burst: 10\nroutes:\n  - path: /api/x\n    upstream: http://127.0.0.1:1\n    rateLimit: nope\n';
    expect(() => parseConfig(text, 'rate.yaml', {})).toThrow(/routes\[0\]\.rateLimit \(line 8\)/);
  });
});

describe('a reload', () => {
  it('applies changed policies to the running routes', async () => {
    const { token } = await applicationToken();
    expect(await statuses('/api/tight', token, 4)).toEqual([200, 200, 200, 429]);
    const config = running.tokengate.context.config;
    const outcome = running.tokengate.reload(() => ({
      ...config,
      rateLimits: { ...config.rateLimits, tight: { by: 'application', requestsPerSecond: 100, burst: 20 } },
    }));
    expect(outcome.applied).toContain('rateLimits');
    await eventually(async () => (await get('/api/tight', token)).status === 200, 2_000);
    expect((await get('/api/tight', token)).headers.get('ratelimit-policy')).toBe('"tight";q=100;w=1');
    running.tokengate.reload(() => config);
  });
});

describe('the access log', () => {
  it('gives a refusal its reason and the route, and never the token', async () => {
    const log = captureLog('info');
    const single = await startTokengate('rate-limits-log', {
      logger: log.logger,
      config: {
        logging: { requests: 'all' },
        rateLimits: { tight: rateLimits.tight },
        routes: [{ path: '/api/tight', token: 'any', upstream: upstream.url, rateLimit: 'tight' }],
      },
    });
    try {
      const { clientId } = await registerApplication(single.store);
      const token = await single.issue({ ...APPLICATION_TOKEN, clientId });
      for (let index = 0; index < 4; index += 1) await getFrom(single, '/api/tight', token).then((answer) => answer.arrayBuffer());
      await eventually(() => accessLines(log).length >= 4);
      const refused = accessLines(log).filter((entry) => entry.status === 429);
      expect(refused).toHaveLength(1);
      expect(refused[0]).toMatchObject({ reason: 'rate_limited', route: '/api/tight' });
      expect(log.text()).not.toContain(token);
    } finally {
      await single.close();
    }
  });
});

describe('a reload that removes the policy a tier names', () => {
  it("meters the application by its routes' own policies until the policy is back", async () => {
    const { clientId, token } = await applicationToken();
    await running.store.applications.put({ ...(await running.store.applications.get(clientId))!, rateLimit: 'gold' });
    expect((await get('/api/tight', token)).headers.get('ratelimit-policy')).toBe('"gold";q=100;w=1');
    const config = running.tokengate.context.config;
    const { gold: _gold, ...withoutGold } = config.rateLimits;
    running.tokengate.reload(() => ({ ...config, rateLimits: withoutGold }));
    try {
      const answers = await statuses('/api/tight', token, 4);
      expect(answers).toEqual([200, 200, 200, 429]);
      expect((await get('/api/tight', token)).headers.get('ratelimit-policy')).toBe('"tight";q=1;w=5');
    } finally {
      running.tokengate.reload(() => config);
    }
    expect((await get('/api/tight', token)).headers.get('ratelimit-policy')).toBe('"gold";q=100;w=1');
  });
});

describe('on a Redis Cluster', () => {
  it('holds two sidecars to one budget, kept in the one key the lease script runs on', async () => {
    const topology = await startClusterTopology();
    const config = { rateLimits: { tight: rateLimits.tight }, routes: [{ path: '/api/tight', token: 'any', upstream: upstream.url, rateLimit: 'tight' }] };
    try {
      const first = await startTokengate('rate-limits-cluster', { topology, config });
      const second = await startTokengate('rate-limits-cluster', { sharing: first, config });
      try {
        const { clientId } = await registerApplication(first.store);
        const token = await first.issue({ ...APPLICATION_TOKEN, clientId });
        const ask = (sidecar: RunningTokengate) =>
          fetch(`${sidecar.baseUrl}/api/tight`, { headers: { authorization: `Bearer ${token}` } }).then((answer) => answer.status);
        const answers = [];
        for (let index = 0; index < 4; index += 1) answers.push(await ask(first), await ask(second));
        expect(answers.filter((status) => status === 200)).toHaveLength(3);
        // The budget is one key, wherever its slot put it (no hash tag).
        expect(await (first.store as RedisStore).backend.read('exists', `${first.prefix}ratelimit:tight:${clientId}`)).toBe(1);
      } finally {
        await second.close();
        await first.close();
      }
    } finally {
      await topology.stop();
    }
  }, 60_000);
});

describe('on the memory store (one instance)', () => {
  it('holds the same policy with its own leases, no Redis involved', async () => {
    const single = await startTokengate('rate-limits-memory', {
      store: new MemoryStore(),
      config: { rateLimits: { tight: rateLimits.tight }, routes: [{ path: '/api/tight', token: 'any', upstream: upstream.url, rateLimit: 'tight' }] },
    });
    try {
      const { clientId } = await registerApplication(single.store);
      const token = await single.issue({ ...APPLICATION_TOKEN, clientId });
      const answers = await Promise.all(
        Array.from({ length: 10 }, () => fetch(`${single.baseUrl}/api/tight`, { headers: { authorization: `Bearer ${token}` } })),
      );
      expect(answers.map((answer) => answer.status).sort()).toEqual([200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);
    } finally {
      await single.close();
    }
  });
});
