import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configReferenceRows } from './support/config-reference.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const metricsSource = readFileSync(new URL('../src/observability/metrics.ts', import.meta.url), 'utf8');

describe('README', () => {
  it('documents every config key exactly as the schema defines it (type, default, meaning)', () => {
    const missing = configReferenceRows().filter((row) => !readme.includes(row.markdown));
    // On failure the message holds the rows to paste into the README's configuration table.
    expect(missing.map((row) => row.markdown).join('\n')).toBe('');
  });

  it('documents no config key the schema does not have', () => {
    const known = new Set(configReferenceRows().map((row) => row.key));
    const section = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('\n## ', readme.indexOf('## Configuration') + 1));
    const documented = [...section.matchAll(/^\| `([^`]+)` \|/gm)].map((match) => match[1]!);
    expect(documented.filter((key) => !known.has(key))).toEqual([]);
  });

  it('documents every metric tokengate exports', () => {
    const names = [...metricsSource.matchAll(/name: '(tokengate_[a-z_]+)'/g)].map((match) => match[1]!);
    expect(names.length).toBeGreaterThan(10);
    expect(names.filter((name) => !readme.includes(`\`${name}`))).toEqual([]);
  });
});
