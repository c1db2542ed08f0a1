import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { IdentityProviderConfig } from '../config/schema.js';
import { TokengateError } from '../errors.js';
import type { IdentityProviders } from '../identity-providers/index.js';
import { refused } from '../identity-providers/index.js';
import type { Metrics } from '../observability/metrics.js';
import type { Backend } from '../store/backend.js';
import type { Tokens } from '../store/store.js';
import { constantTimeEqual } from '../token/constant-time.js';
import type { RequestTrace, Tracing } from '../tracing/index.js';
import type { StreamStatus } from './events.js';
import { receiveSet, type Receipt, type ReceiverEnvironment, type ReceiverSettings } from './receiver.js';
import { signalsStoreFor, type SignalsStore, type StreamRecord, type SubjectKey } from './signals-store.js';
import { StreamWorker } from './stream-worker.js';

import { SET_MEDIA_TYPE } from './push-endpoint.js';

export { PUSH_PATH_PREFIX, registerPushEndpoint } from './push-endpoint.js';

/** What the shared signals of one instance need of it. */
export interface SharedSignalsDependencies {
  readonly backend: Backend;
  /** The token port in effect (a reload may replace the store's cache). */
  tokens(): Tokens;
  readonly identityProviders: IdentityProviders;
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly tracing: Tracing | null;
  /** `issuer.issuerUrl`: a receiver's audience and push endpoint URL unless it names its own. */
  readonly issuerUrl: string;
  /** Whether this process takes part in the stream work (polling, set-up): the processes that serve the public listener do. */
  readonly runsStreamWork: boolean;
}

interface Receiver {
  readonly settings: ReceiverSettings;
  /** The provider's config it was built from: a reload that changes it builds the receiver anew. */
  readonly built: string;
  readonly worker: StreamWorker | null;
}

/** One receiver as the admin API lists it: its settings and its stream's state, as the store holds it for every sidecar. */
export interface StreamView {
  readonly name: string;
  readonly delivery: 'push' | 'poll';
  /** `configured`: tokengate set the stream up (with `transmitterAuthorization`); `operator`: the operator made it. */
  readonly stream: 'configured' | 'operator';
  readonly pushEndpoint: string | null;
  readonly streamId: string | null;
  readonly status: string | null;
  readonly statusReason: string | null;
  readonly statusAt: string | null;
  readonly verifiedAt: string | null;
  readonly lastEvent: { readonly type: string; readonly outcome: string; readonly at: string } | null;
  readonly lastPoll: { readonly at: string; readonly result: string } | null;
  /** Why the stream could not be set up, until it is. */
  readonly problem: string | null;
}

/**
 * The Shared Signals receivers (SSF 1.0, CAEP, RISC) of the trusted identity providers that
 * name a transmitter (`identityProviders[].sharedSignals`): the push endpoint's receipts, the
 * stream work (set-up, status, polling) run by one sidecar at a time, the subjects' records
 * that identity assertions are checked against, and the listing. A reload replaces the
 * receivers: one whose provider's settings stayed keeps its work going.
 */
export class SharedSignals {
  private receivers = new Map<string, Receiver>();
  private readonly store: SignalsStore;
  private readonly owner = randomUUID();
  private readonly env: ReceiverEnvironment & { owner: string };
  private started = false;

  constructor(
    configs: readonly IdentityProviderConfig[],
    private readonly dependencies: SharedSignalsDependencies,
  ) {
    this.store = signalsStoreFor(dependencies.backend);
    this.env = {
      store: this.store,
      tokens: dependencies.tokens,
      trusted: (issuer) => dependencies.identityProviders.trusted(issuer),
      metrics: dependencies.metrics,
      log: dependencies.log,
      tracing: dependencies.tracing,
      owner: this.owner,
      streamStatusChanged: (name, status) => this.streamStatusChanged(name, status),
    };
    this.replace(configs);
  }

  /** Whether any receiver takes pushed events (the push endpoint is served). */
  get pushes(): boolean {
    return [...this.receivers.values()].some(({ settings }) => settings.signals.delivery === 'push');
  }

  /** Starts the stream work (with the listeners). */
  start(): void {
    this.started = true;
    for (const { worker } of this.receivers.values()) worker?.start();
  }

  /** Takes a reloaded list of providers. */
  replace(configs: readonly IdentityProviderConfig[]): void {
    const next = new Map<string, Receiver>();
    for (const provider of configs) {
      if (provider.sharedSignals === undefined) continue;
      const built = JSON.stringify(provider);
      const current = this.receivers.get(provider.sharedSignals.name);
      if (current !== undefined && current.built === built) {
        next.set(provider.sharedSignals.name, current);
        continue;
      }
      const settings = this.settingsOf(provider);
      const worker = this.dependencies.runsStreamWork && StreamWorker.needed(settings) ? new StreamWorker(settings, this.env) : null;
      if (this.started) worker?.start();
      next.set(settings.name, { settings, built, worker });
    }
    for (const [name, receiver] of this.receivers) if (next.get(name) !== receiver) void receiver.worker?.stop();
    this.receivers = next;
  }

