import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/load-config.js';
import { tokenDigest } from '../src/token/token-value.js';
import { rawRequest, startUpstream, statusOf, type Upstream } from './support/gateway.js';
import { basicAuthorization, postForm, registerApplication, startTokengate, type RunningTokengate } from './support/instance.js';
import { FormClient, application, authorizePath, formFields } from './support/issuer.js';
import { ROOT } from './support/markdown.js';
import { parseExposition, type Sample } from './support/metrics.js';
import { freePort } from './support/ports.js';
import { ALERT_RULES, alertRules, dashboardQueries, readDashboard, TestPrometheus, variableSelectors, type PrometheusAlert } from './support/prometheus.js';
import { readsOf } from './support/promql.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';
import { ThrowawayRedis } from './support/throwaway-redis.js';
import { eventually } from './support/wait.js';

/**
 * The dashboard and the alerting rules against what tokengate really exposes. A real Prometheus
 * (Debian's package) scrapes two real tokengates every second and evaluates the shipped rules:
 * - `cached`: the Redis store on a redis-server of the test's own, its token cache, the decision
 *   listener, routes to an upstream that answers, one that answers 503, one nobody listens on,
 *   and two rate limit policies;
 * - `uncached`: `cache.enabled: false` on the shared Redis, one connection at most.
 * After traffic of every kind the dashboard and the rules read (forwarded, refused, rate limited,
 * upstream failures, decision listener checks, a revocation, token endpoint and sign-in
 * attempts, config reloads, a refused connection, a malformed request), every metric and label
 * they name must be in the two /metrics answers, every dashboard query must return series from
 * Prometheus, and every rule must evaluate without error. Then the failures: the redis-server
 * killed, the second tokengate stopped, and the alerts that must go pending do, for the instance
 * that failed and not the other.
 */

const JOB = 'tokengate';
/** Labels Prometheus adds to every series it scrapes. */
const TARGET_LABELS = new Set(['job', 'instance']);
/** The one series of Prometheus's own the rules read. */
const PROMETHEUS_SERIES: Record<string, string[]> = { up: [] };

let redis: ThrowawayRedis;
let upstream: Upstream;
let cached: RunningTokengate;
let uncached: RunningTokengate;
let uncachedStopped = false;
let prometheus: TestPrometheus;
/** The key prefix of the first tokengate's data on the throwaway redis-server. */
let prefix: string;
let samples: Sample[];
let families: Map<string, string>;
const held: Socket[] = [];

const opsTarget = (running: RunningTokengate) => new URL(running.opsUrl).host;

async function scrape(running: RunningTokengate): Promise<string> {
  const response = await fetch(`${running.opsUrl}/metrics`);
  expect(response.status).toBe(200);
  return response.text();
}

const expectStatus = async (request: Promise<Response>, status: number) => expect((await request).status).toBe(status);

/**
 * The requests the rates of the dashboard and the rules count: forwarded, answered 5xx by the
 * upstream, failed upstream, refused, rate limited, and the decision listener's checks.
 */
async function requests(): Promise<void> {
  const base = cached.baseUrl;
  const user = { authorization: `Bearer ${await cached.issue()}` };
  for (let index = 0; index < 5; index += 1) await expectStatus(fetch(`${base}/api/public/me`, { headers: user }), 200);
  for (let index = 0; index < 3; index += 1) await expectStatus(fetch(`${base}/api/public/orders`, { headers: user }), 503);
  for (let index = 0; index < 3; index += 1) await expectStatus(fetch(`${base}/api/public/tickets`, { headers: user }), 502);
  await expectStatus(fetch(`${base}/api/public/me`), 401);
  // Unknown to the store (a miss, then a negative hit), and not of this deployment (forged).
  const unknown = { authorization: `Bearer ${cached.tokengate.context.minter.mint()}` };
  for (let index = 0; index < 2; index += 1) await expectStatus(fetch(`${base}/api/public/me`, { headers: unknown }), 401);
  await expectStatus(fetch(`${base}/api/public/me`, { headers: { authorization: `Bearer ${randomBytes(32).toString('base64url')}` } }), 401);
  // Over the rate, and over the hourly quota.
  const limited = await Promise.all(Array.from({ length: 4 }, () => fetch(`${base}/api/public/limited`, { headers: user })));
  expect(limited.map((response) => response.status)).toContain(429);
  const quota = [];
  for (let index = 0; index < 3; index += 1) quota.push((await fetch(`${base}/api/public/quota`, { headers: user })).status);
  expect(quota).toContain(429);

  // The decision listener: one check allowed, one refused.
  const check = (headers: Record<string, string>) =>
    fetch(`${cached.decisionsUrl}/auth-request`, { headers: { 'x-original-method': 'GET', 'x-original-uri': '/api/public/me', ...headers } });
  await expectStatus(check(user), 200);
  await expectStatus(check({}), 401);
}

