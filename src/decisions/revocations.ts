import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../config/schema.js';
import { decisionCacheSeconds } from '../config/routes.js';
import type { RevocationEvent, Tokens } from '../store/tokens/port.js';

/**
 * The revocation feed of the decision listener, for an ingress that keeps decisions
 * (docs/ingress.md#revocations-reach-the-kept-decisions): `GET /revocations?after=<cursor>`
 * answers with the digests of the access tokens revoked since the cursor, as soon as there are
 * any, or after POLL_HOLD_MS with none: the heartbeat by which the ingress tells a quiet feed
 * from a cut one. The digests are those of the store's revocation feed, which every sidecar
 * hears (a token, a family, a user's or an application's tokens, each resolved to its access
 * tokens' digests by the store), so an ingress following any one sidecar hears revocations made
 * at every sidecar.
 *
 * A cursor is `<epoch>.<sequence>`. The epoch is drawn when the history starts and again each
 * time this sidecar's own subscription comes back after a cut: revocations of the gap may have
 * been missed, and the history before it is worth nothing. A cursor of another epoch (another
 * sidecar, a restarted one, one whose feed was cut) or older than the history kept is answered
 * `reset`: the ingress drops every decision it keeps. While this sidecar's own subscription is
 * down, a poll is answered 503: the ingress stops keeping decisions until it is back.
 */
export const REVOCATIONS_ENDPOINT = '/revocations';

/** Longest a poll is held when nothing is revoked: an ingress that hears nothing for longer than this (and a margin) knows the feed is cut. */
export const POLL_HOLD_MS = 2_000;

/** Digests kept for cursors that fall behind (a reloading ingress, a slow poll); a cursor older than them is reset. */
const HISTORY_DIGESTS = 100_000;

interface Batch {
  readonly sequence: number;
  readonly digests: readonly string[];
}

interface Waiter {
  readonly response: ServerResponse;
  /** The cursor's epoch and sequence: a history restarted meanwhile answers it with a reset. */
  readonly epoch: string;
  readonly after: number;
  readonly timer: NodeJS.Timeout;
}

export interface IngressRevocations {
  /** Answers a poll of REVOCATIONS_ENDPOINT. */
  answer(request: IncomingMessage, response: ServerResponse): void;
  /** Answers the polls held and stops listening to the store. */
  close(): Promise<void>;
}

/** `config`: the config in effect (a reload replaces it), read for the longest bound of the routes. */
export function ingressRevocations(tokens: Tokens, config: () => Readonly<Config>): IngressRevocations {
  const history = new RevocationHistory();
  const waiters = new Set<Waiter>();
  let up = false;
  let closed = false;
  let unsubscribe: (() => Promise<void>) | null = null;
  const longest = longestBound(config);

  function wakeAll(): void {
    for (const waiter of waiters) finish(waiter);
  }

  function finish(waiter: Waiter): void {
    if (!waiters.delete(waiter)) return;
    clearTimeout(waiter.timer);
    send(waiter.response, waiter.epoch === history.epoch ? waiter.after : -1);
  }

  /** `after`: a sequence of the current epoch, or -1 for none (the answer is a reset). */
  function send(response: ServerResponse, after: number): void {
    if (!up) return unavailable(response);
    const lines = [`cursor ${history.cursor()}`, `keep ${longest()}`];
    const since = history.since(after);
    if (since === null) lines.push('reset');
    else for (const digest of since) lines.push(`revoked ${digest}`);
    const body = `${lines.join('\n')}\n`;
    response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(body) });
    response.end(body);
  }

  void tokens
    .subscribeRevocations({
      onRevoked(event: RevocationEvent) {
        if (!up || event.accessTokens.length === 0) return;
        history.add(event.accessTokens);
        wakeAll();
      },
      onInterrupted() {
        up = false;
        wakeAll();
      },
      onReset() {
        history.restart();
        up = true;
        wakeAll();
      },
    })
    .then(
      (stop) => {
        if (closed) return void stop();
        unsubscribe = stop;
        history.restart();
        up = true;
        wakeAll();
      },
      () => {}, // the store was closed before the subscription came up
    );

  return {
    answer(request, response) {
      if (request.method !== 'GET') {
        response.writeHead(405, { allow: 'GET', 'content-length': 0 });
        return void response.end();
      }
      const after = history.position(cursorOf(request.url!));
      // Something to say at once: revocations since the cursor, a reset, or that this sidecar hears none.
      if (!up || after === null || history.newerThan(after)) return send(response, after ?? -1);
      const waiter: Waiter = { response, epoch: history.epoch, after, timer: setTimeout(() => finish(waiter), POLL_HOLD_MS) };
      waiters.add(waiter);
      response.once('close', () => {
        if (waiters.delete(waiter)) clearTimeout(waiter.timer);
      });
    },
    async close() {
      closed = true;
      up = false;
      wakeAll();
      await unsubscribe?.();
    },
  };
}

