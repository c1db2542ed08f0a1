import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateTagKey } from '../src/token/token-value.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { generateProviderKey, TestIdentityProvider } from './support/identity-provider.js';
import {
  adminFetch,
  clientCredentials,
  postForm,
  registerApplication,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';
import { valueOf } from './support/metrics.js';
import { freePort } from './support/ports.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './support/redis.js';
import { EVENT, TestTransmitter, type TestStream } from './support/transmitter.js';
import { eventually } from './support/wait.js';

/**
 * The Shared Signals receiver with poll delivery (RFC 8936) on a stream tokengate configures
 * through the transmitter's configuration endpoint, across sidecars of one deployment: one
 * sidecar polls at a time, acknowledges only what it applied, and the events survive a
 * transmitter outage, acknowledgements lost on the way and sidecars stopped and started, each
 * applied exactly once (counted). The stream's status is honoured.
 */

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
/** The standby sidecars try the lease this often (src/shared-signals/stream-worker.ts); a takeover is awaited within a few of them. */
const TAKEOVER_MS = 20_000;

let idp: TestIdentityProvider;
let transmitter: TestTransmitter;
let upstream: Upstream;
let app: TestApplication;
let issuerUrl: string;
let api: string;
let port: number;
let prefix: string;
let tagKey: string;
let config: Record<string, unknown>;
/** The running sidecars, by name; a stopped one is gone from here. */
const sidecars = new Map<string, RunningTokengate>();
/** Events applied by sidecars stopped since (their counters go with them). */
let appliedByStopped = 0;

async function startSidecar(name: string): Promise<RunningTokengate> {
  const sidecar = await startTokengate(`ssf-poll-${name}`, { store: createTestRedisStore(prefix), config, ...(sidecars.size === 0 ? { port } : {}) });
  sidecars.set(name, sidecar);
  return sidecar;
}

async function stopSidecar(name: string): Promise<void> {
  const sidecar = sidecars.get(name)!;
  sidecars.delete(name);
  await sidecar.close();
  appliedByStopped += await appliedOn(sidecar);
}

beforeAll(async () => {
  [idp, upstream] = await Promise.all([TestIdentityProvider.start(), startUpstream()]);
  port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  api = `${issuerUrl}/api`;
  transmitter = TestTransmitter.on(idp, issuerUrl);
  prefix = uniquePrefix('ssf-poll');
  tagKey = generateTagKey();
  config = {
    issuer: { issuerUrl, tokenTagKey: tagKey },
    resources: [{ identifier: api }],
    routes: [{ path: '/api/tickets', token: 'user', scopes: ['public'], upstream: upstream.url, resource: api }],
    identityProviders: [
      idp.config({
        jitUsers: true,
        sharedSignals: {
          name: 'company',
          configurationUrl: transmitter.configurationUrl,
          delivery: 'poll',
          transmitterAuthorization: transmitter.managementAuthorization,
          pollIntervalMs: 100,
          statusIntervalSeconds: 1,
        },
      }),
    ],
  };
  await startSidecar('a');
  await startSidecar('b');
  app = await registerApplication(sidecars.get('a')!.store, { scopes: ['public'] });
});

afterAll(async () => {
  for (const sidecar of sidecars.values()) await sidecar.close();
  await upstream?.close();
  await idp?.close();
  if (prefix !== undefined) await deletePrefix(prefix);
});

const running = () => [...sidecars.values()];
const appliedOn = (sidecar: RunningTokengate) =>
  valueOf(sidecar.tokengate.context.metrics.sharedSignalsEvents, { provider: 'company', type: 'session-revoked', outcome: 'applied' });
const pollsOf = (sidecar: RunningTokengate, result = 'answered') =>
  valueOf(sidecar.tokengate.context.metrics.sharedSignalsPolls, { provider: 'company', result });
const outcomes = async (type: string, outcome: string) =>
  (
    await Promise.all(running().map((sidecar) => valueOf(sidecar.tokengate.context.metrics.sharedSignalsEvents, { provider: 'company', type, outcome })))
  ).reduce((a, b) => a + b, 0);
/** Session revocations applied by every sidecar that ever ran. */
const appliedEverywhere = async () => appliedByStopped + (await Promise.all(running().map(appliedOn))).reduce((a, b) => a + b, 0);

/** The stream tokengate created (one, however many sidecars). */
function theStream(): TestStream {
  expect(transmitter.streams.size).toBe(1);
  return [...transmitter.streams.values()][0]!;
}

async function tokenFor(subject: string): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const assertion = await idp.assertion({
    sub: subject,
    email: `${subject}@company.example`,
    aud: issuerUrl,
    client_id: app.clientId,
    resource: api,
    iat: now,
    exp: now + 120,
  });
  const response = await postForm(`${running()[0]!.baseUrl}/oauth/token`, { grant_type: JWT_BEARER, assertion, ...clientCredentials(app) });
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
}

