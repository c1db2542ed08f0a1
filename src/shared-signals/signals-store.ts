import { hash } from 'node:crypto';
import type { Backend, RedisDoor } from '../store/backend.js';

/**
 * What the Shared Signals receivers share across sidecars: where each event (SET) stands, what
 * the provider said of each subject, which sidecar polls a stream, and each stream's state.
 * Every operation touches one key, so it runs alike on one server, Sentinel and Cluster.
 */
export interface SignalsStore {
  /**
   * Takes the event (`jti` under its issuer) for this caller to apply: `claimed` (first seen, or
   * a claim that lapsed: this caller applies it), `applying` (another caller is applying it now),
   * `applied` (done before: nothing to do). A claim lapses after `claimMs`, so an event whose
   * applier died is applied by the next delivery.
   */
  claimEvent(issuer: string, jti: string, claimMs: number): Promise<EventClaim>;
  /** The event was applied: it stays `applied` for `keepMs` (as long as a delivery of it can be accepted). */
  completeEvent(issuer: string, jti: string, keepMs: number): Promise<void>;
  /** The application failed: the event may be claimed again at once. */
  releaseEvent(issuer: string, jti: string): Promise<void>;
  /**
   * Records what the provider said of a subject: `revokedBefore` (epoch seconds; identity
   * assertions issued before it are refused, kept the later of two), `disabled` (the account is
   * disabled or gone, until the provider says it is enabled). A subject not disabled is forgotten
   * after `keepMs` (longer than any assertion of it lives).
   */
  markSubject(issuer: string, subject: SubjectKey, change: SubjectChange, keepMs: number): Promise<void>;
  /** What was said of a subject, by any of its names (one record merged: the latest revocation, disabled by any). */
  subjectState(issuer: string, subjects: readonly SubjectKey[]): Promise<SubjectState>;
  /** Takes or keeps the lease of one receiver's stream work for `ms`: true while `owner` holds it. */
  holdLease(receiver: string, owner: string, ms: number): Promise<boolean>;
  /** Gives the lease up, when `owner` still holds it. */
  releaseLease(receiver: string, owner: string): Promise<void>;
  readStream(receiver: string): Promise<StreamRecord>;
  /** Sets these fields of the stream's record (an empty string clears one). */
  updateStream(receiver: string, fields: StreamRecord): Promise<void>;
}

export type EventClaim = 'claimed' | 'applying' | 'applied';

/** How a provider named a subject: by its `sub`, or by the e-mail address its assertions name the user by. */
export interface SubjectKey {
  readonly by: 'sub' | 'email';
  readonly value: string;
}

export interface SubjectChange {
  readonly revokedBefore?: number;
  readonly disabled?: boolean;
}

export interface SubjectState {
  /** Epoch seconds; 0: no revocation remembered. */
  readonly revokedBefore: number;
  readonly disabled: boolean;
}

/** One stream's state as the sidecars share it: flat strings (times as epoch ms), absent when unknown. */
export type StreamRecord = Partial<Record<StreamField, string>>;

export const STREAM_FIELDS = [
  'streamId',
  'pollUrl',
  'status',
  'statusReason',
  'statusAt',
  'verificationState',
  'verifiedAt',
  'lastEventType',
  'lastEventOutcome',
  'lastEventAt',
  'lastPollAt',
  'lastPollResult',
  'setupAt',
  'setupProblem',
] as const;
export type StreamField = (typeof STREAM_FIELDS)[number];

const EVENT_MARK = { applying: 'applying', applied: 'applied' } as const;

/** Issuer and name hashed: an issuer URL, a `jti` or an address may be long, and hold characters a key should not. */
function digest(...parts: string[]): string {
  return hash('sha256', parts.join('\n'), 'base64url');
}

const subjectDigest = (issuer: string, subject: SubjectKey) => digest(issuer, subject.by, subject.value);

const CLAIM_EVENT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] the event's mark; ARGV[1] how long a claim lasts (ms)
local mark = redis.call('GET', KEYS[1])
if mark then return mark end
redis.call('SET', KEYS[1], 'applying', 'PX', ARGV[1])
return 'claimed'
`,
} as const;

const RELEASE_EVENT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] the event's mark: removed only while it is a claim (an applied mark stays)
if redis.call('GET', KEYS[1]) == 'applying' then return redis.call('DEL', KEYS[1]) end
return 0
`,
} as const;