/** What happens once: a revocation, the issuer's endpoints, config reloads, the second tokengate's connections. */
async function events(): Promise<void> {
  const base = cached.baseUrl;
  // A revocation made by another sidecar arrives over the store's feed.
  const revoked = await cached.issue();
  await expectStatus(fetch(`${base}/api/public/me`, { headers: { authorization: `Bearer ${revoked}` } }), 200);
  const otherSidecar = createTestRedisStore(prefix, { url: redis.url });
  try {
    expect(await otherSidecar.tokens.revokeAccessToken(tokenDigest(revoked))).toBe(1);
  } finally {
    await otherSidecar.close();
  }
  await eventually(async () => (await scrape(cached)).includes('tokengate_revocation_messages_total 1'));

  // The issuer: a token issued, a token refused, a sign-in refused.
  const app = await registerApplication(cached.store);
  const token = (secret: string) =>
    postForm(`${base}/oauth/token`, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(app.clientId, secret) });
  await expectStatus(token(app.clientSecret!), 200);
  await expectStatus(token('wrong'), 401);
  await cached.store.applications.put(application());
  const browser = new FormClient(base);
  const login = await browser.get(authorizePath({ client_id: 'box-office', redirect_uri: 'https://app.example/cb', response_type: 'code', state: 's' }));
  expect(login.status).toBe(200);
  expect((await browser.post('/oauth/authorize/login', { ...formFields(login.text), email: 'nobody@example.com', password: 'wrong' })).status).toBe(200);

  // A reload that applies, then one that cannot.
  const config = cached.tokengate.context.config;
  expect(cached.tokengate.reload(() => parseConfig(JSON.stringify({ ...config, cache: { ...config.cache, ttlSeconds: 30 } }), 'reloaded', {})).result).toBe(
    'success',
  );
  expect(cached.tokengate.reload(() => parseConfig('server: [', 'broken', {})).result).toBe('failure');

  // The second tokengate: a connection over its limit (before any other connection, which the
  // client would keep alive), a request its HTTP parser refuses, a request it forwards.
  const holder = connect(uncached.port, '127.0.0.1');
  held.push(holder);
  await new Promise((resolve) => holder.once('connect', resolve));
  await eventually(async () => (await scrape(uncached)).includes('tokengate_open_connections{listener="public"} 1'));
  expect(statusOf(await rawRequest(uncached.port, 'GET /api/public/me HTTP/1.1\r\nHost: x\r\n\r\n'))).toBe(503);
  holder.destroy();
  await eventually(async () => (await scrape(uncached)).includes('tokengate_open_connections{listener="public"} 0'));
  expect(statusOf(await rawRequest(uncached.port, 'NOT HTTP AT ALL\r\n\r\n'))).toBe(400);
  await expectStatus(fetch(`${uncached.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${await uncached.issue()}` } }), 200);
}

