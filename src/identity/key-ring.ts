import type { Logger } from 'pino';
import { StoreUnavailableError } from '../store/store.js';
import type { KeySetStore } from './key-set-store.js';
import { createKey, openKey, parseKeySet, serializeKeySet, type OpenKey, type SigningAlgorithm, type StoredKey } from './signing-keys.js';

/**
 * How far apart sidecars' and resource services' clocks may be: added wherever one side's time
 * decides what the other must already know (a key's activation, a retired key's last day).
 */
export const CLOCK_MARGIN_SECONDS = 5;

/** The timeline of a key, from `signedIdentity` (docs/gateway.md#key-rotation) or `openidConnect`. */
export interface KeyTimeline {
  readonly algorithm: SigningAlgorithm;
  /** How long what the key signs is valid (an assertion, an ID token). */
  readonly lifetimeMs: number;
  /** How often each sidecar reads the key set again. */
  readonly refreshMs: number;
  /** How long resource services may keep the JWKS (its Cache-Control max-age). */
  readonly jwksMaxAgeMs: number;
  /** A key this old is replaced by a new one on its own; 0: only by hand. */
  readonly rotationIntervalMs: number;
}

/** When a new key starts signing: once every sidecar has read it and every resource service's copy of the JWKS has been renewed since. */
export function activationDelayMs(timeline: KeyTimeline): number {
  return timeline.jwksMaxAgeMs + timeline.refreshMs + CLOCK_MARGIN_SECONDS * 1000;
}

/** How long a replaced key stays published after its successor starts signing: a sidecar late to read the set may sign with it one refresh more, and its last assertion lives on. */
export function retentionMs(timeline: KeyTimeline): number {
  return timeline.lifetimeMs + timeline.refreshMs + CLOCK_MARGIN_SECONDS * 1000;
}

/** What a rotation made: the new key and when it starts signing. */
export interface Rotation {
  readonly kid: string;
  readonly createdAt: number;
  readonly activatesAt: number;
}

/** What a key ring's keys are called where it speaks of them. */
export interface KeyRingNames {
  /** In log lines, e.g. `identity signing key`. */
  readonly key: string;
  /** The config key of the key encryption key, named when a stored key cannot be opened. */
  readonly encryptionKeySetting: string;
}

/**
 * The deployment's signing keys of one kind as one sidecar holds them: read from the shared store at start
 * and again every `refreshMs` (a timer rather than a message: a new key is stored long before it
 * signs, so a sidecar that missed a message would still learn of it in time, and one read per
 * interval is all it costs), opened once each. Signs with the newest key whose activation has
 * come; publishes every key from its creation until its successor has signed for longer than an
 * assertion lives.
 */
export class KeyRing {
  private keys: readonly OpenKey[] = [];
  private serialized: string | null = null;
  private jwks = '{"keys":[]}';
  /** The key signing now, and when the next one takes over (Infinity: none is waiting). */
  private current: OpenKey | null = null;
  private switchAt = Infinity;
  private timer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;

  constructor(
    private readonly store: KeySetStore,
    private readonly timeline: KeyTimeline,
    private readonly encryptionKey: Uint8Array,
    private readonly log: Logger,
    private readonly names: KeyRingNames = { key: 'identity signing key', encryptionKeySetting: 'signedIdentity.keyEncryptionKey' },
  ) {}

