import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUpstream, type Upstream } from './support/gateway.js';
import { generateProviderKey, TestIdentityProvider } from './support/identity-provider.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './support/cli.js';
import {
  adminFetch,
  clientCredentials,
  postForm,
  registerApplication,
  startTokengate,
  TEST_ADMIN_TOKEN,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';
import { captureLog, type CapturedLog } from './support/log.js';
import { valueOf } from './support/metrics.js';
import { freePort } from './support/ports.js';
import { EVENT, TestTransmitter, type MintedSet } from './support/transmitter.js';
import { eventually } from './support/wait.js';
import { withTokens, type Store } from '../src/store/store.js';
import { parseConfig } from '../src/load-config.js';

/**
 * The Shared Signals receiver with push delivery (RFC 8935) on a stream the operator made, in
 * front of two sidecars of one deployment: a transmitter of the test's own (https under a test
 * CA, the identity provider's own ES256 keys) pushes Security Event Tokens, and each event's
 * effect is checked on tokens issued through the ID-JAG grant at both sidecars. Every check of a
 * SET is attacked with the SET it exists to refuse, and a refused SET changes nothing.
 */

const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const PUSH_AUTHORIZATION = `Bearer ${randomBytes(24).toString('base64url')}`;
const STREAM_ID = 'stream-made-by-the-operator';

let idp: TestIdentityProvider;
let transmitter: TestTransmitter;
let upstream: Upstream;
let first: RunningTokengate;
let second: RunningTokengate;
let app: TestApplication;
let issuerUrl: string;
let api: string;
let pushUrl: string;
let log: CapturedLog;
/** A third sidecar whose token saves wait for the test while `heldSaves` is set: a grant frozen between its checks and its save. */
let third: RunningTokengate;
let heldSaves: { reached(): void; released: Promise<void> } | null = null;

function holdingSaves(store: Store): Store {
  const tokens = new Proxy(store.tokens, {
    get(target, property) {
      if (property === 'saveAccessToken')
        return async (...args: Parameters<Store['tokens']['saveAccessToken']>) => {
          const held = heldSaves;
          if (held !== null) {
            held.reached();
            await held.released;
          }
          return target.saveAccessToken(...args);
        };
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return withTokens(store, tokens);
}

beforeAll(async () => {
  [idp, upstream] = await Promise.all([TestIdentityProvider.start(), startUpstream()]);
  const port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  api = `${issuerUrl}/api`;
  transmitter = TestTransmitter.on(idp, issuerUrl);
  const sharedSignals = {
    name: 'company',
    configurationUrl: transmitter.configurationUrl,
    delivery: 'push',
    pushAuthorization: PUSH_AUTHORIZATION,
    streamId: STREAM_ID,
  };
  const config = {
    issuer: { issuerUrl },
    resources: [{ identifier: api }],
    routes: [{ path: '/api/tickets', token: 'user', scopes: ['public'], upstream: upstream.url, resource: api }],
    identityProviders: [idp.config({ jitUsers: true, sharedSignals })],
    logging: { level: 'info' },
  };
  log = captureLog('info');
  first = await startTokengate('ssf-push', { port, config, logger: log.logger });
  second = await startTokengate('ssf-push-2', { sharing: first, config, logger: log.logger });
  third = await startTokengate('ssf-push-3', { sharing: first, config, wrap: holdingSaves });
  app = await registerApplication(first.store, { scopes: ['public'] });
  pushUrl = `${first.baseUrl}/ssf/events/company`;
});

afterAll(async () => {
  await third?.close();
  await second?.close();
  await first?.close();
  await upstream?.close();
  await idp?.close();
});

const newSubject = () => `idp-${randomUUID()}`;
const emailOf = (subject: string) => `${subject}@company.example`;
const issSub = (subject: string) => ({ format: 'iss_sub', iss: idp.issuer, sub: subject });

/** An ID-JAG of the provider for `subject`, issued `age` seconds ago. */
function assertionFor(subject: string, age = 0): Promise<string> {
  const now = Math.floor(Date.now() / 1000) - age;
  return idp.assertion({ sub: subject, email: emailOf(subject), aud: issuerUrl, client_id: app.clientId, resource: api, iat: now, exp: now + 120 });
}

function grant(sidecar: RunningTokengate, assertion: string): Promise<Response> {
  return postForm(`${sidecar.baseUrl}/oauth/token`, { grant_type: JWT_BEARER, assertion, ...clientCredentials(app) });
}

async function tokenFor(sidecar: RunningTokengate, subject: string): Promise<string> {
  const response = await grant(sidecar, await assertionFor(subject));
  expect(response.status).toBe(200);
  return ((await response.json()) as { access_token: string }).access_token;
}

async function status(sidecar: RunningTokengate, token: string): Promise<number> {
  const response = await fetch(`${sidecar.baseUrl}/api/tickets`, { headers: { authorization: `Bearer ${token}` } });
  await response.body?.cancel();
  return response.status;
}

/** A token of the subject from each sidecar, each verified (and so cached) at both. */
async function tokensOf(subject: string): Promise<string[]> {
  const tokens = [await tokenFor(first, subject), await tokenFor(second, subject)];
  for (const token of tokens) for (const sidecar of [first, second]) expect(await status(sidecar, token)).toBe(200);
  return tokens;
}

/** Whether every one of the tokens answers `expected` at both sidecars. */
async function allAnswer(tokens: string[], expected: number): Promise<boolean> {
  for (const token of tokens) for (const sidecar of [first, second]) if ((await status(sidecar, token)) !== expected) return false;
  return true;
}

function push(minted: MintedSet, authorization: string | null = PUSH_AUTHORIZATION, contentType?: string) {
  return transmitter.push(pushUrl, minted.set, authorization, contentType);
}

const events = (labels: Record<string, string>) => valueOf(first.tokengate.context.metrics.sharedSignalsEvents, { provider: 'company', ...labels });
const refusals = (error: string) => valueOf(first.tokengate.context.metrics.sharedSignalsRefusals, { provider: 'company', error });

describe('a pushed session-revoked event', () => {
  it("ends every token of its subject on every sidecar, and no other subject's; the SET is never logged", async () => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    const bystander = await tokensOf(newSubject());
    const applied = await events({ type: 'session-revoked', outcome: 'applied' });
    const minted = await transmitter.set(EVENT.sessionRevoked, { event_timestamp: Math.floor(Date.now() / 1000) }, issSub(subject));
    expect(await push(minted)).toEqual({ status: 202, body: '' });
    await eventually(() => allAnswer(tokens, 401));
    expect(await allAnswer(bystander, 200)).toBe(true);
    expect(await events({ type: 'session-revoked', outcome: 'applied' })).toBe(applied + 1);
    const audits = log.entries().filter((entry) => (entry.audit as { jti?: string } | undefined)?.jti === minted.jti);
    expect(audits).toEqual([
      expect.objectContaining({
        msg: 'shared signal applied',
        audit: {
          action: 'tokens revoked by a shared signal',
          provider: 'company',
          issuer: idp.issuer,
          event: 'session-revoked',
          jti: minted.jti,
          subject: { sub: subject },
          revoked: 2,
        },
      }),
    ]);
    expect(log.text()).not.toContain(minted.set.split('.')[2]);
  });

  it('changes nothing when delivered again: a token issued since stays good, and the event is counted a duplicate', async () => {
    const subject = newSubject();
    await tokensOf(subject);
    const minted = await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject));
    expect((await push(minted)).status).toBe(202);
    const since = await tokensOf(subject);
    const duplicates = await events({ type: 'session-revoked', outcome: 'duplicate' });
    // Again, at the other sidecar too.
    expect((await push(minted)).status).toBe(202);
    expect((await transmitter.push(`${second.baseUrl}/ssf/events/company`, minted.set, PUSH_AUTHORIZATION)).status).toBe(202);
    expect(await allAnswer(since, 200)).toBe(true);
    expect(await events({ type: 'session-revoked', outcome: 'duplicate' })).toBe(duplicates + 1);
    expect(
      await valueOf(second.tokengate.context.metrics.sharedSignalsEvents, { provider: 'company', type: 'session-revoked', outcome: 'duplicate' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('refuses an identity assertion issued before it, and takes one issued after', async () => {
    const subject = newSubject();
    await tokensOf(subject);
    const before = await assertionFor(subject, 10);
    expect((await push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)))).status).toBe(202);
    const refused = await grant(second, before);
    expect(refused.status).toBe(400);
    expect(await refused.json()).toEqual({
      error: 'invalid_grant',
      error_description: "The identity assertion's iat is before its identity provider revoked the subject's sessions.",
    });
    expect((await grant(second, await assertionFor(subject))).status).toBe(200);
  });

  it('ends the token of a grant that was saving it meanwhile: the grant checks again after its save and takes it back', async () => {
    const subject = newSubject();
    const assertion = await assertionFor(subject, 5);
    let reached!: () => void;
    const atSave = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    heldSaves = { reached, released: new Promise<void>((resolve) => (release = resolve)) };
    const pending = grant(third, assertion);
    await atSave;
    heldSaves = null;
    // The revocation reads the subject's tokens while this one is not saved yet.
    expect((await push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)))).status).toBe(202);
    release();
    const answer = await pending;
    expect({ status: answer.status, body: await answer.json() }).toEqual({
      status: 400,
      body: { error: 'invalid_grant', error_description: "The identity assertion's iat is before its identity provider revoked the subject's sessions." },
    });
    expect(await first.store.tokens.revokeIdentityTokens(idp.issuer, subject)).toBe(0);
  });
});

