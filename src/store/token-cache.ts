import { DigestTable, grown, type DropReason } from './digest-table.js';
import { InternedStrings } from './interned-strings.js';
import type { AccessTokenRecord, ActingParty } from './tokens/port.js';
import type { VerifiedToken } from './verified-token.js';

/**
 * The two tables of the token cache (./cached.ts says what it answers and when): valid tokens
 * and unknown ones, each a DigestTable (16-byte keys, LRU order, in typed arrays) with its
 * columns. What a valid token's record holds is kept as numbers: its times as such, its user,
 * family and DPoP key thumbprint as ids of InternedStrings, and what many tokens share (kind,
 * client id, scopes, audience, the acting party of an exchanged token) as the id of a profile. No object per entry; the object a hit
 * hands out is built from the columns when asked for and kept in a small table of views, so a
 * token served again and again is one object, as it was when every entry was one.
 */

/** One cached token as the cache hands it out: the verified token and how long the cache answers for it. */
export interface CachedToken extends VerifiedToken {
  /** Epoch ms until which the cache answers for this token by itself. */
  readonly freshUntil: number;
  /** Epoch ms until which the cache answers for it while the store fails (>= freshUntil, <= expiresAt). */
  readonly staleUntil: number;
}

/** What tokens of one application with the same grant share: one frozen copy per distinct set. */
interface Profile {
  readonly key: string;
  readonly kind: VerifiedToken['kind'];
  readonly clientId: string;
  readonly scopes: string[];
  readonly scope: string;
  readonly audience: string[];
  /** The party acting for the user, on a token from a token exchange; undefined otherwise. */
  readonly act: ActingParty | undefined;
}

const NO_AUDIENCE = Object.freeze([]) as unknown as string[];
/** Marks a time kept in ValidTokens' wideTimes. */
const WIDE = 0xffffffff;
/** Whether a span of ms fits a 32-bit column (below WIDE, which marks the others). */
const fitsColumn = (ms: number) => Number.isInteger(ms) && ms >= 0 && ms < WIDE;
/** Most views (objects handed out by hits) kept: some 200 bytes each, 3 MB in all; a token beyond them costs its hit a new object (about half a microsecond). */
const MOST_VIEWS = 16384;

/**
 * Profiles, counted by the entries holding them. One not held (just read, or its last entry
 * gone) stays shareable until those not held outnumber the held ones (and 1,024): then they are
 * swept at once. So the table never holds more than twice what the cache does, and two reads of
 * the same kind of token in flight together still share one copy.
 */
class TokenProfiles {
  private readonly ids = new Map<string, number>();
  private profiles: Array<Profile | undefined> = [undefined];
  private references: number[] = [0];
  private free: number[] = [];
  private unheld = 0;

  /** The profile of `token`, shared with every entry and read that has the same one. */
  of(token: Pick<AccessTokenRecord, 'kind' | 'clientId' | 'scopes' | 'audience' | 'act'>): Profile {
    const scope = token.scopes.join(' ');
    const audience = token.audience ?? [];
    const act = token.act ?? undefined;
    const key = `${token.kind}\n${token.clientId}\n${scope}\n${audience.join(' ')}${act === undefined ? '' : `\n${JSON.stringify(act)}`}`;
    const id = this.ids.get(key);
    if (id !== undefined) return this.profiles[id]!;
    const profile = Object.freeze({
      key,
      kind: token.kind,
      clientId: token.clientId,
      scopes: Object.freeze([...token.scopes]) as string[],
      scope,
      audience: audience.length === 0 ? NO_AUDIENCE : (Object.freeze([...audience]) as string[]),
      act: act === undefined ? undefined : deepFreeze(structuredClone(act)),
    });
    this.add(profile, 0);
    return profile;
  }

  acquire(profile: Profile): number {
    const known = this.ids.get(profile.key);
    if (known === undefined) return this.add(profile, 1);
    if (this.references[known]!++ === 0) this.unheld--;
    return known;
  }

  release(id: number): void {
    if (--this.references[id]! > 0) return;
    this.unheld++;
    this.sweepWhenCrowded();
  }

