import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { createTokenMinter, generateTagKey, decodeTagKey } from '../src/token/token-value.js';
import { functionKey, summarize, sourceKey, type CpuProfile } from '../bench/lib/cpu-profile.js';
import { forgedTokens, rotation } from '../bench/lib/fixtures.js';
import { LatencyRecorder, percentile, summarizeLoad, type LoadResult, type LoadWindow } from '../bench/lib/load.js';
import { cacheLookupsBetween, parseCounters } from '../bench/lib/metrics.js';
import { parseCommandStats } from '../bench/lib/redis.js';
import {
  bytesPerCachedEntry,
  evaluateTargets,
  markdownTable,
  ratio,
  renderRun,
  scenarioTable,
  summarizeSoak,
  type BenchResults,
  type ScenarioResult,
} from '../bench/lib/report.js';
import { readSettings } from '../bench/lib/settings.js';
import { ROUTES, tokengateConfigYaml } from '../bench/lib/tokengate-config.js';
import { nginxConf } from '../bench/peer/nginx-conf.js';

// The benchmark harness's logic (judging, formatting, generated configs), not its speed.

const MB = 1024 * 1024;

function load(requestsPerSecond: number, overrides: Partial<LoadResult> = {}): LoadResult {
  return {
    requests: requestsPerSecond * 5,
    seconds: 5,
    requestsPerSecond,
    p50Ms: 1,
    p99Ms: 2,
    statuses: { '200': requestsPerSecond * 5 },
    errors: 0,
    unexpected: 0,
    ...overrides,
  };
}

function scenario(id: string, requestsPerSecond: number, gatewayCpuMsPer1k: number | null, baseline: string | null): ScenarioResult {
  return {
    id,
    title: id,
    load: load(requestsPerSecond),
    gatewayCpuMsPer1k,
    storeCpuMsPer1k: 0,
    baseline,
    cacheLookups: null,
    serverCpuElsewherePercent: 1,
    serverCpuStealPercent: 0,
    loadGeneratorCpuPercent: 20,
  };
}

function fullResults(): BenchResults {
  return {
    scenarios: {
      direct: scenario('direct', 40_000, null, null),
      'bare-proxy': scenario('bare-proxy', 8_000, 90, 'direct'),
      'nginx-peer': scenario('nginx-peer', 10_000, 50, 'direct'),
      'cache-hit': scenario('cache-hit', 9_000, 60, 'bare-proxy'),
      'cache-miss': scenario('cache-miss', 6_000, 100, 'cache-hit'),
      issuance: scenario('issuance', 4_000, 200, null),
    },
    forgedStoreCommands: 0,
    fixedRate: { rate: 2000, direct: load(2000, { p99Ms: 0.4 }), tokengate: load(2000, { p99Ms: 1.6 }) },
    revocation: { samples: 50, p50Ms: 2, p99Ms: 8, maxMs: 9 },
    memory: {
      idleBytes: 60 * MB,
      beforeFillBytes: 70 * MB,
      filledBytes: 100 * MB,
      filledHeap: null,
      cachedEntries: 100_000,
      soak: { seconds: 60, samples: [80, 90, 70, 80, 84, 82, 90, 74].map((value) => value * MB) },
    },
  };
}

