import type { AccessTokenRecord, Store } from '../../src/store/store.js';
import { USER_TOKEN } from './gateway.js';
import type { RedisNode } from './redis-cluster.js';
import {
  basicAuthorization,
  issueAuthorizationCode,
  postForm,
  registerApplication,
  registerUser,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './instance.js';
import { FormClient, authorizePath, createUser, formFields } from './issuer.js';
import type { TestTopology } from './topologies.js';
import { sleep } from './wait.js';

/**
 * Traffic through two sidecars while the store fails over, and what the clients saw. Every
 * answer is counted by what the token was when the request was sent:
 * - valid: issued (the token endpoint answered 200) and not sent to /oauth/revoke;
 * - revoked: /oauth/revoke answered 200 for it at least REVOCATION_SETTLE_MS before the request
 *   (the other sidecar hears of it through the revocation feed, within milliseconds);
 * - unknown: minted with the deployment's key, never stored.
 * Authorization codes and refresh tokens are each presented twice at once, one to each sidecar:
 * a code or refresh token that earns two 200s was used twice.
 */

export const ROUTE = '/api/public/me';
const REVOCATION_SETTLE_MS = 200;

type Kind = 'valid' | 'revoked' | 'unknown';

export interface FailoverSidecars {
  first: RunningTokengate;
  second: RunningTokengate;
  application: TestApplication;
  /** Saves an authorization code for a user of the store, as /oauth/authorize does after consent. */
  newCode(): Promise<string>;
  /** A user of the store who signs in on the authorization page with this password. */
  user: { email: string; password: string };
}

/**
 * Two sidecars on one store topology, both guarding ROUTE, with an application and a user who
 * signs in on the authorization page: what runFailover drives. Each started sidecar is pushed on
 * `sidecars` as soon as it runs, for the test file to close.
 */
export async function startFailoverSidecars(
  name: string,
  topology: TestTopology,
  upstreamUrl: string,
  sidecars: RunningTokengate[],
): Promise<FailoverSidecars> {
  const config = {
    routes: [{ path: ROUTE, methods: ['GET'], token: 'any', scopes: ['public'], upstream: upstreamUrl }],
    issuer: { loginThrottle: { maxAttemptsPerAccount: 1_000, maxAttemptsPerAddress: 1_000 } },
  };
  const first = await startTokengate(name, { topology, config });
  sidecars.push(first);
  const second = await startTokengate(`${name}-2`, { sharing: first, config });
  sidecars.push(second);
  const application = await registerApplication(first.store);
  const userId = await registerUser(first.store);
  const user = { email: `${userId}-signs-in@example.com`, password: `${name}-password` };
  await createUser(first.store, `${userId}-signs-in`, user.email, user.password);
  return { first, second, application, user, newCode: async () => (await issueAuthorizationCode(first, application, userId)).code };
}

/** Kinds of writes, each counted by answer. */
export type WriteKind = 'issuance' | 'revocations' | 'redemptions' | 'refreshes' | 'signIns';

export interface FailoverTimeline {
  /** ms from the kill until the set-up served every slot again without the killed node. */
  promotedMs: number;
  /** ms from the kill until the killed node was started again (the promoted master was alone until then). */
  restartedMs: number;
  /** ms from the kill until the killed node served again as a replica. */
  replicaBackMs: number;
}

export interface FailoverReport {
  timeline: FailoverTimeline;
  gateway: Record<Kind, Record<number, number>>;
  /** The gateway's answers to requests sent between the kill and the promotion. */
  gatewayWhileFailing: Record<Kind, Record<number, number>>;
  issuance: Record<number, number>;
  revocations: Record<number, number>;
  redemptions: Record<number, number>;
  refreshes: Record<number, number>;
  signIns: Record<number, number>;
  /** Writes sent after the promotion while the promoted master had no replica, by answer. */
  writesWhileAlone: Record<WriteKind, Record<number, number>>;
  validRefused: number;
  revokedAccepted: number;
  codesRedeemedTwice: number;
  refreshTokensUsedTwice: number;
  unavailable: number;
  /** ms after the kill of the first and last 503, of any request; null without one. */
  firstUnavailableMs: number | null;
  lastUnavailableMs: number | null;
  /** Answers other than 200, 400 (a spent code or refresh token), 401 and 503. */
  unexpected: Array<{ what: string; status: number }>;
  /** After the failover, valid tokens (some issued during it) refused by a sidecar, revoked ones accepted. */
  afterwards: { validRefused: number; revokedAccepted: number; valid: number; revoked: number };
}

const count = (table: Record<number, number>, status: number) => (table[status] = (table[status] ?? 0) + 1);

async function status(url: string, init?: RequestInit): Promise<number> {
  try {
    const response = await fetch(url, init);
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

async function issueToken(sidecar: RunningTokengate, application: TestApplication): Promise<{ status: number; token: string | null; body: unknown }> {
  try {
    const response = await postForm(
      `${sidecar.baseUrl}/oauth/token`,
      { grant_type: 'client_credentials' },
      { authorization: basicAuthorization(application.clientId, application.clientSecret!) },
    );
    const body = (await response.json()) as { access_token?: string };
    return { status: response.status, token: response.status === 200 ? body.access_token! : null, body };
  } catch {
    return { status: 0, token: null, body: null };
  }
}

async function revoke(sidecar: RunningTokengate, application: TestApplication, token: string): Promise<number> {
  return status(`${sidecar.baseUrl}/oauth/revoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basicAuthorization(application.clientId, application.clientSecret!) },
    body: new URLSearchParams({ token }).toString(),
  });
}

async function redeem(
  sidecar: RunningTokengate,
  application: TestApplication,
  parameters: Record<string, string>,
): Promise<{ status: number; refresh: string | null }> {
  try {
    const response = await postForm(`${sidecar.baseUrl}/oauth/token`, parameters, {
      authorization: basicAuthorization(application.clientId, application.clientSecret!),
    });
    const body = (await response.json()) as { refresh_token?: string };
    return { status: response.status, refresh: response.status === 200 ? (body.refresh_token ?? null) : null };
  } catch {
    return { status: 0, refresh: null };
  }
}

/** The authorization page, then the sign-in form: 303 once signed in. */
async function signIn(sidecar: RunningTokengate, application: TestApplication, user: { email: string; password: string }): Promise<number> {
  try {
    const browser = new FormClient(sidecar.baseUrl);
    const page = await browser.get(
      authorizePath({ client_id: application.clientId, redirect_uri: application.redirectUri, response_type: 'code', state: 's' }),
    );
    if (page.status !== 200) return page.status;
    return (await browser.post('/oauth/authorize/login', { ...formFields(page.text), email: user.email, password: user.password })).status;
  } catch {
    return 0;
  }
}

function pick<T>(values: readonly T[]): T | undefined {
  return values.length === 0 ? undefined : values[Math.floor(Math.random() * values.length)];
}

/**
 * Runs the traffic, calls `fail` (kill a master), waits for the promotion, leaves the promoted
 * master alone for `aloneMs`, brings the killed node back as its replica (`replicaBack`), keeps
 * the traffic going a little longer, then checks every token once more on both sidecars.
 */
export async function runFailover(
  sidecars: FailoverSidecars,
  steps: { fail(): Promise<void>; promoted(): Promise<void>; aloneMs: number; replicaBack(): Promise<void> },
): Promise<FailoverReport> {
  const { first, second, application } = sidecars;
  const both = [first, second];
  const gatewayUrl = (sidecar: RunningTokengate) => `${sidecar.baseUrl}${ROUTE}`;
  const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

  // Before: valid tokens (half of them cached by both sidecars), revoked ones heard by both.
  const valid: string[] = [];
  for (let index = 0; index < 60; index++) {
    const issued = await issueToken(both[index % 2]!, application);
    if (issued.token === null) throw new Error(`could not issue a token before the failover: ${JSON.stringify(issued.body)}`);
    valid.push(issued.token);
  }
  for (const token of valid.slice(0, 30))
    for (const sidecar of both) if ((await status(gatewayUrl(sidecar), bearer(token))) !== 200) throw new Error('a fresh token was refused');
  const revokedAt = new Map<string, number>();
  for (let index = 0; index < 20; index++) {
    const issued = await issueToken(first, application);
    await status(gatewayUrl(second), bearer(issued.token!));
    if ((await revoke(first, application, issued.token!)) !== 200) throw new Error('could not revoke a token before the failover');
    revokedAt.set(issued.token!, performance.now());
  }
  for (const token of revokedAt.keys()) for (const sidecar of both) while ((await status(gatewayUrl(sidecar), bearer(token))) !== 401) await sleep(10);
  const unknown = Array.from({ length: 20 }, () => first.tokengate.context.minter.mint());
  const codes: string[] = [];
  for (let index = 0; index < 30; index++) codes.push(await sidecars.newCode());
  const refreshTokens: string[] = [];
  for (let index = 0; index < 30; index++) {
    const redeemed = await redeem(first, application, {
      grant_type: 'authorization_code',
      code: await sidecars.newCode(),
      redirect_uri: application.redirectUri,
    });
    if (redeemed.refresh === null) throw new Error('could not redeem a code before the failover');
    refreshTokens.push(redeemed.refresh);
  }
  // Tokens whose revocation was asked for but not acknowledged: neither valid nor revoked.
  const uncertain = new Set<string>();

  const report: FailoverReport = {
    timeline: { promotedMs: 0, restartedMs: 0, replicaBackMs: 0 },
    gateway: { valid: {}, revoked: {}, unknown: {} },
    gatewayWhileFailing: { valid: {}, revoked: {}, unknown: {} },
    issuance: {},
    revocations: {},
    redemptions: {},
    refreshes: {},
    signIns: {},
    writesWhileAlone: { issuance: {}, revocations: {}, redemptions: {}, refreshes: {}, signIns: {} },
    validRefused: 0,
    revokedAccepted: 0,
    codesRedeemedTwice: 0,
    refreshTokensUsedTwice: 0,
    unavailable: 0,
    firstUnavailableMs: null,
    lastUnavailableMs: null,
    unexpected: [],
    afterwards: { validRefused: 0, revokedAccepted: 0, valid: 0, revoked: 0 },
  };
  let killedAt = Number.POSITIVE_INFINITY;
  let promotedAt = Number.POSITIVE_INFINITY;
  let restartedAt = Number.POSITIVE_INFINITY;
  const wrote = (kind: WriteKind, answer: number, sentAt: number) => {
    count(report[kind], answer);
    if (sentAt >= promotedAt && sentAt < restartedAt) count(report.writesWhileAlone[kind], answer);
  };
  const saw = (what: string, answer: number, sentAt: number) => {
    if (answer === 503) {
      report.unavailable += 1;
      if (sentAt >= killedAt) {
        const after = Math.round(performance.now() - killedAt);
        report.firstUnavailableMs ??= after;
        report.lastUnavailableMs = Math.max(report.lastUnavailableMs ?? 0, after);
      }
    } else if (![200, 400, 401].includes(answer)) report.unexpected.push({ what, status: answer });
  };

  let running = true;
  const gatewayWorker = async () => {
    while (running) {
      const kind = pick<Kind>(['valid', 'valid', 'revoked', 'unknown'])!;
      const token = kind === 'valid' ? pick(valid) : kind === 'revoked' ? pick([...revokedAt.keys()]) : pick(unknown);
      const sidecar = pick(both)!;
      if (token === undefined) continue;
      const sentAt = performance.now();
      const stillValid = kind === 'valid' && !uncertain.has(token) && !revokedAt.has(token);
      const settledRevoked = kind === 'revoked' && sentAt - revokedAt.get(token)! >= REVOCATION_SETTLE_MS;
      const answer = await status(gatewayUrl(sidecar), bearer(token));
      count(report.gateway[kind], answer);
      if (sentAt >= killedAt && sentAt < promotedAt) count(report.gatewayWhileFailing[kind], answer);
      saw(`gateway ${kind}`, answer, sentAt);
      if (stillValid && answer === 401 && !uncertain.has(token) && !revokedAt.has(token)) report.validRefused += 1;
      if (settledRevoked && answer === 200) report.revokedAccepted += 1;
    }
  };
  const issuanceWorker = async () => {
    while (running) {
      const sentAt = performance.now();
      const issued = await issueToken(pick(both)!, application);
      wrote('issuance', issued.status, sentAt);
      saw('issuance', issued.status, sentAt);
      if (issued.token !== null) valid.push(issued.token);
      await sleep(5);
    }
  };
  const revocationWorker = async () => {
    while (running) {
      if (valid.length <= 40) {
        await sleep(20);
        continue;
      }
      const [token] = valid.splice(Math.floor(Math.random() * valid.length), 1);
      if (token === undefined) continue;
      uncertain.add(token);
      const sentAt = performance.now();
      const answer = await revoke(pick(both)!, application, token);
      wrote('revocations', answer, sentAt);
      saw('revocation', answer, sentAt);
      if (answer === 200) {
        uncertain.delete(token);
        revokedAt.set(token, performance.now());
      }
      await sleep(60);
    }
  };
  const signInWorker = async () => {
    while (running) {
      const sentAt = performance.now();
      const answer = await signIn(pick(both)!, application, sidecars.user);
      wrote('signIns', answer, sentAt);
      saw('sign-in', answer === 303 ? 200 : answer, sentAt);
      await sleep(20);
    }
  };
  const codeUses = new Map<string, number>();
  // Every other code is presented to one sidecar only: a code presented twice revokes its
  // family, refresh token included, so those feed the refresh worker with live refresh tokens.
  let presentTwice = false;
  const codeWorker = async () => {
    while (running) {
      const code = codes.shift() ?? (await sidecars.newCode().catch(() => null));
      if (code === null) {
        await sleep(20);
        continue;
      }
      const sentAt = performance.now();
      presentTwice = !presentTwice;
      const answers = await Promise.all(
        (presentTwice ? both : [pick(both)!]).map((sidecar) =>
          redeem(sidecar, application, { grant_type: 'authorization_code', code, redirect_uri: application.redirectUri }),
        ),
      );
      for (const answer of answers) {
        wrote('redemptions', answer.status, sentAt);
        saw('code redemption', answer.status, sentAt);
        if (answer.status === 200) codeUses.set(code, (codeUses.get(code) ?? 0) + 1);
        if (answer.refresh !== null) refreshTokens.push(answer.refresh);
      }
      await sleep(10);
    }
  };
  const refreshUses = new Map<string, number>();
  const refreshWorker = async () => {
    while (running) {
      const refreshToken = refreshTokens.shift();
      if (refreshToken === undefined) {
        await sleep(20);
        continue;
      }
      const sentAt = performance.now();
      const answers = await Promise.all(both.map((sidecar) => redeem(sidecar, application, { grant_type: 'refresh_token', refresh_token: refreshToken })));
      for (const answer of answers) {
        wrote('refreshes', answer.status, sentAt);
        saw('refresh', answer.status, sentAt);
        if (answer.status === 200) refreshUses.set(refreshToken, (refreshUses.get(refreshToken) ?? 0) + 1);
        if (answer.refresh !== null) refreshTokens.push(answer.refresh);
      }
      await sleep(10);
    }
  };

  const workers = [gatewayWorker(), gatewayWorker(), gatewayWorker(), issuanceWorker(), revocationWorker(), codeWorker(), refreshWorker(), signInWorker()];
  try {
    await sleep(500);
    killedAt = performance.now();
    await steps.fail();
    await steps.promoted();
    promotedAt = performance.now();
    report.timeline.promotedMs = Math.round(promotedAt - killedAt);
    // The promoted master alone, as when the lost node does not come back soon.
    await sleep(steps.aloneMs);
    restartedAt = performance.now();
    report.timeline.restartedMs = Math.round(restartedAt - killedAt);
    await steps.replicaBack();
    report.timeline.replicaBackMs = Math.round(performance.now() - killedAt);
    await sleep(1_000);
  } finally {
    running = false;
    await Promise.all(workers);
  }

  report.codesRedeemedTwice = [...codeUses.values()].filter((uses) => uses > 1).length;
  report.refreshTokensUsedTwice = [...refreshUses.values()].filter((uses) => uses > 1).length;
  // Afterwards, every token once more on both sidecars (revoked ones as soon as settled).
  await sleep(REVOCATION_SETTLE_MS);
  for (const token of valid.filter((each) => !uncertain.has(each) && !revokedAt.has(each))) {
    report.afterwards.valid += 1;
    for (const sidecar of both) if ((await status(gatewayUrl(sidecar), bearer(token))) !== 200) report.afterwards.validRefused += 1;
  }
  for (const token of revokedAt.keys()) {
    report.afterwards.revoked += 1;
    for (const sidecar of both) if ((await status(gatewayUrl(sidecar), bearer(token))) !== 401) report.afterwards.revokedAccepted += 1;
  }
  return report;
}

/** One line for the test's output: what the clients saw. */
export function summarize(name: string, report: FailoverReport): string {
  const { promotedMs, restartedMs, replicaBackMs } = report.timeline;
  return `${name} failover: promoted after ${promotedMs} ms, lost node restarted after ${restartedMs} ms and back as a replica after ${replicaBackMs} ms; ${answers(report, 'the kill', 'before the promotion')}; writes while the promoted master was alone ${JSON.stringify(report.writesWhileAlone)}`;
}

/** What the clients saw, counted; `start` and `window` name the event the traffic went through. */
export function answers(report: FailoverReport, start: string, window: string): string {
  return `${report.unavailable} 503s (first ${report.firstUnavailableMs} ms, last ${report.lastUnavailableMs} ms after ${start}); valid answered 401: ${report.validRefused}, revoked answered 200: ${report.revokedAccepted}, codes redeemed twice: ${report.codesRedeemedTwice}, refresh tokens used twice: ${report.refreshTokensUsedTwice}; gateway ${JSON.stringify(report.gateway)}, of which ${window} ${JSON.stringify(report.gatewayWhileFailing)}, issuance ${JSON.stringify(report.issuance)}, revocations ${JSON.stringify(report.revocations)}, codes ${JSON.stringify(report.redemptions)}, refreshes ${JSON.stringify(report.refreshes)}, sign-ins ${JSON.stringify(report.signIns)}`;
}

/**
 * The failure WAIT guards against: the replica lags (frozen, with more replication data queued
 * on the master than the sockets between them hold), a token is saved, the master dies, the
 * replica takes over without it. `unconfirmed` (no replica to wait for) acknowledges the save,
 * and the token is lost; `confirmed` (one replica) fails the save instead: the issuer would
 * answer 503 and hand out nothing.
 */
export async function lagReplicaThenFailOver(options: {
  confirmed: Store;
  unconfirmed: Store;
  master: RedisNode;
  replica: RedisNode;
  /** A key that lives on `master` (it carries the replication backlog). */
  fillerKey: string;
  /** Two digests whose records live on `master`. */
  digests: [string, string];
  promoted(): Promise<void>;
}): Promise<{ confirmedSave: 'failed' | 'acknowledged'; unconfirmedSave: 'failed' | 'acknowledged'; afterFailover: Array<AccessTokenRecord | null> }> {
  const { confirmed, unconfirmed, master, replica, digests } = options;
  const now = Date.now();
  const record: AccessTokenRecord = { ...USER_TOKEN, scopes: ['public'], issuedAt: now, expiresAt: now + 3_600_000 };
  const outcome = (save: Promise<void>) =>
    save.then(
      () => 'acknowledged' as const,
      () => 'failed' as const,
    );
  const filler = master.client();
  replica.pause();
  let result: { confirmedSave: 'failed' | 'acknowledged'; unconfirmedSave: 'failed' | 'acknowledged' };
  try {
    await filler.set(options.fillerKey, 'x'.repeat(64 * 1024 * 1024));
    result = {
      unconfirmedSave: await outcome(unconfirmed.tokens.saveAccessToken(digests[0], record)),
      confirmedSave: await outcome(confirmed.tokens.saveAccessToken(digests[1], record)),
    };
    await master.kill();
  } finally {
    filler.disconnect();
    replica.resume();
  }
  await options.promoted();
  return { ...result, afterFailover: [await confirmed.tokens.getAccessToken(digests[0]), await confirmed.tokens.getAccessToken(digests[1])] };
}
