import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { ROOT } from './markdown.js';
import { freePort } from './ports.js';
import { eventually } from './wait.js';

/** The shipped rules, the dashboard and what Prometheus's own binaries say of them. */

export const ALERT_RULES = 'examples/prometheus/tokengate-alerts.yml';
export const ALERT_TESTS = 'examples/prometheus/tokengate-alerts.test.yml';
export const DASHBOARD = 'examples/grafana/tokengate.json';

/** Debian's `prometheus` package puts both here; .ci/run installs it. */
export const PROMETHEUS = process.env.TOKENGATE_TEST_PROMETHEUS ?? '/usr/bin/prometheus';
export const PROMTOOL = process.env.TOKENGATE_TEST_PROMTOOL ?? '/usr/bin/promtool';

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface RuleFile {
  groups: Array<{ name: string; rules: AlertRule[] }>;
}

export function readRules(file = ALERT_RULES): RuleFile {
  return parse(readFileSync(join(ROOT, file), 'utf8')) as RuleFile;
}

export function alertRules(): AlertRule[] {
  return readRules().groups.flatMap((group) => group.rules);
}

interface DashboardTarget {
  expr: string;
}

interface DashboardPanel {
  type: string;
  title: string;
  id: number;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Array<DashboardTarget & { datasource?: { type: string; uid: string }; refId: string }>;
}

export interface Dashboard {
  uid: string;
  title: string;
  panels: DashboardPanel[];
  templating: { list: Array<{ name: string; type: string; query: string | { query: string }; datasource?: { type: string; uid: string } }> };
}

export function readDashboard(): Dashboard {
  return JSON.parse(readFileSync(join(ROOT, DASHBOARD), 'utf8')) as Dashboard;
}

/** Every PromQL expression of the dashboard's panels, with the panel it belongs to. */
export function dashboardQueries(dashboard: Dashboard): Array<{ panel: string; expr: string }> {
  return dashboard.panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ panel: panel.title, expr: target.expr })));
}

/**
 * The selector of each `label_values(selector, label)` variable query: Grafana's own function,
 * not PromQL, whose first argument is a series selector.
 */
export function variableSelectors(dashboard: Dashboard): Array<{ variable: string; selector: string; label: string }> {
  return dashboard.templating.list
    .filter((variable) => variable.type === 'query')
    .map((variable) => {
      const query = typeof variable.query === 'string' ? variable.query : variable.query.query;
      const match = /^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$/.exec(query);
      if (match === null) throw new Error(`variable ${variable.name}: not a label_values(selector, label) query: ${query}`);
      return { variable: variable.name, selector: match[1]!, label: match[2]! };
    });
}

/** Runs promtool with these arguments in `cwd`: its exit status and everything it printed. */
export function promtool(args: string[], cwd = ROOT): { status: number | null; output: string } {
  const run = spawnSync(PROMTOOL, args, { cwd, encoding: 'utf8' });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

export interface PrometheusAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing';
  value: string;
}

interface ApiAnswer<Data> {
  status: 'success' | 'error';
  data: Data;
  error?: string;
}

/** One sample of an instant query's answer. */
export interface InstantSample {
  metric: Record<string, string>;
  value: [number, string];
}

/**
 * A real Prometheus of the test's own: its config, rules and data in a temporary directory, its
 * web API on a free loopback port (it cannot take port 0: it would not say which it got).
 */
export class TestPrometheus {
  private constructor(
    private readonly process: ChildProcess,
    private readonly directory: string,
    readonly url: string,
    private readonly output: () => string,
    private readonly targetCount: number,
  ) {}