describe('SETs refused as RFC 8935 says, changing nothing', () => {
  /** `uncounted`: refused before it is read as a SET, so not among the SETs refused. */
  const attacks: Array<{
    name: string;
    make: (subject: string) => Promise<{ status: number; body: string }>;
    err: string;
    description: string;
    uncounted?: true;
  }> = [
    {
      name: 'forged: signed with a key that is not the provider’s, under its kid',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { key: await generateProviderKey() })),
      err: 'invalid_key',
      description: "The SET's signature does not verify with the identity provider's key.",
    },
    {
      name: 'forged: signed with a key the provider does not publish',
      make: async (subject) => {
        const key = await generateProviderKey();
        return push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { key, kid: key.kid }));
      },
      err: 'invalid_key',
      description: "The SET's kid names no signing key the identity provider publishes.",
    },
    {
      name: 'alg none',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { alg: 'none' })),
      err: 'invalid_key',
      description: 'The SET is not signed with an asymmetric algorithm (none and HMAC are never accepted).',
    },
    {
      name: 'HMAC keyed by the provider’s public key, which anyone has',
      make: async (subject) =>
        push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { alg: 'HS256', secret: Buffer.from(JSON.stringify(idp.current.publicJwk)) })),
      err: 'invalid_key',
      description: 'The SET is not signed with an asymmetric algorithm (none and HMAC are never accepted).',
    },
    {
      name: 'meant for another receiver (aud)',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { aud: 'https://another-receiver.example' })),
      err: 'invalid_audience',
      description: "The SET's aud is not this receiver.",
    },
    {
      name: 'from another issuer',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { iss: 'https://idp.other.example' })),
      err: 'invalid_issuer',
      description: "The SET's iss is not this receiver's identity provider.",
    },
    {
      name: 'another JWT of the provider (typ JWT)',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { typ: 'JWT' })),
      err: 'invalid_request',
      description: "The SET's typ is not secevent+jwt.",
    },
    {
      name: 'older than the receiver accepts (iat)',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), { iat: Math.floor(Date.now() / 1000) - 2 * 86_400 })),
      err: 'invalid_request',
      description: "The SET's iat is missing, in the future or older than this receiver accepts.",
    },
    {
      name: 'about a subject of another issuer (iss_sub)',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, { format: 'iss_sub', iss: 'https://idp.other.example', sub: subject })),
      err: 'access_denied',
      description: 'The SET names a subject of another issuer: a provider speaks for its own subjects only.',
    },
    {
      name: 'without an Authorization header',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)), null),
      err: 'authentication_failed',
      description: 'The transmitter was not authenticated: its Authorization header is missing or not the one this receiver was given.',
    },
    {
      name: 'with another Authorization header',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)), `${PUSH_AUTHORIZATION}x`),
      err: 'authentication_failed',
      description: 'The transmitter was not authenticated: its Authorization header is missing or not the one this receiver was given.',
    },
    {
      name: 'sent as another media type',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)), PUSH_AUTHORIZATION, 'application/json'),
      err: 'invalid_request',
      description: "The request's Content-Type is not application/secevent+jwt.",
    },
    {
      name: 'sent without a media type',
      make: async (subject) => push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)), PUSH_AUTHORIZATION, ''),
      err: 'invalid_request',
      description: "The request's Content-Type is not application/secevent+jwt.",
    },
    {
      name: 'more than a SET: a body of 100 kB',
      make: async () => transmitter.push(pushUrl, 'a'.repeat(100_000), PUSH_AUTHORIZATION),
      err: 'invalid_request',
      description: 'The request body is larger than 65536 bytes: not a SET.',
      uncounted: true,
    },
    {
      name: 'nine events in one SET',
      make: async (subject) =>
        push(
          await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject), {
            claims: { events: Object.fromEntries(Array.from({ length: 9 }, (_unused, index) => [`${EVENT.sessionRevoked}#${index}`, {}])) },
          }),
        ),
      err: 'invalid_request',
      description: 'The SET holds more than 8 events.',
    },
    {
      name: 'a revoking event without a subject',
      make: async () => push(await transmitter.set(EVENT.sessionRevoked, {}, undefined)),
      err: 'invalid_request',
      description: 'The SET has no subject identifier with a format.',
    },
  ];

  it.each(attacks)('$name: 400 $err', async ({ make, err, description, uncounted }) => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    const before = await refusals(err);
    const answer = await make(subject);
    expect({ status: answer.status, body: JSON.parse(answer.body) as unknown }).toEqual({ status: 400, body: { err, description } });
    expect(await refusals(err)).toBe(uncounted ? before : before + 1);
    expect(await allAnswer(tokens, 200)).toBe(true);
    expect((await grant(first, await assertionFor(subject))).status).toBe(200);
  });

  it('answers 404 for a receiver name nobody configured, whatever the SET', async () => {
    const minted = await transmitter.set(EVENT.sessionRevoked, {}, issSub(newSubject()));
    expect((await transmitter.push(`${first.baseUrl}/ssf/events/nobody`, minted.set, PUSH_AUTHORIZATION)).status).toBe(404);
  });
});

