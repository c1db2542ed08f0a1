import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CachedTokenStore } from '../src/store/cached.js';
import { generateTagKey } from '../src/token/token-value.js';
import { observationsOf, valueOf } from './support/metrics.js';
import { clientCredentials, postForm, registerApplication, startTokengate, type RunningTokengate, type TestApplication } from './support/instance.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './support/redis.js';
import { eventually } from './support/wait.js';

// Two tokengate instances (two sidecars) over one Redis prefix, talked to over HTTP.
const prefix = uniquePrefix('cache-instances');
const tokenTagKey = generateTagKey();
let a: RunningTokengate;
let b: RunningTokengate;
let application: TestApplication;

beforeAll(async () => {
  const start = (label: string) => startTokengate(label, { store: createTestRedisStore(prefix), config: { issuer: { tokenTagKey } } });
  [a, b] = await Promise.all([start('cache-a'), start('cache-b')]);
  await Promise.all([a, b].map(subscribed));
  application = await registerApplication(a.store);
});
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await deletePrefix(prefix);
});

/** Until its revocation subscription is up an instance reads every token from Redis; tests wait for it. */
async function subscribed(instance: RunningTokengate): Promise<void> {
  const store = instance.tokengate.context.store;
  expect(store).toBeInstanceOf(CachedTokenStore);
  await (store as CachedTokenStore).subscribed;
}

const issue = async (instance: RunningTokengate): Promise<string> => {
  const response = await postForm(`${instance.baseUrl}/oauth/token`, { grant_type: 'client_credentials', ...clientCredentials(application) });
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
};
const active = async (instance: RunningTokengate, token: string): Promise<boolean> => {
  const response = await postForm(`${instance.baseUrl}/oauth/introspect`, { token, ...clientCredentials(application) });
  expect(response.status).toBe(200);
  return ((await response.json()) as { active: boolean }).active;
};

describe('two instances sharing one Redis', () => {
  it('a token revoked through one instance\'s /oauth/revoke is refused by the other, which had it cached', async () => {
    const token = await issue(a);
    expect(await active(b, token)).toBe(true);
    const hits = await valueOf(b.tokengate.context.metrics.cacheHits);
    expect(await active(b, token)).toBe(true);
    expect(await valueOf(b.tokengate.context.metrics.cacheHits)).toBe(hits + 1);

    const revoked = await postForm(`${a.baseUrl}/oauth/revoke`, { token, ...clientCredentials(application) });
    expect(revoked.status).toBe(200);
    expect(await active(a, token)).toBe(false);
    await eventually(async () => !(await active(b, token)));
    expect(await valueOf(b.tokengate.context.metrics.revocationMessages)).toBeGreaterThanOrEqual(1);
    expect(await observationsOf(b.tokengate.context.metrics.revocationDelay)).toBeGreaterThanOrEqual(1);
  });

  it('a token issued by one instance is accepted by the other at once', async () => {
    const token = await issue(a);
    expect(await active(b, token)).toBe(true);
  });
});