describe('target evaluation', () => {
  it('judges every DESIGN.md target from the figures of one run', () => {
    const checks = evaluateTargets(fullResults());
    const byTarget = Object.fromEntries(checks.map((check) => [check.target, check]));
    expect(byTarget['cache hit >= 1.0x bare @fastify/http-proxy']).toMatchObject({ met: true, measured: '1.13x' });
    expect(byTarget['cache hit >= 1.0x nginx auth_request']).toMatchObject({ met: false, measured: '0.90x' });
    expect(byTarget['gateway CPU per request below nginx + check service']).toMatchObject({ met: false, measured: '60 vs 50 ms/1k' });
    expect(byTarget['cache miss (100k tokens) >= 0.7x cache hit']).toMatchObject({ met: false, measured: '0.67x' });
    expect(byTarget['forged tokens: 0 store calls']!.met).toBe(true);
    expect(byTarget['added p99 over direct at 2000 req/s <= 1 ms']).toMatchObject({ met: false, measured: '1.20 ms' });
    expect(byTarget['revocation seen by a second sidecar <= 50 ms p99']!.met).toBe(true);
    expect(byTarget['client_credentials issuance >= 5,000 tokens/s']).toMatchObject({ met: false, measured: '4000 tokens/s' });
    expect(byTarget['RSS <= 150 MB with 100k cached tokens']).toMatchObject({ met: true, measured: '100 MB with 100000 cached' });
    expect(byTarget['RSS flat (within 5%) over 60 s at full load']).toMatchObject({ met: false, measured: '5.7% (floor, second vs first half)' });
  });

  it('says "not measured" rather than met or not met when a scenario is missing', () => {
    const results = fullResults();
    delete results.scenarios['nginx-peer'];
    results.forgedStoreCommands = null;
    results.memory = null;
    const checks = evaluateTargets(results);
    const unmeasured = checks.filter((check) => check.met === null).map((check) => check.target);
    expect(unmeasured).toEqual([
      'cache hit >= 1.0x nginx auth_request',
      'gateway CPU per request below nginx + check service',
      'forged tokens: 0 store calls',
      'RSS <= 150 MB with 100k cached tokens',
      'RSS flat (within 5%) over 60 s at full load',
    ]);
  });

  it('does not judge the RSS target on fewer cached tokens than it names', () => {
    const results = fullResults();
    results.memory!.cachedEntries = 20_000;
    expect(evaluateTargets(results).find((check) => check.target.startsWith('RSS <='))!.met).toBeNull();
  });

  it('counts a single store call in a forged flood as not met', () => {
    const results = fullResults();
    results.forgedStoreCommands = 1;
    expect(evaluateTargets(results).find((check) => check.scenario === 'forged')!.met).toBe(false);
  });

  it('tells garbage from a leak by the floor RSS returns to after full collections, and gives no verdict without one', () => {
    const results = fullResults();
    const flatness = (samples: number[]) => {
      results.memory!.soak.samples = samples.map((value) => value * MB);
      return evaluateTargets(results).find((check) => check.target.startsWith('RSS flat'))!;
    };
    // climbs with garbage, a full collection, climbs again: the floor holds
    const sawtooth = Array.from({ length: 60 }, (_, second) => 130 + (second % 20) * 3);
    expect(flatness(sawtooth).met).toBe(true);
    // the same with a floor that rises after every collection
    expect(flatness(sawtooth.map((value, second) => value + second)).met).toBe(false);
    // a climb without any collection: no verdict; a flat line without one: flat
    const climb = flatness(Array.from({ length: 60 }, (_, second) => 130 + second));
    expect(climb.met).toBeNull();
    expect(climb.measured).toContain('no full collection');
    expect(flatness(Array.from({ length: 60 }, (_, second) => 128 + (second % 2))).met).toBe(true);
  });

  it('takes ratios against the named baseline and derives memory figures', () => {
    const results = fullResults();
    expect(ratio(results, 'cache-miss', 'cache-hit')).toBeCloseTo(6_000 / 9_000);
    expect(ratio(results, 'cache-hit', 'absent')).toBeNull();
    expect(bytesPerCachedEntry(results.memory!)).toBeCloseTo((30 * MB) / 100_000);
    // samples 80 90 70 80 | 84 82 90 74: two falls of 10% or more (90 -> 70, 90 -> 74)
    expect(summarizeSoak(results.memory!.soak.samples)).toMatchObject({
      firstHalfFloorBytes: 70 * MB,
      secondHalfFloorBytes: 74 * MB,
      minBytes: 70 * MB,
      maxBytes: 90 * MB,
      collections: 2,
    });
    expect(summarizeSoak(results.memory!.soak.samples).growth).toBeCloseTo(74 / 70 - 1);
  });
});

describe('tables', () => {
  it('pads every column so the Markdown reads in a terminal', () => {
    const table = markdownTable(['a', 'long header'], [['wide cell', 'x']]);
    expect(table.split('\n')).toEqual(['| a         | long header |', '|-----------|-------------|', '| wide cell | x           |']);
  });

  it('prints each scenario with its ratio and the verdicts of its targets', () => {
    const results = fullResults();
    const table = scenarioTable(results, evaluateTargets(results));
    const hitRow = table.split('\n').find((line) => line.startsWith('| cache-hit '))!;
    expect(hitRow).toContain('1.13x bare-proxy');
    expect(hitRow).toContain('met: >= 1.0x bare proxy; NOT MET: >= 1.0x nginx; NOT MET: CPU/request < nginx + check');
  });

  it('prints a recorded run again: where it ran, then the scenario, measurement and target tables', () => {
    const results = fullResults();
    const machine = {
      cpus: 2,
      cpuModel: 'Test CPU',
      node: 'v20',
      nginx: '1.22.1',
      redis: '7.0',
      commit: 'abc1234',
      pinning: 'not pinned',
      loadAverageAtStart: ['0.10'],
      loadAverageAtEnd: ['0.20'],
    };
    const text = renderRun({
      date: '2026-01-01T00:00:00.000Z',
      machine,
      settings: { connections: 50, gatewayNodeFlags: [] },
      seconds: 150,
      results,
      targets: [],
      failures: [],
    });
    expect(text.split('\n')[0]).toBe('2026-01-01T00:00:00.000Z, Test CPU, 2 CPUs, Node v20, nginx 1.22.1, Redis 7.0, commit abc1234');
    expect(text).toContain('| scenario ');
    expect(text).toContain('| revocation seen by a second sidecar |');
    expect(text).toMatch(/\| client_credentials issuance >= 5,000 tokens\/s +\| 4000 tokens\/s +\| NOT MET +\|/);
  });
});

