import { randomUUID } from 'node:crypto';
import { EVENT_TYPES, STREAM_STATUSES, type StreamStatus } from './events.js';
import { receiveSet, type ReceiverEnvironment, type ReceiverSettings } from './receiver.js';
import { DELIVERY_METHODS, TransmitterClient, TransmitterError, type StreamConfiguration } from './transmitter.js';

/** How long the lease of a receiver's stream work lasts: a sidecar that died gives it up this long after its last renewal. */
const LEASE_MS = 15_000;
/** How often the holder renews the lease, and how often the others try to take it. */
const LEASE_RENEW_MS = 5_000;
/** The longest wait between two attempts after failures (the transmitter or the store down). */
const MOST_BACKOFF_MS = 60_000;
/** How often the holder records its last poll in the stream's state when nothing changed. */
const POLL_RECORD_MS = 5_000;

export interface StreamWorkerEnvironment extends ReceiverEnvironment {
  /** This process's id in the lease. */
  readonly owner: string;
}

/**
 * The background work of one receiver, done by one sidecar at a time (the holder of its lease
 * in the store): setting up the stream at the transmitter and reading its status, when the
 * operator gave tokengate a credential for it, and polling it, for delivery `poll`.
 *
 * Polling acknowledges only what was applied (or refused for good): an event is recorded applied
 * in the store before its acknowledgement goes out with the next poll, so a sidecar that stops
 * or dies in between leaves the transmitter to deliver it again, and the next holder finds it
 * applied and only acknowledges it. Failures (the transmitter or the store down) are retried
 * after a wait that doubles, up to a minute.
 */
export class StreamWorker {
  private stopping = false;
  private running: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  private holding = false;
  private lastRenewAt = Number.NEGATIVE_INFINITY;
  private nextWorkAt = 0;
  private failures = 0;
  private setUp = false;
  private streamId: string | null = null;
  private pollUrl: string | null;
  /** Known from the status endpoint or a stream-updated event; null until either says. */
  private status: StreamStatus | null = null;
  private statusDueAt = 0;
  /** Whether the transmitter's status endpoint tells this stream's status (a stream tokengate configures, on a transmitter that has one). */
  private readsStatus = false;
  private acks: string[] = [];
  private errors: Record<string, { err: string; description: string }> = {};
  private lastPollRecord = { at: 0, result: '' };
  private readonly client: TransmitterClient;

  constructor(
    private readonly settings: ReceiverSettings,
    private readonly env: StreamWorkerEnvironment,
  ) {
    const { signals, provider } = settings;
    this.client = new TransmitterClient(signals.configurationUrl, provider.caFile, signals.transmitterAuthorization);
    this.pollUrl = signals.pollUrl === '' ? null : signals.pollUrl;
    // A stream the operator made has nothing to set up.
    this.setUp = !this.manages;
  }

  /** Whether a receiver has background work: a stream tokengate configures, or one it polls. */
  static needed(settings: ReceiverSettings): boolean {
    return settings.signals.transmitterAuthorization !== '' || settings.signals.delivery === 'poll';
  }

  private get manages(): boolean {
    return this.settings.signals.transmitterAuthorization !== '';
  }

  start(): void {
    this.running ??= this.run();
  }

