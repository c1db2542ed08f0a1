import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { anchorsOf, readDocument, tableUnder } from './support/markdown.js';
import { ALERT_RULES, ALERT_TESTS, alertRules, promtool, readRules, type AlertRule } from './support/prometheus.js';

/**
 * The shipped alerting rules, checked by Prometheus's own promtool: the file loads, its unit
 * tests (examples/prometheus/tokengate-alerts.test.yml) pass, and they are tests that bite: each
 * alert weakened in a copy of the file (never firing, firing at once, a guard or threshold
 * removed) makes them fail. The real Prometheus against a real tokengate is test/monitoring.test.ts.
 */

const RUNBOOK = 'docs/alerts.md';
const RUNBOOK_BASE = 'https://tokengate.example/docs/alerts.md#';
const rules = alertRules();
const alertNames = [...new Set(rules.map((rule) => rule.alert))];

const scratch = mkdtempSync(join(tmpdir(), 'tokengate-alert-rules-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs the unit tests of one alert against a copy of the rules in which `change` has altered that alert's rules. */
function testWith(alert: string, change: (rule: AlertRule) => AlertRule): { status: number | null; output: string } {
  const file = readRules();
  let changed = 0;
  for (const group of file.groups) {
    group.rules = group.rules.map((rule) => {
      if (rule.alert !== alert) return rule;
      changed += 1;
      return change({ ...rule });
    });
  }
  expect(changed, alert).toBeGreaterThan(0);
  const directory = mkdtempSync(join(scratch, 'weakened-'));
  writeFileSync(join(directory, basename(ALERT_RULES)), stringify(file));
  // The tests of that alert only: the others have nothing to say about it, and take time.
  const tests = parse(readDocument(ALERT_TESTS)) as { tests: Array<{ alert_rule_test: Array<{ alertname: string }> }> };
  tests.tests = tests.tests.filter((test) => test.alert_rule_test.some((each) => each.alertname === alert));
  expect(tests.tests.length, alert).toBeGreaterThan(0);
  writeFileSync(join(directory, basename(ALERT_TESTS)), stringify(tests));
  return promtool(['test', 'rules', basename(ALERT_TESTS)], directory);
}

/** The expression with `from` replaced by `to`: `from` must be in it, or the weakening tests nothing. */
function replaced(rule: AlertRule, from: string, to: string): AlertRule {
  expect(rule.expr, `${rule.alert} has ${from}`).toContain(from);
  return { ...rule, expr: rule.expr.replace(from, to) };
}

describe('examples/prometheus/tokengate-alerts.yml', () => {
  it('passes promtool check rules', () => {
    const { status, output } = promtool(['check', 'rules', ALERT_RULES]);
    expect(output).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(status).toBe(0);
  });

  it('passes its unit tests (promtool test rules), which test every alert', () => {
    const { status, output } = promtool(['test', 'rules', ALERT_TESTS]);
    expect(output).toContain('SUCCESS');
    expect(status).toBe(0);
    const tested = new Set([...readDocument(ALERT_TESTS).matchAll(/^\s+alertname: (\S+)$/gm)].map((match) => match[1]!));
    expect([...tested].sort()).toEqual([...alertNames].sort());
  });

  it('gives every alert a for, a severity, a summary, a description and a runbook_url at its section of docs/alerts.md', () => {
    const anchors = anchorsOf(readDocument(RUNBOOK));
    for (const rule of rules) {
      expect(rule.for, rule.alert).toMatch(/^\d+[smh]$/);
      expect(['critical', 'warning'], rule.alert).toContain(rule.labels?.severity);
      expect(Object.keys(rule.annotations ?? {}).sort(), rule.alert).toEqual(['description', 'runbook_url', 'summary']);
      const anchor = rule.alert.toLowerCase();
      expect(rule.annotations!.runbook_url, rule.alert).toBe(`${RUNBOOK_BASE}${anchor}`);
      expect(anchors.has(anchor), `${RUNBOOK} has a section ${rule.alert}`).toBe(true);
    }
    // And the runbook has a section for every alert and for no other.
    const sections = [...readDocument(RUNBOOK).matchAll(/^### (Tokengate\w+)$/gm)].map((match) => match[1]!);
    expect(sections).toEqual(alertNames);
  });

  it('is summed up in the table of docs/alerts.md as it is: each alert, its severity and its for, in the order of the file', () => {
    const rows = tableUnder(readDocument(RUNBOOK), '## Loading the rules').map((row) => {
      const [, name, severity, , duration] = row.split('|').map((cell) => cell.trim());
      return [/^\[(\w+)\]/.exec(name!)?.[1], severity, duration];
    });
    expect(rows).toEqual(
      alertNames.map((alert) => {
        const rule = rules.find((each) => each.alert === alert)!;
        return [alert, rule.labels!.severity, rule.for];
      }),
    );
  });

  describe('its unit tests fail when an alert is weakened', () => {
    it.each(alertNames)('%s never firing', (alert) => {
      const { status, output } = testWith(alert, (rule) => ({ ...rule, expr: 'vector(1) < 0' }));
      expect(status).not.toBe(0);
      expect(output).toContain(`alertname: ${alert}`);
    });

    it.each(alertNames)('%s firing as soon as its expression holds (no for)', (alert) => {
      const { status, output } = testWith(alert, (rule) => ({ ...rule, for: '0s' }));
      expect(status).not.toBe(0);
      expect(output).toContain(`alertname: ${alert}`);
    });

    // The series that must not fire, each shown to matter: without the guard or at a lower
    // threshold, the alert fires for them and the test fails.
    const weakenings: Array<[alert: string, what: string, from: string, to: string]> = [
      ['TokengateDown', 'for any target, not only tokengates', ' and on (job, instance) max_over_time(tokengate_config_info[1h])', ''],
      ['TokengateRevocationFeedDown', 'where no cache runs', ' and on (job, instance) tokengate_cache_hits_total', ''],
      ['TokengateServerErrors', 'at 1%', '> 0.05', '> 0.01'],
      ['TokengateUpstreamFailing', 'counting refusals among the requests sent upstream', '{outcome=~"forwarded|failed"}', ''],
      ['TokengateUpstreamFailing', 'at 0.5%', '> 0.05', '> 0.005'],
      ['TokengateCacheHitRatioCollapsed', 'under one store read a second', '\nand sum by (job) (rate(tokengate_cache_misses_total[10m])) > 1', ''],
      ['TokengateCacheHitRatioCollapsed', 'below 99%', '< 0.5', '< 0.99'],
      ['TokengateRefusalsHigh', 'counting rate limits as refusals', ', reason!~"rate_limited|quota_exceeded"', ''],
      ['TokengateRefusalsHigh', 'under one refusal a second', '[5m])) > 1)', '[5m])))'],
      ['TokengateRateLimitedHigh', 'under one 429 a second', '[5m])) > 1)', '[5m])))'],
      ['TokengateRateLimitedHigh', 'at 1%', '> 0.1', '> 0.01'],
      ['TokengateEventLoopLagHigh', 'for any Node.js service', ' and on (job, instance) tokengate_config_info', ''],
    ];
    it.each(weakenings)('%s %s', (alert, _what, from, to) => {
      const { status, output } = testWith(alert, (rule) => replaced(rule, from, to));
      expect(status).not.toBe(0);
      expect(output).toContain(`alertname: ${alert}`);
    });
  });
});

describe('examples/prometheus/prometheus.yml', () => {
  it('passes promtool check config, with the rules it loads', () => {
    const { status, output } = promtool(['check', 'config', 'examples/prometheus/prometheus.yml']);
    expect(output).toContain('SUCCESS: 1 rule files found');
    expect(output).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(status).toBe(0);
  });
});