  /**
   * Reads the key set, making the first key when the deployment has none (it signs at once: no
   * resource service knows any key yet). `onTimer`: read it again every refreshMs, and rotate
   * when due (the processes that sign; the primary of several workers only rotates by hand).
   */
  async start(onTimer: boolean): Promise<void> {
    await this.refresh();
    if (this.keys.length === 0) {
      const now = Date.now();
      const first = await createKey(this.timeline.algorithm, this.encryptionKey, now, now);
      if (!(await this.store.replace(null, serializeKeySet([first])))) await this.refresh();
      else await this.adopt(serializeKeySet([first]));
    }
    if (!onTimer) return;
    this.timer = setInterval(() => void this.tick(), this.timeline.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** The key to sign with at `now`. */
  signingKey(now: number): OpenKey {
    if (now >= this.switchAt) this.choose(now);
    return this.current!;
  }

  /** The JWKS body: the public halves of the keys published now. */
  jwksBody(): string {
    return this.jwks;
  }

  /** The stored keys, oldest first, without their private halves. */
  describe(): Array<{ kid: string; alg: string; createdAt: number; activatesAt: number }> {
    return this.keys.map(({ kid, alg, createdAt, activatesAt }) => ({ kid, alg, createdAt, activatesAt }));
  }

  /**
   * Makes a new key that starts signing after activationDelayMs, and drops the keys no longer
   * published. A compare-and-set: when another sidecar changed the set meanwhile, read again and
   * retry on that, so two rotations at once make two keys, one after the other, and lose none.
   */
  async rotate(): Promise<Rotation> {
    for (;;) {
      const expected = await this.store.read();
      const stored = expected === null ? [] : parseKeySet(expected);
      const now = Date.now();
      const latest = stored.at(-1);
      // Published the whole delay before it signs, counted from its own creation; never before a
      // key still waiting to sign (made under a longer delay), so keys sign in the order made.
      const activatesAt = Math.max(now + activationDelayMs(this.timeline), latest?.activatesAt ?? 0);
      const created = await createKey(this.timeline.algorithm, this.encryptionKey, now, activatesAt);
      const next = serializeKeySet([...this.stillPublished(stored, now), created]);
      if (await this.store.replace(expected, next)) {
        await this.adopt(next);
        this.log.info({ kid: created.kid, activatesAt: new Date(activatesAt).toISOString() }, `${this.names.key} created`);
        return { kid: created.kid, createdAt: now, activatesAt };
      }
    }
  }

  /** Reads the key set again (at most one read at a time). */
  refresh(): Promise<void> {
    this.refreshing ??= this.store
      .read()
      .then((serialized) => (serialized === null || serialized === this.serialized ? undefined : this.adopt(serialized)))
      .finally(() => {
        this.refreshing = null;
      });
    return this.refreshing;
  }

  /** The timer: read again, rotate when the newest key is older than the interval, and republish what time has changed. */
  private async tick(): Promise<void> {
    try {
      await this.refresh();
      const newest = this.keys.at(-1);
      const now = Date.now();
      if (this.timeline.rotationIntervalMs > 0 && newest !== undefined && now - newest.createdAt >= this.timeline.rotationIntervalMs) await this.rotate();
      this.publish(now);
    } catch (error) {
      // The keys held keep signing; the next tick tries again.
      if (error instanceof StoreUnavailableError) this.log.warn(`the ${this.names.key}s could not be read from the store; the keys held keep signing`);
      else this.log.error({ err: error }, `the ${this.names.key}s could not be read`);
    }
  }

  private async adopt(serialized: string): Promise<void> {
    const stored = parseKeySet(serialized);
    const held = new Map(this.keys.map((key) => [key.kid, key]));
    this.keys = await Promise.all(stored.map((key) => Promise.resolve(held.get(key.kid) ?? openKey(key, this.encryptionKey, this.names.encryptionKeySetting))));
    this.serialized = serialized;
    const now = Date.now();
    this.choose(now);
    this.publish(now);
  }

  private choose(now: number): void {
    let index = 0;
    for (let at = 0; at < this.keys.length; at += 1) if (this.keys[at]!.activatesAt <= now) index = at;
    this.current = this.keys[index]!;
    this.switchAt = this.keys[index + 1]?.activatesAt ?? Infinity;
  }

  private publish(now: number): void {
    const published = this.stillPublished(this.keys, now);
    this.jwks = JSON.stringify({ keys: published.map((key) => key.publicJwk) });
  }

  /** The keys published at `now`: each until its successor has signed for retentionMs. */
  private stillPublished<Key extends StoredKey>(keys: readonly Key[], now: number): Key[] {
    const retention = retentionMs(this.timeline);
    return keys.filter((_key, index) => {
      const successor = keys[index + 1];
      return successor === undefined || successor.activatesAt + retention > now;
    });
  }
}
