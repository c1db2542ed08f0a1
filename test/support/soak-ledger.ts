/**
 * What the chaos soak's clients saw, and the verdict drawn from those answers alone. A request
 * has an answer (its status), was cut (0: the connection closed without one) or hung (-1: no
 * answer within HUNG_MS). Each is judged by what its credential was when it was sent and when
 * it was answered:
 * - valid: a token the token endpoint answered 200 for, nothing sent to revoke it;
 * - revoked: /oauth/revoke answered 200 for it, or a replay of its family's refresh token was
 *   answered 400, at least REVOCATION_SETTLE_MS before the request;
 * - unknown: minted with the deployment's key, never stored;
 * - uncertain (a revocation or replay in flight, or answered otherwise): not judged.
 * 503s are allowed inside a failover's window only, cuts only around a worker's death.
 */

/** A request with no answer after this long hung. */
export const HUNG_MS = 10_000;
/** How long after a revocation's 200 every process has dropped the token (the feed's delivery, on a loaded machine). */
export const REVOCATION_SETTLE_MS = 200;
/**
 * How long after the promotion a client may still get 503 (docs/store.md, "During a failover":
 * until the client has asked the sentinels again, 1 to 2 s).
 */
export const AFTER_PROMOTION_MS = 2_000;
/**
 * How long after a replica reports in sync a write may still fail (docs/store.md, "Redis
 * settings that decide what a failover costs": after a sync over the socket the replica's next
 * acknowledgement can take a second, and a write waiting for it fails at store.commandTimeoutMs).
 */
export const AFTER_REPLICA_IN_SYNC_MS = 1_000;
/** A request cut by a worker's death was in flight when it died, or sent this soon after on a connection the client had not yet seen close. */
export const CUT_AFTER_KILL_MS = 1_000;

/** The kinds of request that write to the store (a DPoP proof's replay mark included). */
const WRITES = new Set([
  'issue client_credentials',
  'issue DPoP-bound',
  'revoke',
  'authorization page',
  'sign-in',
  'consent',
  'code',
  'code presented twice',
  'refresh',
  'refresh token replayed',
  'gateway DPoP',
  'gateway DPoP proof replayed',
]);

export const CUT = 0;
export const HUNG = -1;

export interface Failover {
  startedMs: number;
  promotedMs: number;
  /** When the old master was seen in sync as the new one's replica (polled every 50 ms). */
  replicaInSyncMs: number;
  healthyMs: number;
}

export interface Kill {
  sidecar: string;
  pid: number;
  killedMs: number;
  /** ms after the kill until the sidecar ran two live workers again. */
  replacedAfterMs: number | null;
}

interface Event {
  what: string;
  status: number;
  sentMs: number;
  answeredMs: number;
}

type Judged = 'valid' | 'revoked' | 'unknown' | 'write';

const EXAMPLES = 10;

export class SoakLedger {
  readonly startedAt = performance.now();
  /** Answers per kind of request and status. */
  readonly counts: Record<string, Record<number, number>> = {};
  readonly failovers: Failover[] = [];
  readonly kills: Kill[] = [];
  private readonly unavailable: Event[] = [];
  private readonly cut: Event[] = [];
  readonly hung: Event[] = [];
  readonly validRefused: Event[] = [];
  readonly revokedAccepted: Event[] = [];
  readonly unknownAccepted: Event[] = [];
  readonly unexpected: Event[] = [];
  /** How many 200s each single-use credential earned: codes, refresh tokens, DPoP proofs. */
  readonly uses = { codes: new Map<string, number>(), refreshTokens: new Map<string, number>(), proofs: new Map<string, number>() };
  quotaAdmitted = 0;
  limitedAdmitted = 0;

  now(): number {
    return performance.now() - this.startedAt;
  }

  /**
   * Counts an answer and judges it. `expected` are the statuses this request may get besides
   * 503; `judged` says what the credential was at sending, and `stillSo` whether it still is.
   */
  record(what: string, status: number, sentMs: number, expected: readonly number[], judged: Judged = 'write', stillSo = true): void {
    const event = { what, status, sentMs, answeredMs: this.now() };
    const table = (this.counts[what] ??= {});
    table[status] = (table[status] ?? 0) + 1;
    if (status === HUNG) this.hung.push(event);
    else if (status === CUT) this.cut.push(event);
    else if (status === 503) this.unavailable.push(event);
    else if (judged === 'valid' && stillSo && (status === 401 || status === 403)) this.validRefused.push(event);
    else if (judged === 'revoked' && status === 200) this.revokedAccepted.push(event);
    else if (judged === 'unknown' && status === 200) this.unknownAccepted.push(event);
    else if (!expected.includes(status) && (judged === 'write' || stillSo)) this.unexpected.push(event);
  }