  /** Stops after the step in hand (an event being applied is applied whole), and gives the lease up for another sidecar. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.running;
    await this.client.close();
  }

  /** A stream-updated event said so: polling follows at once. */
  statusChanged(status: StreamStatus): void {
    this.status = status;
    this.nextWorkAt = 0;
    this.wake?.();
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      await this.keepLease();
      if (this.holding && Date.now() >= this.nextWorkAt) await this.workOnce();
      const until = this.holding ? Math.min(this.nextWorkAt, this.lastRenewAt + LEASE_RENEW_MS) : Date.now() + LEASE_RENEW_MS;
      await this.pause(until - Date.now());
    }
    if (this.holding) await this.env.store.releaseLease(this.settings.name, this.env.owner).catch(() => undefined);
  }

  /** Takes the lease, or renews it when due; a store that does not answer means not holding it. */
  private async keepLease(): Promise<void> {
    if (this.holding && Date.now() - this.lastRenewAt < LEASE_RENEW_MS) return;
    const held = await this.env.store.holdLease(this.settings.name, this.env.owner, LEASE_MS).catch(() => false);
    this.lastRenewAt = Date.now();
    if (held && !this.holding) {
      this.env.log.info({ provider: this.settings.name }, 'shared signals stream work taken by this sidecar');
      // What another holder did meanwhile is in the store: set up (read) again, status read again.
      this.setUp = !this.manages;
      this.statusDueAt = 0;
      this.nextWorkAt = 0;
    }
    this.holding = held;
  }

  private async workOnce(): Promise<void> {
    try {
      this.nextWorkAt = Date.now() + (await this.work());
      this.failures = 0;
    } catch (error) {
      this.failures += 1;
      const wait = Math.min(MOST_BACKOFF_MS, this.settings.signals.pollIntervalMs * 2 ** this.failures);
      this.nextWorkAt = Date.now() + wait;
      const reason = error instanceof TransmitterError ? error.reason : error instanceof Error ? error.message : 'failed';
      this.env.log.warn({ provider: this.settings.name, reason, retryInMs: wait }, 'shared signals stream work failed');
      const recorded = this.setUp ? this.recordPoll(reason) : this.env.store.updateStream(this.settings.name, { setupProblem: reason });
      await recorded.catch(() => undefined);
    }
  }

  /** One round of work; resolves with how long to wait before the next. */
  private async work(): Promise<number> {
    const { signals } = this.settings;
    if (this.manages) {
      await this.setUpStream();
      if (Date.now() >= this.statusDueAt) await this.readStatus();
    } else if (Date.now() >= this.statusDueAt) {
      // Only stream-updated events tell the status of a stream the operator made: the last one another sidecar heard.
      const recorded = (await this.env.store.readStream(this.settings.name)).status;
      if (this.status === null && recorded !== undefined && isStatus(recorded)) this.status = recorded;
      this.statusDueAt = Number.POSITIVE_INFINITY;
    }
    const untilStatus = Math.min(LEASE_RENEW_MS * 12, Math.max(0, this.statusDueAt - Date.now()));
    if (signals.delivery !== 'poll') return untilStatus;
    const enabled = this.status === null || this.status === 'enabled';
    // A paused or disabled stream is not polled; one tokengate cannot read the status of is polled
    // seldom, to hear the stream-updated event that enables it again.
    if (!enabled && this.readsStatus) return untilStatus;
    const more = await this.pollOnce();
    if (!enabled) return signals.statusIntervalSeconds * 1000;
    return more ? 0 : signals.pollIntervalMs;
  }

  /**
   * The stream this receiver uses: the operator's (`streamId`), or the one tokengate created
   * before (its id in the store), read at the transmitter; else a new one. Then a verification
   * event is asked for, which the listing shows arriving.
   */
  private async setUpStream(): Promise<void> {
    if (this.setUp) return;
    const { name, signals, provider } = this.settings;
    const metadata = await this.client.metadata();
    if (metadata.issuer !== provider.issuer) throw new TransmitterError(`metadata names the issuer ${metadata.issuer}, not the identity provider's`);
    const knownId = signals.streamId !== '' ? signals.streamId : ((await this.env.store.readStream(name)).streamId ?? null);
    let stream = knownId === null ? null : await this.client.readStream(knownId);
    if (stream === null) {
      if (signals.streamId !== '') throw new TransmitterError(`has no stream ${signals.streamId}`);
      stream = await this.client.createStream(this.wantedStream());
      this.env.log.info({ provider: name, streamId: stream.streamId }, 'shared signals stream created');
    }
    this.checkStream(stream);
    this.streamId = stream.streamId;
    this.pollUrl = signals.pollUrl !== '' ? signals.pollUrl : stream.endpointUrl;
    if (signals.delivery === 'poll' && this.pollUrl === null) throw new TransmitterError('stream names no poll endpoint');
    await this.env.store.updateStream(name, { streamId: stream.streamId, pollUrl: this.pollUrl ?? '', setupAt: String(Date.now()), setupProblem: '' });
    if (metadata.verificationEndpoint !== null) {
      const state = randomUUID();
      await this.env.store.updateStream(name, { verificationState: state });
      await this.client.requestVerification(stream.streamId, state);
    }
    this.setUp = true;
  }

  private wantedStream(): Record<string, unknown> {
    const { name, signals, pushEndpointUrl } = this.settings;
    const requested =
      signals.events.length > 0
        ? signals.events
        : Object.entries(EVENT_TYPES)
            .filter(([short]) => short !== 'verification' && short !== 'stream-updated')
            .map(([, uri]) => uri);
    const delivery =
      signals.delivery === 'push'
        ? { method: DELIVERY_METHODS.push, endpoint_url: pushEndpointUrl, authorization_header: signals.pushAuthorization }
        : { method: DELIVERY_METHODS.poll };
    return { delivery, events_requested: requested, description: `tokengate receiver ${name}` };
  }

  private checkStream(stream: StreamConfiguration): void {
    const { name, signals, audience } = this.settings;
    if (stream.deliveryMethod !== DELIVERY_METHODS[signals.delivery])
      throw new TransmitterError(`stream ${stream.streamId} delivers by ${stream.deliveryMethod || 'an unnamed method'}, not ${signals.delivery}`);
    if (stream.audience.length > 0 && !stream.audience.includes(audience))
      this.env.log.warn(
        { provider: name, streamId: stream.streamId },
        "shared signals stream's audience is not this receiver's: its events will be refused (invalid_audience)",
      );
  }

  private async readStatus(): Promise<void> {
    const { name, signals } = this.settings;
    this.statusDueAt = Date.now() + signals.statusIntervalSeconds * 1000;
    if ((await this.client.metadata()).statusEndpoint === null) {
      this.statusDueAt = Number.POSITIVE_INFINITY;
      this.readsStatus = false;
      return;
    }
    this.readsStatus = true;
    const { status, reason } = await this.client.readStatus(this.streamId!);
    if (!isStatus(status)) throw new TransmitterError(`answered the unknown stream status "${status.slice(0, 40)}"`);
    if (status !== this.status && status !== 'enabled') this.env.log.warn({ provider: name, status }, 'shared signals stream is not enabled: no events arrive');
    this.status = status;
    await this.env.store.updateStream(name, { status, statusReason: reason ?? '', statusAt: String(Date.now()) });
  }

  /**
   * One poll: it carries the acknowledgements (and refusals) of what was received before, and
   * each SET of the answer is received in its order. Resolves with whether to poll again at once
   * (more available, or acknowledgements to send).
   */
  private async pollOnce(): Promise<boolean> {
    const { name, signals } = this.settings;
    const ack = this.acks;
    const setErrs = this.errors;
    let answer;
    try {
      answer = await this.client.poll(this.pollUrl!, { maxEvents: signals.maxEvents, returnImmediately: true, ack, setErrs });
    } catch (error) {
      this.env.metrics.sharedSignalsPolls.inc({ provider: name, result: 'failed' });
      throw error;
    }
    this.env.metrics.sharedSignalsPolls.inc({ provider: name, result: 'answered' });
    // Delivered: the transmitter has them (sent again after a lost answer, they are harmless).
    this.acks = [];
    this.errors = {};
    await this.recordPoll('answered');
    for (const [jti, set] of answer.sets) {
      const receipt = await receiveSet(set, this.settings, this.env, 'poll', { listedAs: jti });
      if (receipt.outcome === 'accepted') this.acks.push(jti);
      else if (receipt.outcome === 'refused') this.errors[jti] = { err: receipt.refusal.error, description: receipt.refusal.description };
      else if (receipt.error.code !== 'SET_BEING_APPLIED') throw receipt.error;
    }
    return answer.moreAvailable || this.acks.length > 0 || Object.keys(this.errors).length > 0;
  }

  private async recordPoll(result: string): Promise<void> {
    const now = Date.now();
    if (result === this.lastPollRecord.result && now - this.lastPollRecord.at < POLL_RECORD_MS) return;
    this.lastPollRecord = { at: now, result };
    await this.env.store.updateStream(this.settings.name, { lastPollAt: String(now), lastPollResult: result });
  }

  private pause(ms: number): Promise<void> {
    if (this.stopping || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = null;
        done();
      };
    });
  }
}

function isStatus(value: string): value is StreamStatus {
  return (STREAM_STATUSES as readonly string[]).includes(value);
}
