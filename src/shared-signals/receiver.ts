import type { Logger } from 'pino';
import type { IdentityProviderConfig, SharedSignalsConfig } from '../config/schema.js';
import { TokengateError } from '../errors.js';
import type { TrustedProvider } from '../identity-providers/assertion.js';
import type { Metrics } from '../observability/metrics.js';
import type { Tokens } from '../store/store.js';
import type { ChildSpan, RequestTrace, Tracing } from '../tracing/index.js';
import { concernsSubject, eventName, interpretEvent, type EventEffect, type EventName, type EventPolicy, type StreamStatus } from './events.js';
import { SET_CLOCK_LEEWAY_SECONDS, verifySet, type VerifiedSet } from './set-verification.js';
import type { SignalsStore, SubjectKey } from './signals-store.js';
import { resolveSubject, type ResolvedSubject } from './subjects.js';

/** How long a claim on an event lasts: longer than applying one takes (a few store commands, each within the command timeout). */
const CLAIM_MS = 30_000;

/** One provider's receiver as configured: what its SETs are checked against and what its events do. */
export interface ReceiverSettings {
  /** `sharedSignals.name`: the push endpoint's last segment, the metrics' `provider` label. */
  readonly name: string;
  readonly provider: IdentityProviderConfig;
  readonly signals: SharedSignalsConfig;
  /** The `aud` its SETs must name (`audience`, or the issuer URL). */
  readonly audience: string;
  /** Where a stream tokengate creates is told to push (`pushEndpointUrl`, or the issuer URL's `/ssf/events/<name>`). */
  readonly pushEndpointUrl: string;
  readonly policy: EventPolicy;
}

/** What receiving needs of its instance. */
export interface ReceiverEnvironment {
  readonly store: SignalsStore;
  /** The token port in effect (a reload may replace the store's cache). */
  tokens(): Tokens;
  /** The trusted provider of an issuer, with its key set; undefined when it is no longer trusted. */
  trusted(issuer: string): TrustedProvider | undefined;
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly tracing: Tracing | null;
  /** A stream's status changed (a stream-updated event): its poller follows it. */
  streamStatusChanged(receiver: string, status: StreamStatus): void;
}

export type Delivery = 'push' | 'poll';

/**
 * What became of a SET: accepted (applied now, or before: acknowledge it), refused (with the
 * RFC 8935 error: acknowledge it as an error, it will never do), or to be delivered again (the
 * store or the key set did not answer, or another sidecar is applying it now).
 */
export type Receipt =
  | { readonly outcome: 'accepted' }
  | { readonly outcome: 'refused'; readonly refusal: TokengateError }
  | { readonly outcome: 'retry'; readonly error: TokengateError };

/** What an event did, the `outcome` label of tokengate_shared_signals_events_total. */
export type EventOutcome = 'applied' | 'no_effect' | 'recorded' | 'duplicate' | 'unknown_type' | 'unsupported_subject' | 'failed';

interface PlannedEvent {
  readonly name: EventName;
  readonly effect: EventEffect;
  /** The subject of an event about one; null for the stream's own events and those without effect. */
  readonly subject: ResolvedSubject | null;
}

export interface ReceiveOptions {
  /** The push request's trace: each event's span is its child. */
  readonly trace?: RequestTrace | null;
  /** The `jti` a poll answer listed the SET under: it must be the SET's own. */
  readonly listedAs?: string;
}

/**
 * One SET, in order: verify it (signature and claims), read what each of its events asks (a SET
 * that asks something malformed is refused whole, before any of it is applied), claim it once
 * across the sidecars, apply each event, and record it applied. Only then is it acknowledged, so
 * a sidecar that dies half-way leaves the event to be applied by the next delivery, and an
 * event delivered again after it was applied changes nothing.
 */
export async function receiveSet(
  set: string,
  settings: ReceiverSettings,
  env: ReceiverEnvironment,
  delivery: Delivery,
  options: ReceiveOptions = {},
): Promise<Receipt> {
  let verified: VerifiedSet;
  let planned: PlannedEvent[];
  try {
    verified = await verifyFor(set, settings, env);
    if (options.listedAs !== undefined && options.listedAs !== verified.jti)
      throw new TokengateError('SET_INVALID_REQUEST', { description: "The SET's jti is not the one the poll answer listed it under." });
    planned = verified.events.map((event) => planEvent(event, verified, settings));
  } catch (error) {
    return refusedOrRetry(error, settings, env);
  }
  const issuer = settings.provider.issuer;
  let claim;
  try {
    claim = await env.store.claimEvent(issuer, verified.jti, CLAIM_MS);
  } catch (error) {
    return retry(error);
  }
  if (claim === 'applying') return { outcome: 'retry', error: new TokengateError('SET_BEING_APPLIED') };
  if (claim === 'applied') {
    for (const event of planned) env.metrics.sharedSignalsEvents.inc({ provider: settings.name, type: event.name, outcome: 'duplicate' });
    return { outcome: 'accepted' };
  }
  return applyClaimed(planned, verified, settings, env, delivery, options.trace ?? null);
}