describe('what each event does', () => {
  const cases: Array<{ event: string; payload: Record<string, unknown>; type: string; outcome: 'applied' | 'no_effect' }> = [
    { event: EVENT.credentialChange, payload: { credential_type: 'fido2-roaming', change_type: 'create' }, type: 'credential-change', outcome: 'no_effect' },
    { event: EVENT.credentialChange, payload: { credential_type: 'password', change_type: 'update' }, type: 'credential-change', outcome: 'applied' },
    { event: EVENT.credentialChange, payload: { credential_type: 'x509', change_type: 'revoke' }, type: 'credential-change', outcome: 'applied' },
    {
      event: EVENT.assuranceLevelChange,
      payload: { namespace: 'NIST-AAL', current_level: 'nist-aal2', previous_level: 'nist-aal1', change_direction: 'increase' },
      type: 'assurance-level-change',
      outcome: 'no_effect',
    },
    {
      event: EVENT.assuranceLevelChange,
      payload: { namespace: 'NIST-AAL', current_level: 'nist-aal1', previous_level: 'nist-aal2', change_direction: 'decrease' },
      type: 'assurance-level-change',
      outcome: 'applied',
    },
    { event: EVENT.assuranceLevelChange, payload: { namespace: 'NIST-AAL', current_level: 'nist-aal1' }, type: 'assurance-level-change', outcome: 'applied' },
    { event: EVENT.tokenClaimsChange, payload: { claims: { trusted_network: 'false' } }, type: 'token-claims-change', outcome: 'no_effect' },
    { event: EVENT.tokenClaimsChange, payload: { claims: { groups: ['readers'] } }, type: 'token-claims-change', outcome: 'applied' },
    { event: EVENT.tokenClaimsChange, payload: { claims: { email: 'someone.else@company.example' } }, type: 'token-claims-change', outcome: 'applied' },
    { event: EVENT.credentialCompromise, payload: { credential_type: 'password' }, type: 'credential-compromise', outcome: 'applied' },
    { event: EVENT.sessionsRevoked, payload: {}, type: 'sessions-revoked', outcome: 'applied' },
  ];

  it.each(cases)('$type $payload: $outcome', async ({ event, payload, type, outcome }) => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    const before = await events({ type, outcome });
    expect((await push(await transmitter.set(event, payload, issSub(subject)))).status).toBe(202);
    expect(await events({ type, outcome })).toBe(before + 1);
    if (outcome === 'applied') await eventually(() => allAnswer(tokens, 401));
    else expect(await allAnswer(tokens, 200)).toBe(true);
  });

  it.each([
    ['account-disabled', EVENT.accountDisabled],
    ['account-purged', EVENT.accountPurged],
  ])('%s ends the tokens and refuses the provider’s assertions for the subject until account-enabled', async (_name, event) => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    expect((await push(await transmitter.set(event, { reason: 'hijacking' }, issSub(subject)))).status).toBe(202);
    await eventually(() => allAnswer(tokens, 401));
    for (const sidecar of [first, second]) {
      const refused = await grant(sidecar, await assertionFor(subject));
      expect(await refused.json()).toEqual({
        error: 'invalid_grant',
        error_description: "The identity assertion's sub is an account its identity provider disabled.",
      });
    }
    // Enabled under another name than the one it was disabled by: what was said under each name stands.
    expect((await push(await transmitter.set(EVENT.accountEnabled, {}, { format: 'email', email: emailOf(subject) }))).status).toBe(202);
    const stillDisabled = await grant(first, await assertionFor(subject));
    expect(stillDisabled.status).toBe(400);
    expect((await push(await transmitter.set(EVENT.accountEnabled, {}, issSub(subject)))).status).toBe(202);
    expect((await grant(first, await assertionFor(subject))).status).toBe(200);
  });

  it('acknowledges an event type it does not act on, counts it, and changes nothing', async () => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    const before = await events({ type: 'other', outcome: 'unknown_type' });
    const answer = await push(await transmitter.set('https://schemas.example.com/event-type/device-moved', { where: 'elsewhere' }, issSub(subject)));
    expect(answer.status).toBe(202);
    expect(await events({ type: 'other', outcome: 'unknown_type' })).toBe(before + 1);
    expect(await allAnswer(tokens, 200)).toBe(true);
  });
});