/** 503: this sidecar's own subscription is down, and it cannot say what was revoked meanwhile. */
function unavailable(response: ServerResponse): void {
  const body = 'interrupted\n';
  response.writeHead(503, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'retry-after': '1', 'content-length': body.length });
  response.end(body);
}

function cursorOf(url: string): string | null {
  const query = url.indexOf('?');
  return query === -1 ? null : new URLSearchParams(url.slice(query + 1)).get('after');
}

/** The longest bound any route has now: how long an ingress keeps each revoked digest to refuse decisions kept before it heard of it. */
function longestBound(config: () => Readonly<Config>): () => number {
  let of: Readonly<Config> | null = null;
  let seconds = 0;
  return () => {
    const current = config();
    if (current !== of) {
      of = current;
      seconds = current.routes.reduce((most, route) => Math.max(most, decisionCacheSeconds(route, current.decisions)), 0);
    }
    return seconds;
  };
}

/** The revocations heard in this epoch, newest last, as many digests as HISTORY_DIGESTS. */
class RevocationHistory {
  /** Drawn anew at each restart; '' before the first. */
  epoch = '';
  /** The batches kept are those from `start` on: dropping the oldest is a step of `start`, and the array is compacted now and then. */
  private batches: Batch[] = [];
  private start = 0;
  private kept = 0;
  /** The sequence of the last batch, and of the last one dropped: a cursor below `floor` is too old. */
  private last = 0;
  private floor = 0;

  restart(): void {
    this.epoch = randomBytes(9).toString('base64url');
    this.batches = [];
    this.start = 0;
    this.kept = 0;
    this.last = 0;
    this.floor = 0;
  }

  add(digests: readonly string[]): void {
    this.last += 1;
    this.batches.push({ sequence: this.last, digests });
    this.kept += digests.length;
    while (this.kept > HISTORY_DIGESTS && this.batches.length - this.start > 1) {
      const dropped = this.batches[this.start++]!;
      this.kept -= dropped.digests.length;
      this.floor = dropped.sequence;
    }
    if (this.start > 1_024 && this.start * 2 > this.batches.length) {
      this.batches = this.batches.slice(this.start);
      this.start = 0;
    }
  }

  cursor(): string {
    return `${this.epoch}.${this.last}`;
  }

  /** The sequence a cursor names in this epoch, or null: unknown, another epoch, or older than the history. */
  position(cursor: string | null): number | null {
    if (cursor === null || this.epoch === '') return null;
    const dot = cursor.lastIndexOf('.');
    if (dot === -1 || cursor.slice(0, dot) !== this.epoch || !/^\d{1,15}$/.test(cursor.slice(dot + 1))) return null;
    const sequence = Number(cursor.slice(dot + 1));
    return sequence < this.floor || sequence > this.last ? null : sequence;
  }

  newerThan(sequence: number): boolean {
    return this.last > sequence;
  }

  /** Every digest after `sequence`, or null when it is not a position of this history (the ingress must reset). */
  since(sequence: number): string[] | null {
    if (sequence < this.floor || sequence > this.last) return null;
    const digests: string[] = [];
    for (let index = this.batches.length - 1; index >= this.start && this.batches[index]!.sequence > sequence; index--)
      digests.push(...this.batches[index]!.digests);
    return digests;
  }
}