  use(kind: keyof SoakLedger['uses'], credential: string): void {
    this.uses[kind].set(credential, (this.uses[kind].get(credential) ?? 0) + 1);
  }

  /** No master (reads and writes), or a replica just back in sync (writes only). */
  private inFailoverWindow(event: Event): boolean {
    const within = (from: number, to: number) => event.answeredMs >= from && event.sentMs <= to;
    return this.failovers.some(
      (failover) =>
        within(failover.startedMs, failover.promotedMs + AFTER_PROMOTION_MS) ||
        (WRITES.has(event.what) && within(failover.replicaInSyncMs - 50, failover.replicaInSyncMs + AFTER_REPLICA_IN_SYNC_MS)),
    );
  }

  private nearKill(event: Event): boolean {
    return this.kills.some((kill) => event.answeredMs >= kill.killedMs && event.sentMs <= kill.killedMs + CUT_AFTER_KILL_MS);
  }

  verdict(): SoakVerdict {
    const usedTwice = (uses: Map<string, number>) => [...uses.values()].filter((count) => count > 1).length;
    const outsideWindows = this.unavailable.filter((event) => !this.inFailoverWindow(event));
    const writesOutsideWindows = outsideWindows.filter((event) => WRITES.has(event.what));
    const readsOutsideWindows = outsideWindows.filter((event) => !WRITES.has(event.what));
    const writes = Object.entries(this.counts)
      .filter(([what]) => WRITES.has(what))
      .reduce((sum, [, table]) => sum + Object.values(table).reduce((a, b) => a + b, 0), 0);
    const lastUnavailableAfterPromotion = Math.max(
      0,
      ...this.unavailable.map((event) => {
        const failover = this.failovers.findLast((each) => each.startedMs <= event.answeredMs);
        return failover === undefined ? 0 : Math.round(event.sentMs - failover.promotedMs);
      }),
    );
    return {
      requests: Object.values(this.counts).reduce((sum, table) => sum + Object.values(table).reduce((a, b) => a + b, 0), 0),
      unavailable: this.unavailable.length,
      writes,
      readsUnavailableOutsideWindows: readsOutsideWindows.length,
      writesUnavailableOutsideWindows: writesOutsideWindows.length,
      unavailableOutsideWindowsByKind: byKind(outsideWindows),
      lastUnavailableAfterPromotionMs: lastUnavailableAfterPromotion,
      cuts: this.cut.length,
      cutsAwayFromKills: this.cut.filter((event) => !this.nearKill(event)).length,
      hung: this.hung.length,
      validRefused: this.validRefused.length,
      revokedAccepted: this.revokedAccepted.length,
      unknownAccepted: this.unknownAccepted.length,
      codesHonouredTwice: usedTwice(this.uses.codes),
      refreshTokensHonouredTwice: usedTwice(this.uses.refreshTokens),
      proofsHonouredTwice: usedTwice(this.uses.proofs),
      unexpected: this.unexpected.length,
      examples: {
        readsUnavailableOutsideWindows: readsOutsideWindows.slice(0, EXAMPLES),
        writesUnavailableOutsideWindows: writesOutsideWindows.slice(0, EXAMPLES),
        cutsAwayFromKills: this.cut.filter((event) => !this.nearKill(event)).slice(0, EXAMPLES),
        hung: this.hung.slice(0, EXAMPLES),
        validRefused: this.validRefused.slice(0, EXAMPLES),
        revokedAccepted: this.revokedAccepted.slice(0, EXAMPLES),
        unexpected: this.unexpected.slice(0, EXAMPLES),
      },
    };
  }
}

export interface SoakVerdict {
  requests: number;
  unavailable: number;
  writes: number;
  /** Token checks (gateway, decision listener, metered routes) answered 503 outside a failover's window: valid tokens refused. */
  readsUnavailableOutsideWindows: number;
  /**
   * Writes answered 503 outside a failover's window. A replica that confirms late fails writes
   * (docs/store.md, "A replica lags"), which a loaded machine brings about now and then.
   */
  writesUnavailableOutsideWindows: number;
  unavailableOutsideWindowsByKind: Record<string, number>;
  /** The latest a 503'd request was sent after its failover's promotion, in ms. */
  lastUnavailableAfterPromotionMs: number;
  cuts: number;
  cutsAwayFromKills: number;
  hung: number;
  validRefused: number;
  revokedAccepted: number;
  unknownAccepted: number;
  codesHonouredTwice: number;
  refreshTokensHonouredTwice: number;
  proofsHonouredTwice: number;
  unexpected: number;
  examples: Record<string, Event[]>;
}

function byKind(events: readonly Event[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const event of events) counts[event.what] = (counts[event.what] ?? 0) + 1;
  return counts;
}