describe('subjects named as RFC 9493 and SSF allow', () => {
  it.each([
    ['email (any letter case)', (subject: string) => ({ format: 'email', email: emailOf(subject).toUpperCase() })],
    ['opaque', (subject: string) => ({ format: 'opaque', id: subject })],
    ['complex, by its user', (subject: string) => ({ format: 'complex', user: issSub(subject), session: { format: 'opaque', id: 'some-session' } })],
    [
      'aliases',
      (subject: string) => ({
        format: 'aliases',
        identifiers: [
          { format: 'phone_number', phone_number: '+15555550100' },
          { format: 'email', email: emailOf(subject) },
        ],
      }),
    ],
  ])('%s: every token of the subject ends', async (_format, subjectOf) => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    const bystander = await tokensOf(newSubject());
    expect((await push(await transmitter.set(EVENT.sessionRevoked, {}, subjectOf(subject)))).status).toBe(202);
    await eventually(() => allAnswer(tokens, 401));
    expect(await allAnswer(bystander, 200)).toBe(true);
  });

  it('acknowledges a subject in a format that names no token here, and counts it', async () => {
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    const before = await events({ type: 'session-revoked', outcome: 'unsupported_subject' });
    expect((await push(await transmitter.set(EVENT.sessionRevoked, {}, { format: 'phone_number', phone_number: '+15555550100' }))).status).toBe(202);
    expect(await events({ type: 'session-revoked', outcome: 'unsupported_subject' })).toBe(before + 1);
    expect(await allAnswer(tokens, 200)).toBe(true);
  });
});