  at(id: number): Profile {
    return this.profiles[id]!;
  }

  /** Ids of the profiles of `clientId`. */
  ofClient(clientId: string): Set<number> {
    const ids = new Set<number>();
    for (let id = 1; id < this.profiles.length; id++) if (this.profiles[id]?.clientId === clientId) ids.add(id);
    return ids;
  }

  clear(): void {
    this.ids.clear();
    this.profiles = [undefined];
    this.references = [0];
    this.free = [];
    this.unheld = 0;
  }

  private add(profile: Profile, references: number): number {
    const id = this.free.pop() ?? this.profiles.length;
    this.profiles[id] = profile;
    this.references[id] = references;
    this.ids.set(profile.key, id);
    if (references === 0) {
      this.unheld++;
      this.sweepWhenCrowded();
    }
    return id;
  }

  private sweepWhenCrowded(): void {
    if (this.unheld <= Math.max(1024, this.ids.size - this.unheld)) return;
    for (let id = 1; id < this.profiles.length; id++) {
      if (this.profiles[id] === undefined || this.references[id] !== 0) continue;
      this.ids.delete(this.profiles[id]!.key);
      this.profiles[id] = undefined;
      this.free.push(id);
    }
    this.unheld = 0;
  }
}

function deepFreeze(party: ActingParty): ActingParty {
  if (party.act !== undefined) deepFreeze(party.act);
  return Object.freeze(party);
}

/** The tokens the store knew, as the cache keeps them. */
export class ValidTokens {
  private readonly table: DigestTable;
  private readonly profiles = new TokenProfiles();
  private readonly strings = new InternedStrings();
  // Columns, by slot.
  private expiresAt = new Float64Array(0);
  /**
   * issuedAt and freshUntil as ms before expiresAt: 32 bits hold 49 days. A token issued longer
   * before its expiry, or cached longer before it, keeps the exact value in `wideTimes` (marked WIDE).
   */
  private issuedBefore = new Uint32Array(0);
  private freshBefore = new Uint32Array(0);
  private readonly wideTimes = new Map<number, { issuedAt: number; freshUntil: number }>();
  private profile = new Uint32Array(0);
  /** Interned ids; 0: none (null, or no DPoP binding). */
  private user = new Uint32Array(0);
  private family = new Uint32Array(0);
  private jkt = new Uint32Array(0);
  // Views: slot & viewMask -> the object handed out for that slot (viewSlots: slot + 1, 0 none).
  private readonly views: Array<CachedToken | undefined>;
  private readonly viewSlots: Int32Array;
  private readonly viewMask: number;
  /** Values kept with an entry (see attach), by slot. */
  private readonly attachments = new Map<number, Map<string, object | string>>();

  constructor(
    capacity: number,
    private readonly ttlMs: number,
    private readonly staleMs: number,
    onEvict: () => void,
    /** Most objects kept for hits to hand out again (a power of two). */
    mostViews = MOST_VIEWS,
  ) {
    this.table = new DigestTable(
      capacity,
      (slot, reason) => this.dropped(slot, reason, onEvict),
      (length) => this.grow(length),
    );
    const viewCount = Math.min(mostViews, 2 ** Math.ceil(Math.log2(capacity)));
    this.views = new Array<CachedToken | undefined>(viewCount).fill(undefined);
    this.viewSlots = new Int32Array(viewCount);
    this.viewMask = viewCount - 1;
  }

  get size(): number {
    return this.table.size;
  }

  /** The entry for `digest`, as the most recently used; undefined when not cached. */
  get(digest: string): CachedToken | undefined {
    const slot = this.table.find(digest);
    if (slot < 0) return undefined;
    this.table.touch(slot);
    const view = slot & this.viewMask;
    if (this.viewSlots[view] === slot + 1) return this.views[view];
    return this.keepView(slot, this.entryAt(slot));
  }

  /** Whether `entry` is still what the cache holds for `digest` (not dropped or replaced since); recency unchanged. */
  holds(digest: string, entry: CachedToken): boolean {
    const slot = this.table.find(digest);
    return slot >= 0 && this.expiresAt[slot] === entry.expiresAt && this.freshUntilAt(slot) === entry.freshUntil;
  }