const MARK_SUBJECT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] the subject's hash; ARGV[1] revokedBefore ('' none); ARGV[2] 'disable', 'enable' or ''; ARGV[3] keep (ms)
if ARGV[1] ~= '' then
  local current = tonumber(redis.call('HGET', KEYS[1], 'revokedBefore') or '0')
  if tonumber(ARGV[1]) > current then redis.call('HSET', KEYS[1], 'revokedBefore', ARGV[1]) end
end
if ARGV[2] == 'disable' then redis.call('HSET', KEYS[1], 'disabled', '1') end
if ARGV[2] == 'enable' then redis.call('HDEL', KEYS[1], 'disabled') end
if redis.call('HEXISTS', KEYS[1], 'disabled') == 1 then
  redis.call('PERSIST', KEYS[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 and redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
`,
} as const;

const HOLD_LEASE = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] the lease; ARGV[1] the owner; ARGV[2] how long (ms)
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`,
} as const;

const RELEASE_LEASE = {
  numberOfKeys: 1,
  lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`,
} as const;

/**
 * Keys: `ssf-event:<digest>` ("applying" or "applied", expiring), `ssf-subject:<digest>` (hash:
 * revokedBefore, disabled), `ssf-lease:<receiver>` (the owner's id, expiring), `ssf-stream:<receiver>`
 * (hash of the stream's state). Every write is confirmed by the replicas a failover could promote
 * (the door's rule), so a promotion forgets neither an applied event nor a disabled account.
 */
class RedisSignalsStore implements SignalsStore {
  constructor(private readonly door: RedisDoor) {
    door.defineScript('ssfClaimEvent', CLAIM_EVENT);
    door.defineScript('ssfReleaseEvent', RELEASE_EVENT);
    door.defineScript('ssfMarkSubject', MARK_SUBJECT);
    door.defineScript('ssfHoldLease', HOLD_LEASE);
    door.defineScript('ssfReleaseLease', RELEASE_LEASE);
  }

  claimEvent(issuer: string, jti: string, claimMs: number): Promise<EventClaim> {
    return this.door.write<EventClaim>('ssfClaimEvent', this.eventKey(issuer, jti), claimMs);
  }

  async completeEvent(issuer: string, jti: string, keepMs: number): Promise<void> {
    await this.door.write('set', this.eventKey(issuer, jti), EVENT_MARK.applied, 'PX', keepMs);
  }

  async releaseEvent(issuer: string, jti: string): Promise<void> {
    await this.door.write('ssfReleaseEvent', this.eventKey(issuer, jti));
  }

  async markSubject(issuer: string, subject: SubjectKey, change: SubjectChange, keepMs: number): Promise<void> {
    const disabled = change.disabled === undefined ? '' : change.disabled ? 'disable' : 'enable';
    await this.door.write('ssfMarkSubject', this.subjectKey(issuer, subject), change.revokedBefore ?? '', disabled, keepMs);
  }

  async subjectState(issuer: string, subjects: readonly SubjectKey[]): Promise<SubjectState> {
    const read = await Promise.all(
      subjects.map((subject) => this.door.read<Array<string | null>>('hmget', this.subjectKey(issuer, subject), 'revokedBefore', 'disabled')),
    );
    return {
      revokedBefore: Math.max(0, ...read.map(([revokedBefore]) => Number(revokedBefore ?? 0))),
      disabled: read.some(([, disabled]) => disabled === '1'),
    };
  }

  async holdLease(receiver: string, owner: string, ms: number): Promise<boolean> {
    return (await this.door.write<number>('ssfHoldLease', this.door.key(`ssf-lease:${receiver}`), owner, ms)) === 1;
  }

  async releaseLease(receiver: string, owner: string): Promise<void> {
    await this.door.write('ssfReleaseLease', this.door.key(`ssf-lease:${receiver}`), owner);
  }

  async readStream(receiver: string): Promise<StreamRecord> {
    const fields = await this.door.read<Record<string, string>>('hgetall', this.streamKey(receiver));
    return pickStreamFields(fields);
  }

  async updateStream(receiver: string, fields: StreamRecord): Promise<void> {
    const set = Object.entries(fields).filter(([, value]) => value !== '');
    const cleared = Object.entries(fields).filter(([, value]) => value === '');
    if (set.length > 0) await this.door.write('hset', this.streamKey(receiver), ...set.flat());
    if (cleared.length > 0) await this.door.write('hdel', this.streamKey(receiver), ...cleared.map(([field]) => field));
  }

  private eventKey(issuer: string, jti: string): string {
    return this.door.key(`ssf-event:${digest(issuer, jti)}`);
  }

  private subjectKey(issuer: string, subject: SubjectKey): string {
    return this.door.key(`ssf-subject:${subjectDigest(issuer, subject)}`);
  }

  private streamKey(receiver: string): string {
    return this.door.key(`ssf-stream:${receiver}`);
  }
}

/** One process (the memory store of a single instance): the same rules in maps, each entry until it expires. */
class MemorySignalsStore implements SignalsStore {
  private readonly events = new Map<string, { mark: EventClaim; until: number }>();
  private readonly subjects = new Map<string, { revokedBefore: number; disabled: boolean; until: number }>();
  private readonly leases = new Map<string, { owner: string; until: number }>();
  private readonly streams = new Map<string, StreamRecord>();

  async claimEvent(issuer: string, jti: string, claimMs: number): Promise<EventClaim> {
    const key = digest(issuer, jti);
    const now = Date.now();
    this.sweep(now);
    const mark = this.events.get(key);
    if (mark !== undefined) return mark.mark;
    this.events.set(key, { mark: EVENT_MARK.applying, until: now + claimMs });
    return 'claimed';
  }

  async completeEvent(issuer: string, jti: string, keepMs: number): Promise<void> {
    this.events.set(digest(issuer, jti), { mark: EVENT_MARK.applied, until: Date.now() + keepMs });
  }

  async releaseEvent(issuer: string, jti: string): Promise<void> {
    const key = digest(issuer, jti);
    if (this.events.get(key)?.mark === EVENT_MARK.applying) this.events.delete(key);
  }

  async markSubject(issuer: string, subject: SubjectKey, change: SubjectChange, keepMs: number): Promise<void> {
    const key = subjectDigest(issuer, subject);
    const now = Date.now();
    this.sweep(now);
    const current = this.subjects.get(key) ?? { revokedBefore: 0, disabled: false, until: 0 };
    const next = {
      revokedBefore: Math.max(current.revokedBefore, change.revokedBefore ?? 0),
      disabled: change.disabled ?? current.disabled,
      until: Math.max(current.until, now + keepMs),
    };
    if (next.disabled) next.until = Number.POSITIVE_INFINITY;
    else if (current.disabled) next.until = now + keepMs;
    this.subjects.set(key, next);
  }

  async subjectState(issuer: string, subjects: readonly SubjectKey[]): Promise<SubjectState> {
    const now = Date.now();
    const live = subjects.map((subject) => this.subjects.get(subjectDigest(issuer, subject))).filter((state) => state !== undefined && state.until > now);
    return { revokedBefore: Math.max(0, ...live.map((state) => state!.revokedBefore)), disabled: live.some((state) => state!.disabled) };
  }

  async holdLease(receiver: string, owner: string, ms: number): Promise<boolean> {
    const now = Date.now();
    const lease = this.leases.get(receiver);
    if (lease !== undefined && lease.until > now && lease.owner !== owner) return false;
    this.leases.set(receiver, { owner, until: now + ms });
    return true;
  }

  async releaseLease(receiver: string, owner: string): Promise<void> {
    if (this.leases.get(receiver)?.owner === owner) this.leases.delete(receiver);
  }

  async readStream(receiver: string): Promise<StreamRecord> {
    return { ...this.streams.get(receiver) };
  }

  async updateStream(receiver: string, fields: StreamRecord): Promise<void> {
    const record: StreamRecord = { ...this.streams.get(receiver) };
    for (const [field, value] of Object.entries(fields) as Array<[StreamField, string]>) {
      if (value === '') delete record[field];
      else record[field] = value;
    }
    this.streams.set(receiver, record);
  }

  private sweep(now: number): void {
    for (const [key, mark] of this.events) if (mark.until <= now) this.events.delete(key);
    for (const [key, state] of this.subjects) if (state.until <= now) this.subjects.delete(key);
  }
}

function pickStreamFields(fields: Record<string, string>): StreamRecord {
  const record: StreamRecord = {};
  for (const field of STREAM_FIELDS) if (fields[field] !== undefined) record[field] = fields[field];
  return record;
}

export function signalsStoreFor(backend: Backend): SignalsStore {
  return backend.driver === 'redis' ? new RedisSignalsStore(backend) : new MemorySignalsStore();
}
