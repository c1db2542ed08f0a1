import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore } from '../src/store/memory.js';
import { APPLICATION_TOKEN, startUpstream, type Upstream } from './support/gateway.js';
import { adminFetch, registerApplication, startTokengate, type RunningTokengate } from './support/instance.js';

/**
 * A quota is spent only by admitted requests: an application that sends a burst of concurrent
 * requests, then goes on sequentially, is admitted exactly its quota over the window, on one
 * sidecar or four, on the memory store or on Redis, through a reload and with a sidecar stopped
 * midway. Permits a sidecar leased and did not use come back to the store when the lease ends,
 * and a sidecar that was refused for the quota learns that they did.
 */

const QUOTA = 50;
const POLICIES = {
  daily: { requestsPerSecond: 1000, burst: 1000, requestsPerDay: QUOTA },
  hourly: { requestsPerSecond: 1000, burst: 1000, requestsPerHour: QUOTA },
};

let upstream: Upstream;
beforeAll(async () => {
  upstream = await startUpstream((_request, response) => response.end('ok'));
});
afterAll(async () => {
  await upstream?.close();
});

function configOf(policy: keyof typeof POLICIES) {
  return { rateLimits: POLICIES, routes: [{ path: '/api/public/events', token: 'application', upstream: upstream.url, rateLimit: policy }] };
}

async function startSidecars(count: number, store: 'memory' | 'redis', policy: keyof typeof POLICIES): Promise<RunningTokengate[]> {
  const config = configOf(policy);
  const first = await startTokengate('rl-quotas', { config, store: store === 'memory' ? new MemoryStore() : undefined });
  const sidecars = [first];
  for (let index = 1; index < count; index += 1) sidecars.push(await startTokengate('rl-quotas', { config, sharing: first }));
  return sidecars;
}

async function closeAll(sidecars: RunningTokengate[]): Promise<void> {
  for (const sidecar of sidecars.slice(1)) await sidecar.close();
  await sidecars[0]!.close();
}

async function send(sidecar: RunningTokengate, token: string): Promise<number> {
  const answer = await fetch(`${sidecar.baseUrl}/api/public/events`, { headers: { authorization: `Bearer ${token}` } });
  await answer.arrayBuffer();
  return answer.status;
}