  /** The entry a record read at `now` makes; frozen, sharing what it can with the entries held. */
  entryFor(record: AccessTokenRecord, now: number): CachedToken {
    const freshUntil = Math.min(now + this.ttlMs, record.expiresAt);
    return this.entry(this.profiles.of(record), record.userId, record.familyId, record.jkt, record.issuedAt, record.expiresAt, freshUntil);
  }

  /** Keeps `entry` for `digest` (replacing what was kept), unless the cache would never answer for it. */
  remember(digest: string, entry: CachedToken, now: number): void {
    if (entry.staleUntil <= now) return;
    let slot = this.table.find(digest);
    if (slot >= 0) {
      this.release(slot);
      this.table.touch(slot);
    } else slot = this.table.insert(digest);
    this.setTimes(slot, entry);
    this.profile[slot] = this.profiles.acquire(this.profiles.of(entry));
    this.user[slot] = entry.userId === null ? 0 : this.strings.acquire(entry.userId);
    this.family[slot] = entry.familyId === null ? 0 : this.strings.acquire(entry.familyId);
    this.jkt[slot] = entry.jkt === undefined ? 0 : this.strings.acquire(entry.jkt);
    this.keepView(slot, entry);
  }

  delete(digest: string): void {
    const slot = this.table.find(digest);
    if (slot >= 0) this.table.delete(slot);
  }

  /** Drops every entry of a user, a token family or an application (a scan of numbers, no record read). */
  deleteMatching(field: 'userId' | 'familyId' | 'clientId', value: string): void {
    let matches: (slot: number) => boolean;
    if (field === 'clientId') {
      const profiles = this.profiles.ofClient(value);
      if (profiles.size === 0) return;
      matches = (slot) => profiles.has(this.profile[slot]!);
    } else {
      const id = this.strings.find(value);
      if (id === 0) return;
      const column = field === 'userId' ? this.user : this.family;
      matches = (slot) => column[slot] === id;
    }
    for (const slot of this.table.slots()) if (matches(slot)) this.table.delete(slot);
  }

  /** Drops every entry of one user at one application. */
  deleteUserClient(userId: string, clientId: string): void {
    const profiles = this.profiles.ofClient(clientId);
    const id = this.strings.find(userId);
    if (profiles.size === 0 || id === 0) return;
    for (const slot of this.table.slots()) if (this.user[slot] === id && profiles.has(this.profile[slot]!)) this.table.delete(slot);
  }

  clear(): void {
    this.table.clear();
    this.profiles.clear();
    this.strings.clear();
    this.views.fill(undefined);
    this.viewSlots.fill(0);
    this.attachments.clear();
    this.wideTimes.clear();
  }

  /**
   * Keeps `value` with the cached entry of `digest` under `key` (something derived from the token
   * that costs to make, such as a signed identity assertion per audience and key id); it goes
   * when the entry goes (evicted, revoked, replaced, cleared). Nothing is kept for a token not cached.
   */
  attach(digest: string, key: string, value: object | string): void {
    const slot = this.table.find(digest);
    if (slot < 0) return;
    let values = this.attachments.get(slot);
    if (values === undefined) this.attachments.set(slot, (values = new Map()));
    values.set(key, value);
  }

  /** What was attached to the cached entry of `digest` under `key`. */
  attached(digest: string, key: string): object | string | undefined {
    const slot = this.table.find(digest);
    return slot < 0 ? undefined : this.attachments.get(slot)?.get(key);
  }

  private entry(
    profile: Profile,
    userId: string | null,
    familyId: string | null,
    jkt: string | undefined,
    issuedAt: number,
    expiresAt: number,
    freshUntil: number,
  ): CachedToken {
    // Always the same properties in the same order: one hidden class for every entry.
    return Object.freeze({
      kind: profile.kind,
      clientId: profile.clientId,
      userId,
      scopes: profile.scopes,
      scope: profile.scope,
      familyId,
      audience: profile.audience,
      act: profile.act,
      issuedAt,
      expiresAt,
      jkt,
      freshUntil,
      staleUntil: Math.min(freshUntil + this.staleMs, expiresAt),
    });
  }

