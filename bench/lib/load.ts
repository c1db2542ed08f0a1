import autocannon, { type AutocannonRequest } from 'autocannon';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

/**
 * One load window, in this process: autocannon, or the steady pace below.
 * Latencies are recorded here per response (sub-millisecond, every status) rather than from
 * autocannon's histogram, which keeps whole milliseconds and only 2xx answers: the 2,000 req/s
 * comparison needs the fractions, the unknown-token flood is all 401s.
 */
export interface LoadOptions {
  url: string;
  connections: number;
  /** Seconds to run; or `amount` requests, stopping after `durationSeconds` if they take longer. */
  durationSeconds?: number;
  amount?: number;
  /** Requests per second over all connections (autocannon's overallRate, or the steady pace below). */
  overallRate?: number;
  /** `overallRate` sent at a steady pace, not as each second's rush. */
  steady?: boolean;
  request: AutocannonRequest;
  /** Status every answer should have (or one of them: a rate limited row's 200 and 429); anything else counts as unexpected. */
  expectedStatus: number | readonly number[];
}

export interface LoadResult {
  requests: number;
  seconds: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Responses by status code. */
  statuses: Record<string, number>;
  /** Connection errors and timeouts. */
  errors: number;
  /** Responses whose status was not the expected one. */
  unexpected: number;
}

/** One autocannon run, its latencies kept so that several runs of a scenario can be pooled. */
export interface LoadWindow {
  requests: number;
  seconds: number;
  statuses: Record<string, number>;
  errors: number;
  unexpected: number;
  latencies: LatencyRecorder;
}

export async function runLoadWindow(options: LoadOptions): Promise<LoadWindow> {
  if (options.steady === true && options.overallRate !== undefined && options.request.setupRequest === undefined)
    return runPacedWindow(options, options.overallRate);
  const latencies = new LatencyRecorder();
  const started = performance.now();
  const instance = autocannon({
    url: options.url,
    connections: options.connections,
    ...(options.amount !== undefined ? { amount: options.amount } : { duration: options.durationSeconds ?? 5 }),
    ...(options.overallRate !== undefined ? { overallRate: options.overallRate } : {}),
    timeout: 10,
    // A request given as `requests` keeps its path (top-level options have none); without
    // setupRequest autocannon builds it once.
    requests: [options.request],
  });
  instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTimeMs: number) => latencies.record(responseTimeMs));
  // autocannon ignores the duration when given an amount: bound the run here.
  const cap = options.amount !== undefined && options.durationSeconds !== undefined ? setTimeout(() => instance.stop(), options.durationSeconds * 1000) : null;
  const result = await instance;
  if (cap !== null) clearTimeout(cap);
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats).map(([status, { count }]) => [status, count]));
  const requests = Object.values(statuses).reduce((sum, count) => sum + count, 0);
  return {
    requests,
    seconds: (performance.now() - started) / 1000,
    statuses,
    errors: result.errors,
    unexpected: requests - [options.expectedStatus].flat().reduce((sum, status) => sum + (statuses[String(status)] ?? 0), 0),
    latencies,
  };
}

/** How often the paced load sends what is due (a late tick catches up). */
const PACE_TICK_MS = 1;
const REQUEST_TIMEOUT_MS = 10_000;

/**
 * A steady `rate` over `connections` keep-alive connections: a request beyond them waits for
 * one, and that wait counts in its latency (a late timer's does not). Not autocannon's
 * overallRate, which lets each connection send its share of a second as fast as the answers
 * come and then pause until the next second: 3,000 req/s arrive as a few hundred milliseconds
 * of back-to-back requests, from which a rate limit of 1,000/s with a burst of 100 rightly
 * admits only its burst and a request per millisecond of the rush (about 0.75x its rate).
 */
async function runPacedWindow(options: LoadOptions, rate: number): Promise<LoadWindow> {
  const latencies = new LatencyRecorder();
  const statuses: Record<string, number> = {};
  const pool = new Pool(options.url, { connections: options.connections, headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS });
  const { method = 'GET', path = '/', headers, body } = options.request;
  const limit = options.amount ?? Number.POSITIVE_INFINITY;
  const durationMs = (options.durationSeconds ?? (options.amount === undefined ? 5 : Number.POSITIVE_INFINITY)) * 1000;
  const pending = new Set<Promise<void>>();
  let sent = 0;
  let errors = 0;
  const started = performance.now();
  const send = () => {
    const sentAt = performance.now();
    const answered = pool.request({ method: method as 'GET', path, headers, body }).then(
      async (answer) => {
        await answer.body.dump();
        latencies.record(performance.now() - sentAt);
        statuses[answer.statusCode] = (statuses[answer.statusCode] ?? 0) + 1;
      },
      () => {
        errors += 1;
      },
    );
    const tracked = answered.finally(() => pending.delete(tracked));
    pending.add(tracked);
  };
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const elapsed = performance.now() - started;
      const due = Math.min(limit, Math.floor((rate * Math.min(elapsed, durationMs)) / 1000));
      for (; sent < due; sent += 1) send();
      if (sent >= limit || elapsed >= durationMs) {
        clearInterval(tick);
        resolve();
      }
    }, PACE_TICK_MS);
  });
  await Promise.all(pending);
  const seconds = (performance.now() - started) / 1000;
  await pool.close();
  const requests = Object.values(statuses).reduce((total, count) => total + count, 0);
  const expected = [options.expectedStatus].flat().reduce((total, status) => total + (statuses[String(status)] ?? 0), 0);
  return { requests, seconds, statuses, errors, unexpected: requests - expected, latencies };
}

/** Several windows of one scenario as one measurement: counts and times added, latencies pooled. */
export function summarizeLoad(windows: readonly LoadWindow[]): LoadResult {
  const sum = (pick: (window: LoadWindow) => number) => windows.reduce((total, window) => total + pick(window), 0);
  const statuses: Record<string, number> = {};
  for (const window of windows) for (const [status, count] of Object.entries(window.statuses)) statuses[status] = (statuses[status] ?? 0) + count;
  const sorted = LatencyRecorder.pooled(windows.map((window) => window.latencies));
  const requests = sum((window) => window.requests);
  const seconds = sum((window) => window.seconds);
  return {
    requests,
    seconds,
    requestsPerSecond: requests / seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    statuses,
    errors: sum((window) => window.errors),
    unexpected: sum((window) => window.unexpected),
  };
}

/** Nearest-rank percentile of ascending values; NaN when there are none. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/** A growable array of doubles: a million latencies without a million boxed numbers. */
export class LatencyRecorder {
  private values = new Float64Array(1 << 16);
  private length = 0;

  record(value: number): void {
    if (this.length === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.length++] = value;
  }

  sorted(): Float64Array {
    return this.values.slice(0, this.length).sort();
  }

  /** Every value of several recorders, ascending. */
  static pooled(recorders: readonly LatencyRecorder[]): Float64Array {
    const all = new Float64Array(recorders.reduce((total, recorder) => total + recorder.length, 0));
    let offset = 0;
    for (const recorder of recorders) {
      all.set(recorder.values.subarray(0, recorder.length), offset);
      offset += recorder.length;
    }
    return all.sort();
  }
}