async function verifyFor(set: string, settings: ReceiverSettings, env: ReceiverEnvironment): Promise<VerifiedSet> {
  const provider = env.trusted(settings.provider.issuer);
  if (provider === undefined) throw new TokengateError('SET_INVALID_ISSUER', { description: 'This identity provider is no longer trusted.' });
  return verifySet(set, { provider, audience: settings.audience, maxAgeSeconds: settings.signals.maxEventAgeSeconds });
}

/** The effect of one event and, for an event about a subject, who: from the SET's `sub_id` (SSF 1.0), else the event's own `subject`. */
function planEvent(event: VerifiedSet['events'][number], verified: VerifiedSet, settings: ReceiverSettings): PlannedEvent {
  const name = eventName(event.type);
  const effect = interpretEvent(name, event.payload, settings.policy);
  if (!concernsSubject(effect)) return { name, effect, subject: null };
  const subject = verified.subject ?? event.payload.subject;
  return { name, effect, subject: resolveSubject(subject, settings.provider.issuer) };
}

async function applyClaimed(
  planned: PlannedEvent[],
  verified: VerifiedSet,
  settings: ReceiverSettings,
  env: ReceiverEnvironment,
  delivery: Delivery,
  trace: RequestTrace | null,
): Promise<Receipt> {
  const issuer = settings.provider.issuer;
  const outcomes: EventOutcome[] = [];
  for (const event of planned) {
    const span = eventSpan(trace, env.tracing, settings.name, event.name, delivery, verified.jti);
    try {
      const outcome = await applyEvent(event, verified, settings, env);
      outcomes.push(outcome);
      span?.set('tokengate.shared_signals.outcome', outcome);
      span?.end();
    } catch (error) {
      span?.end('store_unavailable');
      env.metrics.sharedSignalsEvents.inc({ provider: settings.name, type: event.name, outcome: 'failed' });
      await env.store.releaseEvent(issuer, verified.jti).catch(() => undefined);
      return retry(error);
    }
  }
  try {
    await env.store.completeEvent(issuer, verified.jti, (settings.signals.maxEventAgeSeconds + 2 * SET_CLOCK_LEEWAY_SECONDS) * 1000);
    const last = planned.at(-1)!;
    await env.store.updateStream(settings.name, { lastEventType: last.name, lastEventOutcome: outcomes.at(-1)!, lastEventAt: String(Date.now()) });
  } catch (error) {
    // Applied, not yet recorded: the next delivery applies it again, which revocations bear.
    await env.store.releaseEvent(issuer, verified.jti).catch(() => undefined);
    return retry(error);
  }
  planned.forEach((event, index) => env.metrics.sharedSignalsEvents.inc({ provider: settings.name, type: event.name, outcome: outcomes[index]! }));
  if (delivery === 'poll') env.metrics.sharedSignalsPollLag.observe({ provider: settings.name }, Math.max(0, Date.now() / 1000 - verified.issuedAt));
  return { outcome: 'accepted' };
}

function eventSpan(trace: RequestTrace | null, tracing: Tracing | null, provider: string, type: EventName, delivery: Delivery, jti: string): ChildSpan | null {
  const span = trace !== null ? trace.child('tokengate.shared_signals.event') : (tracing?.startSpan('tokengate.shared_signals.event') ?? null);
  span?.set('tokengate.shared_signals.provider', provider);
  span?.set('tokengate.shared_signals.event_type', type);
  span?.set('tokengate.shared_signals.delivery', delivery);
  span?.set('tokengate.shared_signals.jti', jti);
  return span;
}

