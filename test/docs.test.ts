import { describe, expect, it } from 'vitest';
import { createMetrics } from '../src/observability/metrics.js';
import { configReferenceRows } from './support/config-reference.js';
import { anchorsOf, brokenLink, documentFiles, headingAnchor, linkTargets, readDocument, tableUnder } from './support/markdown.js';

/** The documents under docs/ say what the code does: these checks fail when the two drift apart. */

describe('docs/configuration.md', () => {
  it('holds the configuration reference exactly as the schema defines it (key, type, default, meaning), in its order', () => {
    const documented = tableUnder(readDocument('docs/configuration.md'), '## Reference');
    // On failure the expected side holds the rows to paste under "## Reference".
    expect(documented.join('\n')).toBe(
      configReferenceRows()
        .map((row) => row.markdown)
        .join('\n'),
    );
  });
});

describe('docs/operations.md', () => {
  it('documents every metric tokengate exports, and no other', () => {
    const exported = createMetrics()
      .registry.getMetricsAsArray()
      .map((metric) => metric.name)
      .filter((name) => name.startsWith('tokengate_'));
    expect(exported.length).toBeGreaterThan(10);
    const documented = tableUnder(readDocument('docs/operations.md'), '## Metrics').map((row) => /^\| `([^`]+)` \|/.exec(row)?.[1]);
    expect(documented.sort()).toEqual(exported.sort());
  });
});

describe('links between the documents', () => {
  it('resolve: every relative link of README.md and docs/ names a file in the repository, and its anchor a heading', () => {
    const links = documentFiles().flatMap((file) => linkTargets(readDocument(file)).map((target) => ({ file, target })));
    expect(links.length).toBeGreaterThan(30);
    expect(links.map(({ file, target }) => brokenLink(file, target)).filter((problem) => problem !== null)).toEqual([]);
  });

  it('are checked: a missing file, a missing heading and a path out of the repository are each reported', () => {
    expect(brokenLink('docs/gateway.md', 'configuration.md#reference')).toBeNull();
    expect(brokenLink('README.md', 'docs/gateway.md#paths')).toBeNull();
    expect(brokenLink('README.md', 'https://example.com/anything')).toBeNull();
    expect(brokenLink('README.md', 'docs/no-such-page.md')).toBe('README.md: docs/no-such-page.md names no file');
    expect(brokenLink('README.md', 'docs/gateway.md#no-such-heading')).toBe('README.md: docs/gateway.md#no-such-heading names no heading of docs/gateway.md');
    expect(brokenLink('docs/gateway.md', '#no-such-heading')).toBe('docs/gateway.md: #no-such-heading names no heading of docs/gateway.md');
    expect(brokenLink('docs/design.md', '../../DESIGN.md')).toBe('docs/design.md: ../../DESIGN.md points outside the repository');
  });

  it('find links and anchors the way GitHub renders them', () => {
    expect(headingAnchor('`GET /oauth/authorize`: sign-in and consent pages')).toBe('get-oauthauthorize-sign-in-and-consent-pages');
    expect(headingAnchor('Walkthrough: client_credentials with curl')).toBe('walkthrough-client_credentials-with-curl');
    expect([...anchorsOf('# A\n\n## Notes\n\n```sh\n# not a heading\n```\n\n## Notes\n')]).toEqual(['a', 'notes', 'notes-1']);
    expect(linkTargets('[a](one.md) and `[b](two.md)` and [c](three.md#x "title")\n```\n[d](four.md)\n```\n[e]: five.md\n')).toEqual([
      'one.md',
      'three.md#x',
      'five.md',
    ]);
  });
});