async function quotaLeft(sidecar: RunningTokengate, clientId: string, policy: string): Promise<number | null> {
  const answer = await adminFetch(sidecar, `/applications/${encodeURIComponent(clientId)}/rate-limit`);
  const { budgets } = (await answer.json()) as { budgets: Array<{ policy: string; quota_left: number | null }> };
  return budgets.find((budget) => budget.policy === policy)?.quota_left ?? null;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Scenario {
  sidecars: RunningTokengate[];
  token: string;
  clientId: string;
  policy: keyof typeof POLICIES;
}

async function scenario(count: number, store: 'memory' | 'redis', policy: keyof typeof POLICIES): Promise<Scenario> {
  const sidecars = await startSidecars(count, store, policy);
  const { clientId } = await registerApplication(sidecars[0]!.store);
  const token = await sidecars[0]!.issue({ ...APPLICATION_TOKEN, clientId });
  return { sidecars, token, clientId, policy };
}

/** `concurrent` requests at once, spread over the live sidecars; the number admitted. */
async function burst({ sidecars, token }: Scenario, concurrent: number): Promise<number> {
  const statuses = await Promise.all(Array.from({ length: concurrent }, (_, index) => send(sidecars[index % sidecars.length]!, token)));
  expect(statuses.filter((status) => status !== 200 && status !== 429)).toEqual([]);
  return statuses.filter((status) => status === 200).length;
}

/**
 * Sequential requests over the live sidecars, round after round, until the quota is spent or
 * 12 s have passed: permits another sidecar holds come back within a few seconds.
 */
async function sequentialUntilSpent({ sidecars, token }: Scenario, admittedBefore: number): Promise<number> {
  let admitted = admittedBefore;
  const deadline = Date.now() + 12_000;
  while (admitted < QUOTA && Date.now() < deadline) {
    for (let round = 0; round < 15; round += 1) {
      for (const sidecar of sidecars) if ((await send(sidecar, token)) === 200) admitted += 1;
    }
    if (admitted < QUOTA) await sleep(300);
  }
  return admitted;
}

/** The quota is spent and stays spent: a last round later is all 429 quota_exceeded, and the store says 0 left. */
async function expectSpent({ sidecars, token, clientId, policy }: Scenario): Promise<void> {
  await sleep(1_600);
  for (const sidecar of sidecars) {
    const answer = await fetch(`${sidecar.baseUrl}/api/public/events`, { headers: { authorization: `Bearer ${token}` } });
    expect(answer.status).toBe(429);
    expect(((await answer.json()) as { error: string }).error).toBe('quota_exceeded');
  }
  expect(await quotaLeft(sidecars[0]!, clientId, policy)).toBe(0);
}

describe.each([
  { store: 'memory' as const, count: 1 },
  { store: 'redis' as const, count: 1 },
  { store: 'redis' as const, count: 4 },
])('a daily quota of 50 on the $store store with $count sidecar(s)', ({ store, count }) => {
  it.each([5, 20, 100])(
    'admits exactly 50 over the day after a burst of %i concurrent requests',
    async (concurrent) => {
      const running = await scenario(count, store, 'daily');
      try {
        const first = await burst(running, concurrent);
        // One sidecar holds the whole quota; of four, one may be refused permits another holds for a moment.
        if (count === 1) expect(first).toBe(Math.min(concurrent, QUOTA));
        else expect(first).toBeLessThanOrEqual(Math.min(concurrent, QUOTA));
        // The permits leased and not used are back in the store once the leases end.
        await sleep(2_000);
        expect(await quotaLeft(running.sidecars[0]!, running.clientId, 'daily')).toBe(QUOTA - first);
        expect(await sequentialUntilSpent(running, first)).toBe(QUOTA);
        await expectSpent(running);
      } finally {
        await closeAll(running.sidecars);
      }
    },
    40_000,
  );
});

describe('a quota across a reload and a stopped sidecar', () => {
  it('on one sidecar, a reload that changes the policy gives its leased permits back', async () => {
    const running = await scenario(1, 'redis', 'daily');
    try {
      const first = await burst(running, 5);
      const tokengate = running.sidecars[0]!.tokengate;
      const config = tokengate.context.config;
      const outcome = tokengate.reload(() => ({
        ...config,
        rateLimits: { ...config.rateLimits, daily: { ...config.rateLimits.daily!, requestsPerSecond: 999 } },
      }));
      expect(outcome.applied).toContain('rateLimits');
      expect(await sequentialUntilSpent(running, first)).toBe(QUOTA);
      await expectSpent(running);
    } finally {
      await closeAll(running.sidecars);
    }
  }, 40_000);

  it('on four sidecars, one stopped after the burst: the others are admitted the rest of the quota, exactly', async () => {
    const running = await scenario(4, 'redis', 'daily');
    try {
      const first = await burst(running, 20);
      const stopped = running.sidecars.splice(1, 1)[0]!;
      await stopped.close();
      expect(await sequentialUntilSpent(running, first)).toBe(QUOTA);
      await expectSpent(running);
    } finally {
      await closeAll(running.sidecars);
    }
  }, 40_000);

  it.each([
    { store: 'memory' as const, count: 1 },
    { store: 'redis' as const, count: 4 },
  ])(
    'an hourly quota of 50 on the $store store with $count sidecar(s) admits exactly 50 after a burst of 20',
    async ({ store, count }) => {
      const running = await scenario(count, store, 'hourly');
      try {
        const first = await burst(running, 20);
        expect(await sequentialUntilSpent(running, first)).toBe(QUOTA);
        await expectSpent(running);
      } finally {
        await closeAll(running.sidecars);
      }
    },
    40_000,
  );
});