beforeAll(async () => {
  redis = await ThrowawayRedis.start();
  upstream = await startUpstream((request, response) => {
    response.statusCode = request.url!.startsWith('/api/public/orders') ? 503 : 200;
    response.end('{}');
  });
  const dead = `http://127.0.0.1:${await freePort()}`;
  prefix = uniquePrefix('monitoring');
  cached = await startTokengate('monitoring', {
    store: createTestRedisStore(prefix, { url: redis.url, commandTimeoutMs: 500 }),
    config: {
      decisions: { enabled: true },
      rateLimits: { tight: { requestsPerSecond: 0.2, burst: 1 }, hourly: { requestsPerSecond: 100, burst: 100, requestsPerHour: 2 } },
      routes: [
        { path: '/api/public/me', upstream: upstream.url },
        { path: '/api/public/orders', upstream: upstream.url },
        { path: '/api/public/tickets', upstream: dead },
        { path: '/api/public/limited', upstream: upstream.url, rateLimit: 'tight' },
        { path: '/api/public/quota', upstream: upstream.url, rateLimit: 'hourly' },
      ],
    },
  });
  uncached = await startTokengate('monitoring-uncached', {
    config: { cache: { enabled: false }, server: { maxConnections: 1 }, routes: [{ path: '/api/public/me', upstream: upstream.url }] },
  });
  prometheus = await TestPrometheus.start({ job: JOB, targets: [opsTarget(cached), opsTarget(uncached)], ruleFiles: [`${ROOT}/${ALERT_RULES}`] });

  // Every request is counted between two scrapes, and the requests twice, so that each rate the
  // dashboard and the rules take sees an increase; then two scrapes more for the last ones.
  await prometheus.nextScrape();
  await requests();
  await events();
  await prometheus.nextScrape();
  await requests();
  await prometheus.nextScrape();
  await prometheus.nextScrape();
  const expositions = [await scrape(cached), await scrape(uncached)];
  families = new Map(expositions.flatMap((text) => [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((match): [string, string] => [match[1]!, match[2]!])));
  samples = expositions.flatMap(parseExposition);
}, 90_000);

afterAll(async () => {
  for (const socket of held) socket.destroy();
  await prometheus?.stop();
  await cached?.close();
  if (!uncachedStopped) await uncached?.close();
  await upstream?.close();
  await redis?.kill();
});

/** The sample names of a metric family as they appear in an exposition. */
function familyOf(metric: string): string | undefined {
  if (families.has(metric)) return metric;
  const histogram = /^(.+)_(bucket|sum|count)$/.exec(metric)?.[1];
  return histogram !== undefined && families.get(histogram) === 'histogram' ? histogram : undefined;
}

/** The label names and values the samples of `metric` carry in tokengate's answers. */
function labelsOf(metric: string): Map<string, Set<string>> {
  const labels = new Map<string, Set<string>>();
  for (const sample of samples.filter((each) => each.name === metric))
    for (const [name, value] of Object.entries(sample.labels)) (labels.get(name) ?? labels.set(name, new Set()).get(name)!).add(value);
  return labels;
}

/**
 * What an expression reads that tokengate does not expose: a metric name, a label of that metric,
 * a label value it matches, or a grouping label no metric of the expression has. Values holding
 * a Grafana variable (`$job`) are left out, and regular expressions are read as alternatives of
 * plain values (`public|decisions`), the only kind the dashboard and the rules use. A label Prometheus
 * adds (job, instance) is on every metric; `up` is Prometheus's own series.
 */
function unexposed(expr: string): string[] {
  const reads = readsOf(expr);
  const problems = reads.errors.map((error) => `does not parse ${error}`);
  const labelsInExpression = new Set([...TARGET_LABELS]);
  for (const { metric, matchers } of reads.selectors) {
    if (metric === '') {
      problems.push('a selector without a metric name');
      continue;
    }
    if (metric in PROMETHEUS_SERIES) continue;
    if (familyOf(metric) === undefined) {
      problems.push(`${metric} is not exposed`);
      continue;
    }
    if (!samples.some((sample) => sample.name === metric)) {
      problems.push(`${metric} has no samples: its labels cannot be checked`);
      continue;
    }
    const labels = labelsOf(metric);
    for (const label of labels.keys()) labelsInExpression.add(label);
    for (const { label, op, value } of matchers) {
      if (TARGET_LABELS.has(label)) continue;
      const values = labels.get(label);
      if (values === undefined) {
        problems.push(`${metric} has no label ${label}`);
        continue;
      }
      if (value.includes('$') || op === '!=') continue;
      const wanted = op === '=' ? [value] : value.split('|');
      for (const each of wanted)
        if (!/^[\w.+-]+$/.test(each) || !values.has(each)) problems.push(`${metric}{${label}${op}"${value}"}: "${each}" is not a value it has`);
    }
  }
  for (const label of reads.groupingLabels) if (!labelsInExpression.has(label)) problems.push(`no metric of the expression has the label ${label}`);
  return problems;
}

/** A dashboard query as Grafana sends it, with every variable set: this job, every instance, a minute per rate. */
function asGrafanaSends(expr: string): string {
  return expr.replaceAll('$__rate_interval', '1m').replaceAll('"$job"', `"${JOB}"`).replaceAll('"$instance"', '".+"');
}

describe('the dashboard, as Grafana imports it', () => {
  const dashboard = readDashboard();
  const panels = dashboard.panels.filter((panel) => panel.type !== 'row');
  const DATASOURCE = { type: 'prometheus', uid: '${datasource}' };

  it('asks for its Prometheus data source, and reads every panel, query and variable through it', () => {
    expect(dashboard.templating.list.find((variable) => variable.name === 'datasource')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    for (const panel of panels) {
      expect(panel.datasource, panel.title).toEqual(DATASOURCE);
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets!) expect(target.datasource, panel.title).toEqual(DATASOURCE);
    }
    for (const variable of dashboard.templating.list.filter((each) => each.type === 'query')) expect(variable.datasource, variable.name).toEqual(DATASOURCE);
  });

  it('lays its panels on the 24-column grid without overlap, each with its own id', () => {
    expect(new Set(dashboard.panels.map((panel) => panel.id)).size).toBe(dashboard.panels.length);
    const cells = new Map<string, string>();
    for (const panel of dashboard.panels) {
      const { x, y, w, h } = panel.gridPos;
      expect(x + w, panel.title).toBeLessThanOrEqual(24);
      expect(Math.min(x, y, w - 1, h - 1), panel.title).toBeGreaterThanOrEqual(0);
      for (let column = x; column < x + w; column += 1)
        for (let row = y; row < y + h; row += 1) {
          const cell = `${column},${row}`;
          expect(cells.get(cell), `${panel.title} overlaps ${cells.get(cell)}`).toBeUndefined();
          cells.set(cell, panel.title);
        }
    }
  });
});

describe('what the dashboard and the rules read', () => {
  const dashboard = readDashboard();
  const queries = dashboardQueries(dashboard);
  const rules = alertRules();

  it('is what tokengate exposes: every metric, label and matched value of every panel, variable and rule', () => {
    expect(queries.length).toBeGreaterThan(40);
    const problems = [
      ...queries.flatMap(({ panel, expr }) => unexposed(asGrafanaSends(expr)).map((problem) => `panel "${panel}": ${problem}`)),
      ...variableSelectors(dashboard).flatMap(({ variable, selector, label }) =>
        unexposed(`count by (${label}) (${asGrafanaSends(selector)})`).map((problem) => `variable ${variable}: ${problem}`),
      ),
      ...rules.flatMap((rule) => unexposed(rule.expr).map((problem) => `alert ${rule.alert}: ${problem}`)),
    ];
    expect(problems).toEqual([]);
  });

  it('is checked: a misspelt metric, an unknown label, a value tokengate never sets and a stray grouping label are each reported', () => {
    expect(unexposed('rate(tokengate_http_request_total[5m])')).toEqual(['tokengate_http_request_total is not exposed']);
    expect(unexposed('tokengate_store_up{outcome="ok"}')).toEqual(['tokengate_store_up has no label outcome']);
    expect(unexposed('tokengate_gateway_requests_total{outcome=~"forwarded|failure"}')).toEqual([
      'tokengate_gateway_requests_total{outcome=~"forwarded|failure"}: "failure" is not a value it has',
    ]);
    expect(unexposed('sum by (policy) (rate(tokengate_http_requests_total[5m]))')).toEqual(['no metric of the expression has the label policy']);
    expect(unexposed('sum(rate(tokengate_http_requests_total[5m])')[0]).toMatch(/^does not parse/);
    expect(unexposed('histogram_quantile(0.99, sum by (le, route) (rate(tokengate_gateway_request_duration_seconds_bucket{job="x"}[5m])))')).toEqual([]);
  });

  it('answers every dashboard query with series from Prometheus, and the variables with both tokengates', async () => {
    const empty: string[] = [];
    for (const { panel, expr } of queries) if ((await prometheus.query(asGrafanaSends(expr))).length === 0) empty.push(`${panel}: ${expr}`);
    expect(empty).toEqual([]);
    for (const { selector, label } of variableSelectors(dashboard)) {
      const values = (await prometheus.query(`count by (${label}) (${asGrafanaSends(selector)})`)).map((sample) => sample.metric[label]);
      expect(values.sort(), label).toEqual(label === 'job' ? [JOB] : [opsTarget(cached), opsTarget(uncached)].sort());
    }
  });

  it('evaluates every rule without error, and raises the alerts the traffic calls for', async () => {
    const loaded = await prometheus.rules();
    expect(loaded.map((rule) => rule.name).sort()).toEqual(rules.map((rule) => rule.alert).sort());
    expect(loaded.filter((rule) => rule.health !== 'ok')).toEqual([]);
    // Every request to /api/public/tickets failed (nobody listens there); 6 of the requests were
    // answered 5xx; the last reload was refused.
    await eventually(async () => {
      const names = (await prometheus.alerts()).map((alert) => alert.labels.alertname);
      return ['TokengateUpstreamFailing', 'TokengateServerErrors', 'TokengateConfigReloadFailed'].every((name) => names.includes(name));
    }, 15_000);
    const alerts = await prometheus.alerts();
    expect(only(alerts, 'TokengateUpstreamFailing')).toEqual([
      expect.objectContaining({
        labels: { alertname: 'TokengateUpstreamFailing', job: JOB, route: '/api/public/tickets', severity: 'critical' },
        annotations: expect.objectContaining({ summary: 'The upstream of route /api/public/tickets fails 100% of the requests (tokengate)' }),
      }),
    ]);
    expect(only(alerts, 'TokengateServerErrors').map((alert) => alert.labels)).toEqual([
      { alertname: 'TokengateServerErrors', job: JOB, severity: 'critical' },
    ]);
    expect(only(alerts, 'TokengateConfigReloadFailed').map((alert) => alert.labels.instance)).toEqual([opsTarget(cached)]);
    // Nothing is down, and the tokengate without a cache (its feed gauge 0 from the start) does not count as deaf to revocations.
    for (const name of ['TokengateDown', 'TokengateStoreDown', 'TokengateRevocationFeedDown']) expect(only(alerts, name), name).toEqual([]);
  }, 30_000);
});

function only(alerts: PrometheusAlert[], name: string): PrometheusAlert[] {
  return alerts.filter((alert) => alert.labels.alertname === name);
}

/** Waits until Prometheus has `name` pending or firing, and returns the instances it is raised for. */
async function raisedFor(name: string): Promise<string[]> {
  let instances: string[] = [];
  await eventually(async () => {
    instances = only(await prometheus.alerts(), name).map((alert) => alert.labels.instance!);
    return instances.length > 0;
  }, 20_000);
  return instances.sort();
}

describe('failures, as the rules see them', () => {
  it('the store gone: TokengateStoreDown and TokengateRevocationFeedDown for the tokengate that used it, and only for it', async () => {
    await redis.kill();
    // A token it has not cached must be read from the store: 503, and the store is marked down.
    const unknown = cached.tokengate.context.minter.mint();
    expect((await fetch(`${cached.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${unknown}` } })).status).toBe(503);
    expect(await raisedFor('TokengateStoreDown')).toEqual([opsTarget(cached)]);
    expect(await raisedFor('TokengateRevocationFeedDown')).toEqual([opsTarget(cached)]);
    expect(only(await prometheus.alerts(), 'TokengateStoreDown')[0]!.annotations.summary).toBe(`tokengate ${opsTarget(cached)} cannot reach its store`);
  }, 30_000);

  it('a tokengate stopped: TokengateDown for it, and only for it', async () => {
    uncachedStopped = true;
    await uncached.close();
    expect(await raisedFor('TokengateDown')).toEqual([opsTarget(uncached)]);
    expect((await prometheus.targets()).find((target) => target.scrapeUrl.includes(opsTarget(uncached)))?.health).toBe('down');
  }, 30_000);
});
