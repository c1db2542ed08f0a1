import { readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { workerCount } from '../src/serve/worker-count.js';
import { generateTagKey } from '../src/token/token-value.js';
import { runCli, startServe, tempConfigs, testStateHome, type ServeProcess } from './support/cli.js';
import { startUpstream, storeUserToken, type Upstream } from './support/gateway.js';
import { deletePrefix, REDIS_URL, uniquePrefix } from './support/redis.js';
import { callerTraceparent, startCollector } from './support/otlp.js';
import { eventually } from './support/wait.js';

/**
 * `server.workers`: a primary supervising several processes that share the public port. Run as
 * a real `tokengate serve` with a real Redis, so the workers, their restarts, the signals and
 * what the primary's ops listener reports for them are what a deployment sees.
 */

const configs = tempConfigs();
const prefix = uniquePrefix('workers');
const tagKey = generateTagKey();
let upstream: Upstream;
let serve: ServeProcess | undefined;
let token: string;

beforeAll(async () => {
  upstream = await startUpstream();
  token = await storeUserToken(prefix, tagKey, 600_000);
});

afterEach(async () => {
  serve?.child.kill('SIGKILL');
  await serve?.exited;
  serve = undefined;
});

afterAll(async () => {
  await upstream?.close();
  await deletePrefix(prefix);
  configs.remove();
});

function workersConfig(workers: number | string, extra = ''): string {
  return configs.write(
    `server:\n  host: 127.0.0.1\n  port: 0\n  workers: ${workers}\nadmin:\n  port: 0\nlogging:\n  level: info\n` +
      `issuer:\n  issuerUrl: http://localhost:8080\n  tokenTagKey: ${tagKey}\n` +
      `store:\n  driver: redis\n  url: ${REDIS_URL}\n  keyPrefix: "${prefix}"\n` +
      `routes:\n  - path: /api/public/me\n    upstream: ${upstream.url}\n${extra}`,
  );
}

async function get(url: string, traceparent?: string): Promise<number> {
  // A new connection per request, so the primary spreads them over the workers.
  // Right after a worker is killed, a request may get no answer (its connection was the dead
  // worker's): clients time out and try again.
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, connection: 'close' };
  if (traceparent !== undefined) headers.traceparent = traceparent;
  const response = await fetch(url, { headers, signal: AbortSignal.timeout(3_000) });
  await response.arrayBuffer();
  return response.status;
}

/** Pids of the processes that logged something, other than the primary. */
function workerPids(output: string): Set<number> {
  const pids = output
    .split('\n')
    .filter((line) => line.includes('"worker":'))
    .map((line) => (JSON.parse(line) as { pid: number }).pid);
  return new Set(pids);
}

// Three processes start (each loading the sources through tsx): far slower than one on a busy machine.
const STARTS = 180_000;

