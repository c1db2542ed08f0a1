import { describe, expect, it } from 'vitest';
import { documentFiles, linkTargets, readDocument } from './support/markdown.js';

const readme = readDocument('README.md');

describe('README', () => {
  it('fits in two screens: details live in docs/', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(120);
  });

  it('links to every page of docs/', () => {
    const linked = new Set(linkTargets(readme).map((target) => target.split('#')[0]));
    expect(documentFiles().filter((file) => file.startsWith('docs/') && !linked.has(file))).toEqual([]);
  });
});
