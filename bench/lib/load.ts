import autocannon, { type AutocannonRequest } from 'autocannon';
import { performance } from 'node:perf_hooks';

/**
 * One autocannon run, in this process. Latencies are recorded here from autocannon's
 * per-response event (sub-millisecond, every status) rather than from its histogram, which
 * keeps whole milliseconds and only 2xx answers: the 2,000 req/s comparison needs the
 * fractions, the unknown-token flood is all 401s.
 */
export interface LoadOptions {
  url: string;
  connections: number;
  /** Seconds to run; or `amount` requests, stopping after `durationSeconds` if they take longer. */
  durationSeconds?: number;
  amount?: number;
  /** Requests per second over all connections (autocannon's overallRate). */
  overallRate?: number;
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
