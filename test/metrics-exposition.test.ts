import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/load-config.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { basicAuthorization, postForm, registerApplication, startTokengate, type RunningTokengate } from './support/instance.js';
import { readDocument } from './support/markdown.js';
import { parseExposition, type Sample } from './support/metrics.js';
import { freePort } from './support/ports.js';
import { eventually } from './support/wait.js';

/**
 * What Prometheus scrapes from /metrics after real traffic: tokengate's own families with their
 * labels, each label value from a bounded set whatever the requests were, and the process and
 * Node.js families under the standard names every Node.js dashboard and alert queries.
 */

const ADMIN_TOKEN = `admin-${randomBytes(16).toString('hex')}`;
let running: RunningTokengate;
let upstream: Upstream;
let families: Map<string, string>;
let samples: Sample[];
let reloadedHash: string;

/** Paths no route and no endpoint knows, each different: none may become a label value. */
const strayPaths = Array.from({ length: 20 }, () => `/stray-${randomBytes(6).toString('hex')}`);

beforeAll(async () => {
  // /api/public/orders answers 503 itself: an upstream's 5xx is an answer, not a failure.
  upstream = await startUpstream((request, response, received) => {
    response.statusCode = request.url!.startsWith('/api/public/orders') ? 503 : 200;
    response.end(JSON.stringify(received));
  });
  const dead = `http://127.0.0.1:${await freePort()}`;
  running = await startTokengate('metrics-exposition', {
    config: {
      admin: { token: ADMIN_TOKEN },
      routes: [
        { path: '/api/public/me', upstream: upstream.url },
        { path: '/api/public/orders', upstream: upstream.url },
        { path: '/api/public/tickets', upstream: dead },
      ],
    },
  });
  const base = running.baseUrl;
  const user = { authorization: `Bearer ${await running.issue()}` };
  for (let index = 0; index < 3; index += 1)
    expect((await fetch(`${base}/api/public/me/${randomBytes(4).toString('hex')}`, { headers: user })).status).toBe(200);
  expect((await fetch(`${base}/api/public/me`, { method: 'POST', headers: user, body: 'x' })).status).toBe(200);
  expect((await fetch(`${base}/api/public/orders`, { headers: user })).status).toBe(503);
  expect((await fetch(`${base}/api/public/tickets`, { headers: user })).status).toBe(502);
  expect((await fetch(`${base}/api/public/me`)).status).toBe(401);
  expect((await fetch(`${base}/api/public/me`, { method: 'PROPFIND' })).status).toBe(404);
  for (const path of strayPaths) expect((await fetch(`${base}${path}`)).status).toBe(404);
  const application = await registerApplication(running.store);
  const tokenEndpoint = `${base}/oauth/token`;
  expect(
    (
      await postForm(
        tokenEndpoint,
        { grant_type: 'client_credentials' },
        { authorization: basicAuthorization(application.clientId, application.clientSecret!) },
      )
    ).status,
  ).toBe(200);
  expect(
    (await postForm(tokenEndpoint, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(application.clientId, 'wrong') })).status,
  ).toBe(401);
  expect((await fetch(`${base}/.well-known/oauth-authorization-server`)).status).toBe(200);
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
  expect((await fetch(`${running.opsUrl}/admin/applications`, { headers: admin })).status).toBe(200);
  expect((await fetch(`${running.opsUrl}/admin/applications/${randomBytes(8).toString('hex')}`, { method: 'DELETE', headers: admin })).status).toBe(404);
  expect((await fetch(`${running.opsUrl}/admin/users`)).status).toBe(401);
  // One reload that applies, one that cannot.
  const config = running.tokengate.context.config;
  const reloaded = running.tokengate.reload(() => parseConfig(JSON.stringify({ ...config, cache: { ...config.cache, ttlSeconds: 30 } }), 'reloaded', {}));
  expect(reloaded.result).toBe('success');
  reloadedHash = reloaded.hash;
  expect(running.tokengate.reload(() => parseConfig('server: [', 'broken', {})).result).toBe('failure');

  const response = await fetch(`${running.opsUrl}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  const exposition = await response.text();
  families = new Map([...exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((match) => [match[1]!, match[2]!]));
  samples = parseExposition(exposition);
});
afterAll(async () => {
  await running?.close();
  await upstream?.close();
});

/** The samples of one series name, as `label=value,...` -> value, zero-valued ones left out. */
function series(name: string): Record<string, number> {
  const found: Record<string, number> = {};
  for (const sample of samples.filter((each) => each.name === name && each.value !== 0)) {
    found[
      Object.entries(sample.labels)
        .map(([label, value]) => `${label}=${value}`)
        .join(',')
    ] = sample.value;
  }
  return found;
}

describe('/metrics after traffic', () => {
  it('counts every request by listener, route, method and status class: gateway routes, (none), issuer and admin endpoints', () => {
    expect(families.get('tokengate_http_requests_total')).toBe('counter');
    expect(series('tokengate_http_requests_total')).toEqual({
      'listener=public,route=/api/public/me,method=GET,status_class=2xx': 3,
      'listener=public,route=/api/public/me,method=POST,status_class=2xx': 1,
      'listener=public,route=/api/public/orders,method=GET,status_class=5xx': 1,
      'listener=public,route=/api/public/tickets,method=GET,status_class=5xx': 1,
      'listener=public,route=/api/public/me,method=GET,status_class=4xx': 1,
      'listener=public,route=(none),method=other,status_class=4xx': 1,
      'listener=public,route=(none),method=GET,status_class=4xx': strayPaths.length,
      'listener=public,route=/oauth/token,method=POST,status_class=2xx': 1,
      'listener=public,route=/oauth/token,method=POST,status_class=4xx': 1,
      'listener=public,route=/.well-known/oauth-authorization-server,method=GET,status_class=2xx': 1,
      'listener=ops,route=/admin/applications,method=GET,status_class=2xx': 1,
      'listener=ops,route=/admin/applications/:clientId,method=DELETE,status_class=4xx': 1,
      'listener=ops,route=/admin/users,method=GET,status_class=4xx': 1,
    });
  });

  it('times upstream answers by route and status class, 5xx answers included, and not the requests the upstream never answered', () => {
    expect(families.get('tokengate_upstream_request_duration_seconds')).toBe('histogram');
    expect(series('tokengate_upstream_request_duration_seconds_count')).toEqual({
      'route=/api/public/me,status_class=2xx': 4,
      'route=/api/public/orders,status_class=5xx': 1,
    });
    const buckets = samples.filter(
      (sample) => sample.name === 'tokengate_upstream_request_duration_seconds_bucket' && sample.labels.route === '/api/public/me',
    );
    expect(buckets.find((sample) => sample.labels.le === '+Inf')?.value).toBe(4);
    expect(series('tokengate_upstream_request_duration_seconds_sum')['route=/api/public/me,status_class=2xx']).toBeGreaterThan(0);
  });

  it('counts config reloads by result, says whether the last one applied, and shows the hash of the config in effect as one series', () => {
    expect(families.get('tokengate_config_reloads_total')).toBe('counter');
    expect(series('tokengate_config_reloads_total')).toEqual({ 'result=success': 1, 'result=failure': 1 });
    // The last one failed: the file is not what runs.
    expect(families.get('tokengate_config_last_reload_successful')).toBe('gauge');
    expect(samples.filter((sample) => sample.name === 'tokengate_config_last_reload_successful')).toEqual([
      { name: 'tokengate_config_last_reload_successful', labels: {}, value: 0 },
    ]);
    expect(families.get('tokengate_config_info')).toBe('gauge');
    expect(samples.filter((sample) => sample.name === 'tokengate_config_info')).toEqual([
      { name: 'tokengate_config_info', labels: { hash: reloadedHash }, value: 1 },
    ]);
    expect(reloadedHash).toMatch(/^[0-9a-f]{16}$/);
  });

  it('takes every label value from a bounded set, whatever paths and methods the requests had', () => {
    const routes = new Set(['/api/public/me', '/api/public/orders', '/api/public/tickets', '(none)']);
    const values = (label: string) =>
      new Set(samples.filter((sample) => sample.name.startsWith('tokengate_') && label in sample.labels).map((sample) => sample.labels[label]!));
    for (const route of values('route')) expect(routes.has(route) || /^\/(oauth|\.well-known|admin)\//.test(route), route).toBe(true);
    for (const method of values('method')) expect(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'other']).toContain(method);
    for (const statusClass of values('status_class')) expect(statusClass).toMatch(/^[1-5]xx$/);
    expect([...values('listener')].sort()).toEqual(['ops', 'public']);
    const exposition = samples.map((sample) => JSON.stringify(sample.labels)).join('\n');
    for (const path of strayPaths) expect(exposition).not.toContain(path);
  });

  it('exports the process and Node.js metrics under their standard names, never behind a tokengate_ prefix', () => {
    expect(families.get('process_cpu_seconds_total')).toBe('counter');
    expect(families.get('process_resident_memory_bytes')).toBe('gauge');
    expect(families.get('process_start_time_seconds')).toBe('gauge');
    expect(families.get('nodejs_heap_size_used_bytes')).toBe('gauge');
    expect(families.get('nodejs_eventloop_lag_seconds')).toBe('gauge');
    expect(families.get('nodejs_gc_duration_seconds')).toBe('histogram');
    expect([...families.keys()].filter((name) => /^tokengate_(process|nodejs)_/.test(name))).toEqual([]);
  });

  it("buckets the collector's pauses from a tenth of a millisecond, where a sidecar's young-generation collections fall", async () => {
    // A series appears with the first collection it observes: young-generation garbage until one has.
    let bounds: string[] = [];
    await eventually(async () => {
      for (let round = 0; round < 200; round++) new Array(10_000).fill(round);
      const scraped = parseExposition(await (await fetch(`${running.opsUrl}/metrics`)).text());
      bounds = [...new Set(scraped.filter((sample) => sample.name === 'nodejs_gc_duration_seconds_bucket').map((sample) => sample.labels.le!))];
      return bounds.length > 0;
    }, 10_000);
    expect(bounds).toEqual(['0.0001', '0.00025', '0.0005', '0.001', '0.002', '0.005', '0.01', '0.025', '0.1', '1', '5', '+Inf']);
  });

  it('holds only tokengate_, process_ and nodejs_ families', () => {
    expect(families.size).toBeGreaterThan(30);
    expect([...families.keys()].filter((name) => !/^(tokengate|process|nodejs)_/.test(name))).toEqual([]);
  });

  it('has every process and Node.js metric that docs/operations.md names', () => {
    const section = readDocument('docs/operations.md').split('\n## Metrics\n')[1]!.split('\n## ')[0]!;
    const named = [...section.matchAll(/`((?:process|nodejs)_[a-z_]+[a-z])`/g)].map((match) => match[1]!);
    expect(named.length).toBeGreaterThan(5);
    expect(named.filter((name) => !families.has(name))).toEqual([]);
  });
});