async function statusEverywhere(token: string): Promise<number[]> {
  return Promise.all(
    running().map(async (sidecar) => {
      const response = await fetch(`${sidecar.baseUrl}/api/tickets`, { headers: { authorization: `Bearer ${token}` } });
      await response.body?.cancel();
      return response.status;
    }),
  );
}

const refusedEverywhere = async (token: string) => (await statusEverywhere(token)).every((status) => status === 401);

/** A subject with a token good at every sidecar, and its session-revoked event queued at the transmitter. */
async function queueRevocation(): Promise<{ token: string; jti: string }> {
  const subject = `idp-${randomUUID()}`;
  const token = await tokenFor(subject);
  expect(await statusEverywhere(token)).toEqual(running().map(() => 200));
  const minted = await transmitter.set(EVENT.sessionRevoked, {}, { format: 'iss_sub', iss: idp.issuer, sub: subject });
  transmitter.enqueue(theStream().streamId, minted);
  return { token, jti: minted.jti };
}

const acknowledgedTimes = (jti: string) => transmitter.acknowledged.filter((each) => each === jti).length;

async function listing(): Promise<Record<string, unknown>> {
  const answer = (await (await adminFetch(running()[0]!, '/identity-providers')).json()) as {
    identityProviders: Array<{ sharedSignals: Record<string, unknown> }>;
  };
  return answer.identityProviders[0]!.sharedSignals;
}

describe('a stream tokengate configures', () => {
  it('is created once for every sidecar, with the events tokengate acts on, and verified', async () => {
    await eventually(() => transmitter.streams.size > 0, 10_000);
    const stream = theStream();
    expect(stream.delivery.method).toBe('urn:ietf:rfc:8936');
    expect(stream.eventsRequested).toContain(EVENT.sessionRevoked);
    expect(stream.eventsRequested).toContain(EVENT.accountDisabled);
    await eventually(async () => (await listing()).verifiedAt !== null, 10_000);
    expect(await listing()).toMatchObject({
      name: 'company',
      delivery: 'poll',
      stream: 'configured',
      streamId: stream.streamId,
      status: 'enabled',
      problem: null,
    });
    expect(transmitter.unauthorizedCalls).toBe(0);
  });

  it('is polled by one sidecar at a time', async () => {
    await eventually(async () => (await Promise.all(running().map((sidecar) => pollsOf(sidecar)))).some((polls) => polls > 3), 10_000);
    const polls = await Promise.all(running().map((sidecar) => pollsOf(sidecar)));
    expect(polls.filter((count) => count > 0)).toHaveLength(1);
  });
});

describe('polled events', () => {
  it('end every token of the subject on every sidecar; each is acknowledged once, after it was applied', async () => {
    const { token, jti } = await queueRevocation();
    await eventually(() => refusedEverywhere(token), 5_000);
    await eventually(() => acknowledgedTimes(jti) === 1, 5_000);
    expect(theStream().queue.has(jti)).toBe(false);
  });

  it('are applied once when acknowledgements are lost and the transmitter delivers them again', async () => {
    const applied = await appliedEverywhere();
    const duplicates = await outcomes('session-revoked', 'duplicate');
    transmitter.droppingAcks = true;
    const { token, jti } = await queueRevocation();
    await eventually(() => refusedEverywhere(token), 5_000);
    // Delivered again, and again acknowledged into the void.
    await eventually(async () => (await outcomes('session-revoked', 'duplicate')) >= duplicates + 2, 5_000);
    transmitter.droppingAcks = false;
    await eventually(() => acknowledgedTimes(jti) === 1, 5_000);
    expect(await appliedEverywhere()).toBe(applied + 1);
  });

  it('of a type tokengate does not act on are acknowledged and counted, once: no error loop', async () => {
    const before = await outcomes('other', 'unknown_type');
    const minted = await transmitter.set('https://schemas.example.com/event-type/device-moved', {}, { format: 'opaque', id: 'x' });
    transmitter.enqueue(theStream().streamId, minted);
    await eventually(() => acknowledgedTimes(minted.jti) === 1, 5_000);
    expect(await outcomes('other', 'unknown_type')).toBe(before + 1);
    expect(transmitter.setErrs.has(minted.jti)).toBe(false);
  });

  it('refused (a forged SET) are reported in setErrs with the RFC 8935 error, not delivered again, and change nothing', async () => {
    const subject = `idp-${randomUUID()}`;
    const token = await tokenFor(subject);
    const forged = await transmitter.set(EVENT.sessionRevoked, {}, { format: 'iss_sub', iss: idp.issuer, sub: subject }, { key: await generateProviderKey() });
    transmitter.enqueue(theStream().streamId, forged);
    await eventually(() => transmitter.setErrs.has(forged.jti), 5_000);
    expect(transmitter.setErrs.get(forged.jti)).toEqual({
      err: 'invalid_key',
      description: "The SET's signature does not verify with the identity provider's key.",
    });
    expect(theStream().queue.has(forged.jti)).toBe(false);
    expect(acknowledgedTimes(forged.jti)).toBe(0);
    expect(await statusEverywhere(token)).toEqual(running().map(() => 200));
  });
});