describe("the stream's state", () => {
  it('is listed with the provider: the stream, its status from stream-updated, its verification and its last event', async () => {
    const stream = { format: 'opaque', id: STREAM_ID };
    expect((await push(await transmitter.set(EVENT.verification, { state: 'unsolicited' }, stream))).status).toBe(202);
    expect((await push(await transmitter.set(EVENT.streamUpdated, { status: 'paused', reason: 'maintenance' }, stream))).status).toBe(202);
    const response = await adminFetch(second, '/identity-providers');
    const [listed] = ((await response.json()) as { identityProviders: Array<Record<string, unknown>> }).identityProviders;
    expect(listed!.sharedSignals).toMatchObject({
      name: 'company',
      delivery: 'push',
      stream: 'operator',
      pushEndpoint: '/ssf/events/company',
      streamId: STREAM_ID,
      status: 'paused',
      statusReason: 'maintenance',
      verifiedAt: expect.stringMatching(/^\d{4}-/) as unknown,
      lastEvent: { type: 'stream-updated', outcome: 'recorded', at: expect.stringMatching(/^\d{4}-/) as unknown },
      problem: null,
    });
    expect(JSON.stringify(listed)).not.toContain(PUSH_AUTHORIZATION.slice(7));
    // Events that arrive while the transmitter says the stream is paused are still applied: a revocation never waits.
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    expect((await push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)))).status).toBe(202);
    await eventually(() => allAnswer(tokens, 401));
    expect((await push(await transmitter.set(EVENT.streamUpdated, { status: 'enabled' }, stream))).status).toBe(202);
  });

  it('is printed by `tokengate identity-providers list`, below its provider', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'tokengate-ssf-cli-'));
    try {
      const configFile = join(directory, 'tokengate.yaml');
      writeFileSync(configFile, `admin:\n  host: 127.0.0.1\n  port: ${new URL(first.opsUrl).port}\n  token: ${TEST_ADMIN_TOKEN}\nlogging:\n  level: silent\n`);
      const run = await runCli(['identity-providers', 'list', '--config', configFile], { env: { TOKENGATE_CONFIG: '' } });
      expect(run.code).toBe(0);
      const [provider, signals] = run.stdout.trimEnd().split('\n');
      expect(provider).toMatch(new RegExp(`^${idp.issuer.replace(/[.]/g, '\\.')}  keys `));
      expect(signals).toMatch(
        new RegExp(
          `^  signals company: push to /ssf/events/company, stream ${STREAM_ID} \\(made by the operator\\), status enabled, verified \\d{4}-[^,]+, last event \\S+ \\S+ at \\d{4}-`,
        ),
      );
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});