describe('server.workers', () => {
  it(
    'serves the gateway from every worker, and the primary reports readiness and metrics for all of them',
    async () => {
      serve = await startServe(workersConfig(2));
      expect(workerPids(serve.output()).size).toBe(2);
      const statuses = await Promise.all(Array.from({ length: 40 }, () => get(`${serve!.publicUrl}/api/public/me`)));
      expect(statuses.every((status) => status === 200)).toBe(true);

      const ready = (await (await fetch(`${serve.opsUrl}/readyz`)).json()) as { status: string; workers: Array<{ worker: number; ready: boolean }> };
      expect(ready).toMatchObject({
        status: 'ready',
        workers: [
          { worker: 1, ready: true },
          { worker: 2, ready: true },
        ],
      });

      // The counts of both workers, summed: every request once.
      const metrics = await (await fetch(`${serve.opsUrl}/metrics`)).text();
      expect(metrics).toMatch(/^tokengate_gateway_requests_total\{route="\/api\/public\/me",outcome="forwarded",reason="ok"\} 40$/m);
      expect(metrics).toMatch(/^tokengate_store_up 1$/m);
      expect(metrics).toMatch(/^process_resident_memory_bytes \d+/m);

      // No admin.token: the primary, which alone serves the admin API, made one token for the group.
      const kept = join(testStateHome(), 'tokengate', 'admin-token');
      expect(
        serve
          .output()
          .split('\n')
          .filter((line) => line.includes('"adminTokenFile"')),
      ).toHaveLength(1);
      expect((await fetch(`${serve.opsUrl}/admin/users`)).status).toBe(401);
      const token = readFileSync(kept, 'utf8').trim();
      expect((await fetch(`${serve.opsUrl}/admin/users`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    },
    STARTS,
  );

  it(
    "sums the workers' duration histograms with, in OpenMetrics, each bucket's latest exemplar from any worker",
    async () => {
      const collector = await startCollector();
      try {
        serve = await startServe(workersConfig(2, `tracing:\n  enabled: true\n  endpoint: ${collector.url}\n  scheduledDelayMs: 20\n`));
        const callers = Array.from({ length: 20 }, () => callerTraceparent(true));
        const statuses = await Promise.all(callers.map((caller) => get(`${serve!.publicUrl}/api/public/me`, caller.traceparent)));
        expect(statuses.every((status) => status === 200)).toBe(true);
        // Both workers served some of them, so both have exemplars to offer.
        await eventually(() => new Set(collector.spans.filter((span) => span.kind === 2).map((span) => span.resource['process.pid'])).size === 2, 10_000);

        const open = await fetch(`${serve.opsUrl}/metrics`, { headers: { accept: 'application/openmetrics-text' } });
        expect(open.headers.get('content-type')).toBe('application/openmetrics-text; version=1.0.0; charset=utf-8');
        const buckets = (await open.text()).split('\n').filter((line) => line.startsWith('tokengate_gateway_request_duration_seconds_bucket{'));
        expect(buckets).toContainEqual(expect.stringMatching(/le="\+Inf"\} 20( #|$)/));
        const traces = buckets.flatMap((line) => /# \{trace_id="([0-9a-f]{32})"/.exec(line)?.[1] ?? []);
        expect(traces.length).toBeGreaterThan(0);
        const sent = new Set(callers.map((caller) => caller.traceId));
        expect(traces.every((traceId) => sent.has(traceId))).toBe(true);

        const text = await (await fetch(`${serve.opsUrl}/metrics`)).text();
        expect(text).toMatch(/^tokengate_gateway_requests_total\{route="\/api\/public\/me",outcome="forwarded",reason="ok"\} 20$/m);
        expect(text).not.toContain('trace_id');
      } finally {
        await collector.close();
      }
    },
    STARTS,
  );

  it(
    'starts another worker when one dies, and keeps serving meanwhile',
    async () => {
      serve = await startServe(workersConfig(2));
      const [first] = [...workerPids(serve.output())];
      process.kill(first!, 'SIGKILL');
      // The other worker keeps the port served while the primary starts a replacement.
      await eventually(async () => (await get(`${serve!.publicUrl}/api/public/me`).catch(() => 0)) === 200, 15_000);
      await eventually(() => workerPids(serve!.output()).size === 3, 60_000);
      await eventually(async () => ((await (await fetch(`${serve!.opsUrl}/readyz`)).json()) as { status: string }).status === 'ready', 30_000);
      expect(serve.output()).toContain('a worker exited; starting another');
      expect(await get(`${serve.publicUrl}/api/public/me`)).toBe(200);
    },
    STARTS,
  );

  it(
    'answers /metrics at once while a worker is replaced, with the metrics of the worker that serves',
    async () => {
      serve = await startServe(workersConfig(2));
      const [first] = [...workerPids(serve.output())];
      process.kill(first!, 'SIGKILL');
      // The replacement is forked within 100 ms and takes seconds to load: a scrape meanwhile.
      await eventually(() => workerPids(serve!.output()).size === 2 && serve!.output().includes('a worker exited; starting another'), 15_000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const started = performance.now();
      const response = await fetch(`${serve.opsUrl}/metrics`);
      const text = await response.text();
      expect({ status: response.status, fast: performance.now() - started < 2_000 }).toEqual({ status: 200, fast: true });
      // The serving worker's own metrics, not an empty page.
      expect(text).toMatch(/^tokengate_store_up 1$/m);
    },
    STARTS,
  );

  it(
    'drains every worker on SIGTERM, then the primary exits 0',
    async () => {
      serve = await startServe(workersConfig(2));
      const pids = [...workerPids(serve.output())];
      serve.child.kill('SIGTERM');
      expect(await serve.exited).toBe(0);
      for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
      expect(serve.output().match(/"tokengate stopped"/g)).toHaveLength(3);
    },
    STARTS,
  );

  it(
    'reloads every worker when the config file changes',
    async () => {
      const file = workersConfig(2);
      serve = await startServe(file);
      expect(await get(`${serve.publicUrl}/api/public/tickets`)).toBe(404);
      writeFileSync(file, `${readFileSync(file, 'utf8')}  - path: /api/public/tickets\n    upstream: ${upstream.url}\n`);
      await eventually(() => (serve!.output().match(/"config reloaded"/g) ?? []).length === 3, 30_000);
      // Every worker serves the new route: a few connections reach both.
      const statuses = await Promise.all(Array.from({ length: 20 }, () => get(`${serve!.publicUrl}/api/public/tickets`)));
      expect(statuses.every((status) => status === 200)).toBe(true);
    },
    STARTS,
  );

  it('refuses more than one worker on the memory store, naming the key', async () => {
    const result = await runCli(['check', '--config', configs.write('server:\n  workers: 2\n')]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/server\.workers \(line 2\): 2 workers would each keep their own memory store/);
  });
});

describe('server.workers: auto', () => {
  it('counts the CPUs a container may use: its cgroup quota, rounded up, never more than the CPUs there are', () => {
    const files = (contents: Record<string, string>) => (path: string) => {
      if (contents[path] === undefined) throw new Error(`ENOENT ${path}`);
      return contents[path];
    };
    expect(workerCount(3, files({}))).toBe(3);
    expect(workerCount('auto', files({ '/sys/fs/cgroup/cpu.max': '150000 100000\n' }))).toBe(Math.min(2, availableParallelism()));
    expect(workerCount('auto', files({ '/sys/fs/cgroup/cpu.max': '50000 100000\n' }))).toBe(1);
    expect(workerCount('auto', files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' }))).toBe(availableParallelism());
    expect(workerCount('auto', files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '100000', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000' }))).toBe(1);
    expect(workerCount('auto', files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '-1', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000' }))).toBe(
      availableParallelism(),
    );
    expect(workerCount('auto', files({}))).toBe(availableParallelism());
  });
});
