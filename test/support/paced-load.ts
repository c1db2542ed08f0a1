import { Agent, request } from 'undici';

/** One answered request of a paced run: when it was sent (ms from the start), by which client, and the status. */
export interface PacedResult {
  readonly sentAtMs: number;
  readonly client: number;
  readonly status: number;
  /** From sending to the whole answer read. */
  readonly latencyMs: number;
}

export interface PacedClient {
  /** Requests per second this client sends, whatever the answers (an open loop, as real clients are). */
  readonly rate: number;
  readonly url: string;
  readonly headers: Record<string, string>;
}

/** Requests one client may have unanswered at once; past it, its next requests wait for a free slot (and count as late). */
const MAX_IN_FLIGHT = 64;
const TICK_MS = 5;

/**
 * Sends each client's requests at its own steady rate for `durationMs`, from one loop that
 * catches up after a late tick (a loaded machine delays timers, not the rates), with keep-alive
 * connections, and resolves with every answer. A request that fails without an answer counts
 * as status 0.
 */
export async function runPaced(clients: readonly PacedClient[], durationMs: number, onTick?: (elapsedMs: number) => void): Promise<PacedResult[]> {
  const agent = new Agent({ connections: MAX_IN_FLIGHT, keepAliveTimeout: 30_000 });
  const results: PacedResult[] = [];
  const inFlight = clients.map(() => 0);
  const sent = clients.map(() => 0);
  const pending = new Set<Promise<void>>();
  const started = performance.now();
  const send = (index: number, sentAtMs: number) => {
    const client = clients[index]!;
    inFlight[index]! += 1;
    const done = request(client.url, { dispatcher: agent, headers: client.headers })
      .then(
        async (answer) => {
          await answer.body.dump();
          results.push({ sentAtMs, client: index, status: answer.statusCode, latencyMs: performance.now() - started - sentAtMs });
        },
        () => {
          results.push({ sentAtMs, client: index, status: 0, latencyMs: performance.now() - started - sentAtMs });
        },
      )
      .finally(() => {
        inFlight[index]! -= 1;
        pending.delete(done);
      });
    pending.add(done);
  };
  for (;;) {
    const elapsed = performance.now() - started;
    if (elapsed >= durationMs) break;
    onTick?.(elapsed);
    clients.forEach((client, index) => {
      const due = Math.floor((client.rate * elapsed) / 1000);
      while (sent[index]! < due && inFlight[index]! < MAX_IN_FLIGHT) {
        sent[index]! += 1;
        send(index, elapsed);
      }
    });
    await new Promise((resolve) => setTimeout(resolve, TICK_MS));
  }
  await Promise.all(pending);
  await agent.close();
  return results;
}

/**
 * When the answer was read (ms from the start): the latest moment the limiter can have decided
 * the request. A sidecar that a busy machine kept from its socket for a moment reads the
 * requests sent meanwhile together, and decides them together.
 */
export function answeredAtMs(result: PacedResult): number {
  return result.sentAtMs + result.latencyMs;
}

/** Answers with `status` sent in [fromMs, toMs). */
export function countIn(results: readonly PacedResult[], status: number, fromMs: number, toMs: number): number {
  return results.filter((result) => result.status === status && result.sentAtMs >= fromMs && result.sentAtMs < toMs).length;
}

/**
 * Of requests sent at these moments (ms from the start), the moments of those a perfect limiter of
 * `rate` a second with `burst` at once would admit: the reference a limiter is
 * judged against, taken from the very run it is judged on. A machine that falls behind sends
 * late requests together, and no limiter admits a bunch past its burst; judged against a fixed
 * share of the policy, such a window looked like a limiter refusing too much.
 */
export function admittedByPerfectLimiter(sentAtMs: readonly number[], rate: number, burst: number): number[] {
  const intervalMs = 1000 / rate;
  const admitted: number[] = [];
  // Virtual scheduling (GCRA): a request is admitted unless it comes more than `burst` intervals before its theoretical time.
  let theoreticalMs = -Infinity;
  for (const moment of [...sentAtMs].sort((a, b) => a - b)) {
    if (moment < theoreticalMs - (burst - 1) * intervalMs) continue;
    theoreticalMs = Math.max(theoreticalMs, moment) + intervalMs;
    admitted.push(moment);
  }
  return admitted;
}

/** Of moments (ms from the start), those in [fromMs, toMs). */
export function momentsIn(moments: readonly number[], fromMs: number, toMs: number): number {
  return moments.filter((moment) => moment >= fromMs && moment < toMs).length;
}