  /**
   * Scrapes `targets` (host:port of ops listeners) as job `job` every second and evaluates
   * `ruleFiles` every second. `features`: its `--enable-feature` flags (`exemplar-storage`).
   */
  static async start(options: { job: string; targets: string[]; ruleFiles: string[]; features?: string[] }): Promise<TestPrometheus> {
    const directory = mkdtempSync(join(tmpdir(), 'tokengate-prometheus-'));
    const config = {
      global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
      rule_files: options.ruleFiles,
      scrape_configs: [{ job_name: options.job, metrics_path: '/metrics', static_configs: [{ targets: options.targets }] }],
    };
    writeFileSync(join(directory, 'prometheus.yml'), JSON.stringify(config));
    const port = await freePort();
    let output = '';
    const child = spawn(
      PROMETHEUS,
      [
        `--config.file=${join(directory, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(directory, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--log.level=warn',
        ...(options.features ?? []).map((feature) => `--enable-feature=${feature}`),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    for (const stream of [child.stdout!, child.stderr!]) stream.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const prometheus = new TestPrometheus(child, directory, `http://127.0.0.1:${port}`, () => output, options.targets.length);
    try {
      await eventually(async () => {
        if (child.exitCode !== null) throw new Error(`prometheus exited (${child.exitCode}): ${output}`);
        return (await fetch(`${prometheus.url}/-/ready`).catch(() => null))?.status === 200;
      }, 30_000);
    } catch (error) {
      await prometheus.stop();
      throw error;
    }
    return prometheus;
  }

  private async api<Data>(path: string, parameters: Record<string, string> = {}): Promise<Data> {
    const response = await fetch(`${this.url}/api/v1/${path}?${new URLSearchParams(parameters).toString()}`);
    const answer = (await response.json()) as ApiAnswer<Data>;
    if (answer.status !== 'success') throw new Error(`${path} ${JSON.stringify(parameters)}: ${answer.error ?? response.status}`);
    return answer.data;
  }

  /** An instant query at the current time. */
  async query(expr: string): Promise<InstantSample[]> {
    const data = await this.api<{ resultType: string; result: InstantSample[] }>('query', { query: expr });
    if (data.resultType !== 'vector') throw new Error(`${expr}: a ${data.resultType}, not an instant vector`);
    return data.result;
  }

  /** The exemplars stored for the series `expr` selects over the last `seconds`: their labels (trace_id, span_id), value and time. */
  async exemplars(
    expr: string,
    seconds = 300,
  ): Promise<Array<{ seriesLabels: Record<string, string>; exemplars: Array<{ labels: Record<string, string>; value: string; timestamp: number }> }>> {
    const end = Date.now() / 1000;
    return this.api('query_exemplars', { query: expr, start: String(end - seconds), end: String(end + 60) });
  }

  /** The alerts pending or firing now. */
  async alerts(): Promise<PrometheusAlert[]> {
    return (await this.api<{ alerts: PrometheusAlert[] }>('alerts')).alerts;
  }

  /** The scrape targets and the health and start of their last scrape. */
  async targets(): Promise<Array<{ scrapeUrl: string; health: string; lastError: string; lastScrape: string }>> {
    return (await this.api<{ activeTargets: Array<{ scrapeUrl: string; health: string; lastError: string; lastScrape: string }> }>('targets')).activeTargets;
  }

  /**
   * Waits until every target has been scraped successfully by a scrape that started from now
   * on. A counter's increase is seen only between two of its samples: what a test does between
   * two calls is in Prometheus's data as an increase.
   */
  async nextScrape(): Promise<void> {
    const since = Date.now();
    // Prometheus takes its targets from its discovery a few seconds after it is ready.
    await eventually(async () => {
      const targets = await this.targets();
      return targets.length === this.targetCount && targets.every((target) => target.health === 'up' && Date.parse(target.lastScrape) > since);
    }, 15_000);
  }

  /** Loaded rule groups: their rules' names, health and last evaluation error. */
  async rules(): Promise<Array<{ name: string; health: string; lastError?: string }>> {
    const data = await this.api<{ groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string }> }> }>('rules');
    return data.groups.flatMap((group) => group.rules);
  }

  /** What Prometheus logged (warnings and errors). */
  log(): string {
    return this.output();
  }

  async stop(): Promise<void> {
    if (this.process.exitCode === null && this.process.signalCode === null) {
      this.process.kill('SIGTERM');
      await once(this.process, 'exit');
    }
    rmSync(this.directory, { recursive: true, force: true });
  }
}