describe('a reload', () => {
  it('takes a receiver away (its pushes then find no receiver) and back, on every sidecar', async () => {
    const signals = first.tokengate.context.config.identityProviders[0]!.sharedSignals;
    const reloadWith = (withSignals: boolean) => {
      for (const sidecar of [first, second]) {
        const running = sidecar.tokengate.context.config;
        const providers = running.identityProviders.map(({ sharedSignals: _running, ...provider }) =>
          withSignals ? { ...provider, sharedSignals: signals } : provider,
        );
        expect(sidecar.tokengate.reload(() => parseConfig(JSON.stringify({ ...running, identityProviders: providers }), 'reloaded', {}))).toMatchObject({
          result: 'success',
          applied: ['identityProviders'],
        });
      }
    };
    const subject = newSubject();
    const tokens = await tokensOf(subject);
    reloadWith(false);
    try {
      const minted = await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject));
      expect((await push(minted)).status).toBe(404);
      expect(await allAnswer(tokens, 200)).toBe(true);
    } finally {
      reloadWith(true);
    }
    expect(first.tokengate.context.config.identityProviders[0]!.sharedSignals).toEqual(signals);
    expect((await push(await transmitter.set(EVENT.sessionRevoked, {}, issSub(subject)))).status).toBe(202);
    await eventually(() => allAnswer(tokens, 401));
  });
});