  private entryAt(slot: number): CachedToken {
    const user = this.user[slot]!;
    const family = this.family[slot]!;
    const jkt = this.jkt[slot]!;
    return this.entry(
      this.profiles.at(this.profile[slot]!),
      user === 0 ? null : this.strings.value(user),
      family === 0 ? null : this.strings.value(family),
      jkt === 0 ? undefined : this.strings.value(jkt),
      this.issuedAtOf(slot),
      this.expiresAt[slot]!,
      this.freshUntilAt(slot),
    );
  }

  private setTimes(slot: number, { issuedAt, expiresAt, freshUntil }: CachedToken): void {
    this.expiresAt[slot] = expiresAt;
    const issuedBefore = expiresAt - issuedAt;
    const freshBefore = expiresAt - freshUntil;
    if (fitsColumn(issuedBefore) && fitsColumn(freshBefore)) {
      this.issuedBefore[slot] = issuedBefore;
      this.freshBefore[slot] = freshBefore;
      this.wideTimes.delete(slot);
    } else {
      this.issuedBefore[slot] = this.freshBefore[slot] = WIDE;
      this.wideTimes.set(slot, { issuedAt, freshUntil });
    }
  }

  private issuedAtOf(slot: number): number {
    return this.issuedBefore[slot] === WIDE ? this.wideTimes.get(slot)!.issuedAt : this.expiresAt[slot]! - this.issuedBefore[slot]!;
  }

  private freshUntilAt(slot: number): number {
    return this.freshBefore[slot] === WIDE ? this.wideTimes.get(slot)!.freshUntil : this.expiresAt[slot]! - this.freshBefore[slot]!;
  }

  private keepView(slot: number, entry: CachedToken): CachedToken {
    const view = slot & this.viewMask;
    this.views[view] = entry;
    this.viewSlots[view] = slot + 1;
    return entry;
  }

  /** Lets go of what `slot` holds: its interned values, its view, its attachments. */
  private release(slot: number): void {
    this.profiles.release(this.profile[slot]!);
    for (const column of [this.user, this.family, this.jkt]) if (column[slot] !== 0) this.strings.release(column[slot]!);
    const view = slot & this.viewMask;
    if (this.viewSlots[view] === slot + 1) {
      this.viewSlots[view] = 0;
      this.views[view] = undefined;
    }
    this.attachments.delete(slot);
    this.wideTimes.delete(slot);
  }

  private dropped(slot: number, reason: DropReason, onEvict: () => void): void {
    this.release(slot);
    if (reason === 'evict') onEvict();
  }

  private grow(length: number): void {
    this.expiresAt = grown(this.expiresAt, length);
    this.issuedBefore = grown(this.issuedBefore, length);
    this.freshBefore = grown(this.freshBefore, length);
    this.profile = grown(this.profile, length);
    this.user = grown(this.user, length);
    this.family = grown(this.family, length);
    this.jkt = grown(this.jkt, length);
  }
}

/** Tokens the store did not know: digest -> epoch ms until which the token counts as unknown. */
export class UnknownTokens {
  private readonly table: DigestTable;
  private until = new Float64Array(0);

  constructor(capacity: number, onEvict: () => void) {
    this.table = new DigestTable(
      capacity,
      (_slot, reason) => reason === 'evict' && onEvict(),
      (length) => (this.until = grown(this.until, length)),
    );
  }

  get size(): number {
    return this.table.size;
  }

  /** Until when `digest` counts as unknown (and it becomes the most recently used); undefined when not remembered. */
  get(digest: string): number | undefined {
    const slot = this.table.find(digest);
    if (slot < 0) return undefined;
    this.table.touch(slot);
    return this.until[slot];
  }

  set(digest: string, until: number): void {
    let slot = this.table.find(digest);
    if (slot >= 0) this.table.touch(slot);
    else slot = this.table.insert(digest);
    this.until[slot] = until;
  }

  delete(digest: string): void {
    const slot = this.table.find(digest);
    if (slot >= 0) this.table.delete(slot);
  }

  clear(): void {
    this.table.clear();
  }
}
