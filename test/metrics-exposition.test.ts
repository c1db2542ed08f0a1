import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { readDocument } from './support/markdown.js';

/**
 * What Prometheus scrapes from /metrics: tokengate's own families, and the process and Node.js
 * families under the standard names every Node.js dashboard and alert queries.
 */

let running: RunningTokengate;
let families: Map<string, string>;

beforeAll(async () => {
  running = await startTokengate('metrics-exposition');
  const response = await fetch(`${running.opsUrl}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  const exposition = await response.text();
  families = new Map([...exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((match) => [match[1]!, match[2]!]));
});
afterAll(() => running?.close());

describe('/metrics', () => {
  it('exports the process and Node.js metrics under their standard names, never behind a tokengate_ prefix', () => {
    expect(families.get('process_cpu_seconds_total')).toBe('counter');
    expect(families.get('process_resident_memory_bytes')).toBe('gauge');
    expect(families.get('process_start_time_seconds')).toBe('gauge');
    expect(families.get('nodejs_heap_size_used_bytes')).toBe('gauge');
    expect(families.get('nodejs_eventloop_lag_seconds')).toBe('gauge');
    expect(families.get('nodejs_gc_duration_seconds')).toBe('histogram');
    expect([...families.keys()].filter((name) => /^tokengate_(process|nodejs)_/.test(name))).toEqual([]);
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