/** Does what the event asks; throws only when the store did not answer. */
async function applyEvent(event: PlannedEvent, verified: VerifiedSet, settings: ReceiverSettings, env: ReceiverEnvironment): Promise<EventOutcome> {
  const { effect } = event;
  switch (effect.effect) {
    case 'revoke':
    case 'enable':
      return applyToSubject(event, verified, settings, env);
    case 'none':
      return 'no_effect';
    case 'unknown':
      return 'unknown_type';
    case 'verification':
      await recordVerification(effect.state, settings, env);
      return 'recorded';
    case 'stream-updated':
      await env.store.updateStream(settings.name, { status: effect.status, statusReason: effect.reason ?? '', statusAt: String(Date.now()) });
      env.streamStatusChanged(settings.name, effect.status);
      if (effect.status !== 'enabled')
        env.log.warn({ provider: settings.name, status: effect.status }, 'shared signals stream is not enabled: no events arrive');
      return 'recorded';
  }
}

/**
 * Revokes every token of the subject (each name the provider gave it), after recording the
 * revocation's time, so an identity assertion issued before it is refused from then on: a grant
 * in flight either saved its token before the revocation read the index (and the revocation
 * takes it), or checks the record after its save (and takes its token back itself). One audit
 * line per revocation.
 */
async function applyToSubject(event: PlannedEvent, verified: VerifiedSet, settings: ReceiverSettings, env: ReceiverEnvironment): Promise<EventOutcome> {
  const subject = event.subject!;
  if ('unsupported' in subject) {
    env.log.warn(
      { provider: settings.name, event: event.name, format: subject.unsupported },
      'shared signal names its subject in a format tokengate cannot use: acknowledged, no effect',
    );
    return 'unsupported_subject';
  }
  const issuer = settings.provider.issuer;
  const keepMs = (settings.provider.maxAssertionLifetimeSeconds + 2 * SET_CLOCK_LEEWAY_SECONDS) * 1000;
  const disable = event.effect.effect === 'revoke' && event.effect.disable;
  for (const key of subject.keys) {
    if (event.effect.effect === 'enable') {
      await env.store.markSubject(issuer, key, { disabled: false }, keepMs);
      audit(env.log, settings, event, verified, key, { enabled: true });
      continue;
    }
    await env.store.markSubject(issuer, key, { revokedBefore: verified.issuedAt, ...(disable ? { disabled: true } : {}) }, keepMs);
    const tokens = env.tokens();
    const revoked = key.by === 'sub' ? await tokens.revokeIdentityTokens(issuer, key.value) : await tokens.revokeIdentityEmailTokens(issuer, key.value);
    audit(env.log, settings, event, verified, key, { revoked, ...(disable ? { disabled: true } : {}) });
  }
  return 'applied';
}

function audit(
  log: Logger,
  settings: ReceiverSettings,
  event: PlannedEvent,
  verified: VerifiedSet,
  key: SubjectKey,
  change: Record<string, number | boolean>,
): void {
  const action = 'enabled' in change ? 'sign-in enabled again by a shared signal' : 'tokens revoked by a shared signal';
  log.info(
    {
      audit: {
        action,
        provider: settings.name,
        issuer: settings.provider.issuer,
        event: event.name,
        jti: verified.jti,
        subject: { [key.by]: key.value },
        ...change,
      },
    },
    'shared signal applied',
  );
}

/**
 * A verification event (SSF 1.0 section 8.1.4): the stream works end to end. It verifies the
 * stream when it carries the state tokengate asked for, or when tokengate asked for none (a
 * stream the operator made, whose transmitter verifies on its own).
 */
async function recordVerification(state: string | null, settings: ReceiverSettings, env: ReceiverEnvironment): Promise<void> {
  const asked = (await env.store.readStream(settings.name)).verificationState;
  if (asked !== undefined && asked !== state) {
    env.log.info({ provider: settings.name }, 'shared signals verification event with another state than the one asked for: not counted as verified');
    return;
  }
  await env.store.updateStream(settings.name, { verifiedAt: String(Date.now()), verificationState: '' });
  env.log.info({ provider: settings.name }, 'shared signals stream verified');
}

function refusedOrRetry(error: unknown, settings: ReceiverSettings, env: ReceiverEnvironment): Receipt {
  if (error instanceof TokengateError && error.code.startsWith('SET_') && error.status === 400) {
    env.metrics.sharedSignalsRefusals.inc({ provider: settings.name, error: error.error });
    env.log.warn({ provider: settings.name, err: error.error, reason: error.description }, 'shared signal refused');
    return { outcome: 'refused', refusal: error };
  }
  return retry(error);
}

function retry(error: unknown): Receipt {
  return { outcome: 'retry', error: error instanceof TokengateError ? error : new TokengateError('INTERNAL', { cause: error }) };
}