  async close(): Promise<void> {
    await Promise.all([...this.receivers.values()].flatMap(({ worker }) => (worker === null ? [] : [worker.stop()])));
  }

  /**
   * A SET pushed to `/ssf/events/<name>`: undefined when no receiver takes pushes under that
   * name; otherwise, after the transmitter's `Authorization` (compared in constant time), the
   * receipt. `set`: null when the request's media type is not a SET's.
   */
  async receivePush(name: string, authorization: string | undefined, set: string | null, trace: RequestTrace | null): Promise<Receipt | undefined> {
    const receiver = this.receivers.get(name);
    if (receiver === undefined || receiver.settings.signals.delivery !== 'push') return undefined;
    if (authorization === undefined || !constantTimeEqual(authorization, receiver.settings.signals.pushAuthorization)) {
      this.dependencies.metrics.sharedSignalsRefusals.inc({ provider: name, error: 'authentication_failed' });
      this.dependencies.log.warn({ provider: name }, 'shared signal pushed without the Authorization header this receiver was given: refused');
      return { outcome: 'refused', refusal: authenticationFailed() };
    }
    if (set === null) {
      const refusal = new TokengateError('SET_INVALID_REQUEST', { description: `The request's Content-Type is not ${SET_MEDIA_TYPE}.` });
      this.dependencies.metrics.sharedSignalsRefusals.inc({ provider: name, error: refusal.error });
      return { outcome: 'refused', refusal };
    }
    return receiveSet(set, receiver.settings, this.env, 'push', { trace });
  }

  /** Whether the identity assertions of this issuer are checked against what its transmitter said. */
  watches(issuer: string): boolean {
    return [...this.receivers.values()].some(({ settings }) => settings.provider.issuer === issuer);
  }

  /**
   * Refuses (invalid_grant) an identity assertion issued before its subject's tokens were revoked
   * by a shared signal, or of a subject the provider disabled; `email`: the address its user
   * claim names, by which the provider may have named the subject.
   */
  async checkAssertion(issuer: string, subject: string, email: string, issuedAt: number): Promise<void> {
    const names: SubjectKey[] = [
      { by: 'sub', value: subject },
      { by: 'email', value: email },
    ];
    const state = await this.store.subjectState(issuer, names);
    if (state.disabled) throw refused('sub', 'is an account its identity provider disabled');
    if (issuedAt < state.revokedBefore) throw refused('iat', "is before its identity provider revoked the subject's sessions");
  }

  /** Every receiver and its stream's state. */
  async list(): Promise<StreamView[]> {
    return Promise.all([...this.receivers.values()].map(async ({ settings }) => viewOf(settings, await this.store.readStream(settings.name))));
  }

  /** The receiver of a provider, by issuer, for the admin listing. */
  nameOf(issuer: string): string | undefined {
    return [...this.receivers.values()].find(({ settings }) => settings.provider.issuer === issuer)?.settings.name;
  }

  private streamStatusChanged(name: string, status: StreamStatus): void {
    this.receivers.get(name)?.worker?.statusChanged(status);
  }

  private settingsOf(provider: IdentityProviderConfig): ReceiverSettings {
    const signals = provider.sharedSignals!;
    const base = this.dependencies.issuerUrl.replace(/\/+$/, '');
    return {
      name: signals.name,
      provider,
      signals,
      audience: signals.audience !== '' ? signals.audience : base,
      pushEndpointUrl: signals.pushEndpointUrl !== '' ? signals.pushEndpointUrl : `${base}/ssf/events/${signals.name}`,
      policy: { narrowingClaims: new Set([...signals.narrowingClaims, provider.userClaim]) },
    };
  }
}

function authenticationFailed(): TokengateError {
  return new TokengateError('SET_AUTHENTICATION_FAILED');
}

function viewOf(settings: ReceiverSettings, record: StreamRecord): StreamView {
  const { signals } = settings;
  const time = (value: string | undefined) => (value === undefined ? null : new Date(Number(value)).toISOString());
  return {
    name: settings.name,
    delivery: signals.delivery,
    stream: signals.transmitterAuthorization !== '' ? 'configured' : 'operator',
    pushEndpoint: signals.delivery === 'push' ? `/ssf/events/${settings.name}` : null,
    streamId: signals.streamId !== '' ? signals.streamId : (record.streamId ?? null),
    status: record.status ?? null,
    statusReason: record.statusReason ?? null,
    statusAt: time(record.statusAt),
    verifiedAt: time(record.verifiedAt),
    lastEvent:
      record.lastEventType === undefined ? null : { type: record.lastEventType, outcome: record.lastEventOutcome ?? '', at: time(record.lastEventAt) ?? '' },
    lastPoll: record.lastPollAt === undefined ? null : { at: time(record.lastPollAt)!, result: record.lastPollResult ?? '' },
    problem: record.setupProblem ?? null,
  };
}