describe('the poller', () => {
  it('survives a transmitter outage, waiting longer after each failure, and then applies every event held meanwhile, once', async () => {
    const applied = await appliedEverywhere();
    const failedBefore = (await Promise.all(running().map((sidecar) => pollsOf(sidecar, 'failed')))).reduce((a, b) => a + b, 0);
    transmitter.pollOutage = true;
    const arrivalsBefore = transmitter.idp.server.arrivals.get('/ssf/poll')?.length ?? 0;
    const queued = [await queueRevocation(), await queueRevocation(), await queueRevocation()];
    const failed = async () => (await Promise.all(running().map((sidecar) => pollsOf(sidecar, 'failed')))).reduce((a, b) => a + b, 0) - failedBefore;
    await eventually(async () => (await failed()) >= 4, 15_000);
    transmitter.pollOutage = false;
    // Each wait at least doubles the last (from pollIntervalMs, 100 ms): the transmitter is not hammered while it is down.
    const arrivals = transmitter.idp.server.arrivals.get('/ssf/poll')!.slice(arrivalsBefore, arrivalsBefore + 4);
    const gaps = arrivals.slice(1).map((at, index) => at - arrivals[index]!);
    gaps.forEach((gap, index) => expect(gap).toBeGreaterThanOrEqual(100 * 2 ** (index + 1) - 20));
    for (const { token } of queued) await eventually(() => refusedEverywhere(token), 15_000);
    await eventually(() => queued.every(({ jti }) => acknowledgedTimes(jti) === 1), 5_000);
    expect(await appliedEverywhere()).toBe(applied + queued.length);
  });

  it('is taken over when its sidecar stops, and events queued meanwhile and around restarts are each applied once', { timeout: 120_000 }, async () => {
    const applied = await appliedEverywhere();
    const queued: Array<{ token: string; jti: string }> = [];
    for (const round of [1, 2]) {
      const polling = await holder();
      // Applied by the sidecar about to stop, never acknowledged: the next poller receives it again.
      transmitter.droppingAcks = true;
      const unacknowledged = await queueRevocation();
      queued.push(unacknowledged);
      await eventually(() => refusedEverywhere(unacknowledged.token), 5_000);
      queued.push(await queueRevocation());
      const name = [...sidecars.entries()].find(([, sidecar]) => sidecar === polling)![0];
      await stopSidecar(name);
      transmitter.droppingAcks = false;
      queued.push(await queueRevocation());
      // Another sidecar takes the lease and polls.
      const taker = running()[0]!;
      const pollsBefore = await pollsOf(taker);
      await eventually(async () => (await pollsOf(taker)) > pollsBefore, TAKEOVER_MS);
      await startSidecar(`${name}-${round}`);
      queued.push(await queueRevocation());
    }
    for (const { token } of queued) await eventually(() => refusedEverywhere(token), 5_000);
    await eventually(() => queued.every(({ jti }) => acknowledgedTimes(jti) === 1), 5_000);
    expect(await appliedEverywhere()).toBe(applied + queued.length);
  });
});

/** The sidecar polling now: the one whose poll count moves. */
async function holder(): Promise<RunningTokengate> {
  let found: RunningTokengate | undefined;
  await eventually(async () => {
    const before = await Promise.all(running().map((sidecar) => pollsOf(sidecar)));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const after = await Promise.all(running().map((sidecar) => pollsOf(sidecar)));
    const moving = running().filter((_sidecar, index) => after[index]! > before[index]!);
    found = moving.length === 1 ? moving[0] : undefined;
    return found !== undefined;
  }, TAKEOVER_MS);
  return found!;
}

describe("the stream's status", () => {
  it('paused at the transmitter: not polled while paused, polled again when enabled, the events held meanwhile applied', async () => {
    const stream = theStream();
    const reads = transmitter.statusReads;
    await transmitter.updateStatus(stream, 'paused', false);
    // A status read that began after the change has answered: the poller knows.
    await eventually(() => transmitter.statusReads >= reads + 2, 10_000);
    const polls = transmitter.polls;
    await eventually(() => transmitter.statusReads >= reads + 4, 10_000);
    expect(transmitter.polls).toBe(polls);
    expect(await listing()).toMatchObject({ status: 'paused' });
    const { token } = await queueRevocation();
    await transmitter.updateStatus(stream, 'enabled');
    await eventually(() => refusedEverywhere(token), 10_000);
    await eventually(async () => (await listing()).status === 'enabled', 5_000);
  });
});