describe('measurement helpers', () => {
  it('takes nearest-rank percentiles', () => {
    const values = Float64Array.from({ length: 100 }, (_, index) => index + 1);
    expect(percentile(values, 50)).toBe(50);
    expect(percentile(values, 99)).toBe(99);
    expect(percentile(values, 100)).toBe(100);
    expect(percentile(new Float64Array(0), 50)).toBeNaN();
  });

  it('keeps every latency it records, past its initial capacity, with fractions', () => {
    const recorder = new LatencyRecorder();
    for (let i = 100_000; i > 0; i--) recorder.record(i / 1000);
    const sorted = recorder.sorted();
    expect(sorted.length).toBe(100_000);
    expect([sorted[0], sorted[99_999]]).toEqual([0.001, 100]);
  });

  it('pools windows of one scenario: counts and times added, percentiles over every latency', () => {
    const window = (latencies: number[], statuses: Record<string, number>, seconds: number): LoadWindow => {
      const recorder = new LatencyRecorder();
      for (const value of latencies) recorder.record(value);
      const requests = Object.values(statuses).reduce((sum, count) => sum + count, 0);
      return { requests, seconds, statuses, errors: 1, unexpected: requests - (statuses['200'] ?? 0), latencies: recorder };
    };
    const pooled = summarizeLoad([window([1, 2, 3], { '200': 3 }, 1), window([10, 20], { '200': 1, '503': 1 }, 2)]);
    expect(pooled).toMatchObject({ requests: 5, seconds: 3, statuses: { '200': 4, '503': 1 }, errors: 2, unexpected: 1, p50Ms: 3, p99Ms: 20 });
    expect(pooled.requestsPerSecond).toBeCloseTo(5 / 3);
  });

  it('sums Redis command calls except INFO itself', () => {
    const info = '# Commandstats\r\ncmdstat_get:calls=12,usec=30,usec_per_call=2.50\r\ncmdstat_info:calls=7,usec=1\r\ncmdstat_evalsha:calls=3,usec=9\r\n';
    expect(parseCommandStats(info)).toBe(15);
    expect(parseCommandStats('# Commandstats\r\n')).toBe(0);
  });

  it('reads counters from a Prometheus exposition, summing label values, and takes cache lookups between two scrapes', () => {
    const exposition = [
      '# HELP tokengate_cache_hits_total Token lookups answered from the in-process cache.',
      '# TYPE tokengate_cache_hits_total counter',
      'tokengate_cache_hits_total 1500',
      'tokengate_cache_misses_total 20',
      'tokengate_cache_entries{kind="valid"} 7',
      'tokengate_cache_entries{kind="unknown"} 3',
    ].join('\n');
    const after = parseCounters(exposition);
    expect(after.get('tokengate_cache_entries')).toBe(10);
    expect(
      cacheLookupsBetween(
        new Map([
          ['tokengate_cache_hits_total', 500],
          ['tokengate_cache_misses_total', 19],
        ]),
        after,
      ),
    ).toEqual({ hits: 1000, misses: 1 });
    expect(cacheLookupsBetween(new Map(), parseCounters('process_cpu_seconds_total 3'))).toBeNull();
  });

  it('makes forged tokens of the real shape that the tag check refuses, and rotates through values', () => {
    const minter = createTokenMinter(decodeTagKey(generateTagKey()));
    const forged = forgedTokens(minter, 200);
    expect(forged.every((token) => /^[A-Za-z0-9_-]{43}$/.test(token) && !minter.hasValidTag(token))).toBe(true);
    const next = rotation(['a', 'b', 'c']);
    expect([next(), next(), next(), next()]).toEqual(['a', 'b', 'c', 'a']);
  });

  it('reads settings from the environment and refuses nonsense', () => {
    expect(readSettings({})).toMatchObject({ durationSeconds: 4, soakSeconds: 60, missTokens: 100_000, fixedRate: 2000, only: null, cpuProfileDir: null });
    expect(readSettings({ BENCH_DURATION: '2', BENCH_ONLY: 'direct, cache-hit' })).toMatchObject({
      durationSeconds: 2,
      only: new Set(['direct', 'cache-hit']),
    });
    expect(() => readSettings({ BENCH_DURATION: 'fast' })).toThrow('BENCH_DURATION must be a number');
  });
});

describe('generated configs', () => {
  it('gives tokengate a config its own loader accepts, with the run’s Redis, tag key and routes', () => {
    const tokenTagKey = generateTagKey();
    const yaml = tokengateConfigYaml({
      port: 18080,
      opsPort: 19090,
      redisUrl: 'redis://127.0.0.1:16379',
      keyPrefix: 'bench:',
      tokenTagKey,
      upstreamUrl: 'http://127.0.0.1:13001',
    });
    const config = parseConfig(yaml, 'bench.yaml', {});
    expect(config.store).toMatchObject({ driver: 'redis', url: 'redis://127.0.0.1:16379', keyPrefix: 'bench:' });
    expect(config.issuer.tokenTagKey).toBe(tokenTagKey);
    expect(config.routes.map((route) => [route.path, route.token])).toEqual([
      [ROUTES.me, 'user'],
      [ROUTES.tickets, 'user'],
      [ROUTES.events, 'application'],
    ]);
    expect(config.cache.maxEntries).toBe(100_000);
  });

  it('writes an nginx.conf with one worker, auth_request before proxy_pass, keep-alive upstreams and paths in the run directory', () => {
    const conf = nginxConf({ dir: '/tmp/run', listenPort: 8000, upstreamPort: 3001, tokenCheckPort: 4001 });
    expect(conf).toContain('worker_processes 1;');
    expect(conf).toContain('listen 127.0.0.1:8000;');
    expect(conf).toMatch(/upstream resource \{\s+server 127\.0\.0\.1:3001;\s+keepalive 64;/);
    expect(conf).toMatch(/upstream token_check \{\s+server 127\.0\.0\.1:4001;\s+keepalive 64;/);
    expect(conf.indexOf('auth_request /_token_check;')).toBeLessThan(conf.indexOf('proxy_pass http://resource;'));
    expect(conf).toContain('proxy_set_header Authorization "";');
    expect(conf).toContain('auth_request_set $auth_user_id $upstream_http_x_auth_user_id;');
    expect(conf).toContain('proxy_set_header X-Auth-User-Id $auth_user_id;');
    for (const path of conf.matchAll(/(?:pid|error_log|_temp_path) (\S+)/g)) expect(path[1]).toMatch(/^\/tmp\/run\//);
  });
});

describe('cpu profile summary', () => {
  const frame = (functionName: string, url = '', lineNumber = 0) => ({ functionName, url, lineNumber });
  // root -> handler (dist/gateway) -> digest (node:crypto); root -> (garbage collector)
  const profile: CpuProfile = {
    nodes: [
      { id: 1, callFrame: frame('(root)'), children: [2, 4] },
      { id: 2, callFrame: frame('handle', 'file:///app/dist/gateway/index.js', 9), children: [3] },
      { id: 3, callFrame: frame('digest', 'node:internal/crypto/hash', 99) },
      { id: 4, callFrame: frame('(garbage collector)') },
    ],
    samples: [2, 3, 3, 4],
    timeDeltas: [1000, 2000, 3000, 4000],
  };

  it('adds self time per function and per source, and inclusive time once per sample', () => {
    const summary = summarize(profile);
    expect(summary.totalMs).toBe(10);
    expect(summary.selfByFunction.get('handle (dist/gateway/index.js:10)')).toBe(1);
    expect(summary.selfBySource.get('dist/gateway')).toBe(1);
    expect(summary.selfBySource.get('node:internal')).toBe(5);
    expect(summary.selfBySource.get('(garbage collector)')).toBe(4);
    expect(summary.inclusiveByFunction.get('handle (dist/gateway/index.js:10)')).toBe(6);
  });

  it('leaves out the first milliseconds when asked (start-up)', () => {
    const summary = summarize(profile, 3.5);
    expect(summary.totalMs).toBe(7);
    expect(summary.selfByFunction.has('handle (dist/gateway/index.js:10)')).toBe(false);
  });

  it('names npm packages, scoped ones included, by package', () => {
    expect(sourceKey(frame('f', 'file:///w/node_modules/@fastify/reply-from/index.js'))).toBe('@fastify/reply-from');
    expect(sourceKey(frame('f', 'file:///w/node_modules/fastify/lib/route.js'))).toBe('fastify');
    expect(sourceKey(frame('f', 'file:///w/dist/app.js'))).toBe('dist');
    // a checkout in a directory named like one of the tree's own
    expect(functionKey(frame('f', 'file:///work/bench/dist/gateway/forward.js', 44))).toBe('f (dist/gateway/forward.js:45)');
  });
});
