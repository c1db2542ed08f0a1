import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { ConfigError, parseConfig } from '../../src/load-config.js';
import { anyText, holds, piecesOf, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * The config loader (src/config/load.ts) as properties: whatever text it is given, YAML or not,
 * it returns a config or a ConfigError listing problems, never another exception; and a shipped
 * config with any key given a value of any type, or an unknown key added, is refused with
 * problems that each name a key of the file and its line.
 */

function load(text: string): ConfigError | 'loaded' {
  try {
    parseConfig(text, 'fuzzed.yaml', {});
    return 'loaded';
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
}

/** YAML's sharper edges: anchors and aliases, tags, merge keys, complex keys, flow and block nesting, documents. */
const YAML_PIECES = [
  'server:\n',
  '  port: ',
  '8080',
  '\n',
  '  ',
  '- ',
  '&a ',
  '*a',
  '&b [*a, *a, *a, *a]',
  '!!binary aGk=',
  '!!str ',
  '!custom ',
  '<<: ',
  '? ',
  ': ',
  '[',
  ']',
  '{',
  '}',
  ', ',
  '"',
  "'",
  '#',
  '---\n',
  '...\n',
  '|\n',
  '>-\n',
  '${A}',
  '${A:-x}',
  '$$',
  'routes:',
  'issuer:',
  'null',
  '~',
  '1e400',
  '0x1F',
  '.inf',
  '__proto__',
  'constructor',
  '\t',
  '\u00e9',
];

describe('the config loader, for any text', () => {
  it(
    'returns a config or a ConfigError, never another exception',
    () =>
      holds(
        'config: any text',
        fc.property(fc.oneof(piecesOf(YAML_PIECES, 30), anyText(80)), (text) => {
          const result = load(text);
          return (
            result === 'loaded' ||
            (result.problems.length > 0 && result.problems.every((problem) => typeof problem.message === 'string' && problem.message !== ''))
          );
        }),
        100,
      ),
    PROPERTY_TIMEOUT,
  );
});

/** Every key path of a document, mappings and lists alike. */
function keyPaths(value: unknown, path: Array<string | number> = []): Array<Array<string | number>> {
  if (Array.isArray(value)) return [path, ...value.flatMap((item, index) => keyPaths(item, [...path, index]))];
  if (typeof value === 'object' && value !== null) return [path, ...Object.entries(value).flatMap(([key, item]) => keyPaths(item, [...path, key]))];
  return [path];
}

function withValueAt(document: unknown, path: ReadonlyArray<string | number>, value: unknown): unknown {
  const copy = structuredClone(document) as Record<string | number, unknown>;
  let parent = copy;
  for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>;
  parent[path.at(-1)!] = value;
  return copy;
}

const keyPathText = (path: ReadonlyArray<string | number>) =>
  path.reduce<string>((text, key) => (typeof key === 'number' ? `${text}[${key}]` : text === '' ? key : `${text}.${key}`), '');

describe('the config loader, for a shipped config with any one key changed', () => {
  const shipped = parse(readFileSync('config/tokengate.redis.yaml', 'utf8')) as unknown;
  const paths = keyPaths(shipped).filter((path) => path.length > 0);
  const anyValue = fc.oneof(
    fc.jsonValue({ maxDepth: 2 }),
    fc.constantFrom(-1, 0, 2 ** 31, 2 ** 53, 1e300, 0.5, '', 'x', true, null, [], {}, ['a'], { unknown: 1 }),
  );

  it(
    'refuses it, or takes it, and every problem names a key of the file with its line',
    () =>
      holds(
        'config: one key changed',
        fc.property(fc.constantFrom(...paths), anyValue, (path, value) => {
          const text = stringify(withValueAt(shipped, path, value));
          const result = load(text);
          if (result === 'loaded') return true;
          for (const problem of result.problems) {
            expect({ path: problem.path, line: typeof problem.line }).toEqual({ path: expect.stringMatching(/^[A-Za-z_]/), line: 'number' });
          }
          return true;
        }),
        40,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'names the very key that was given a mapping or a list where the schema wants a number or true/false',
    () =>
      holds(
        'config: wrong type named',
        fc.property(
          fc.constantFrom(
            ...paths.filter((path) =>
              ['number', 'boolean'].includes(typeof path.reduce<unknown>((node, key) => (node as Record<string | number, unknown>)[key], shipped)),
            ),
          ),
          fc.constantFrom<unknown>({ a: 1 }, [1, 2], 'not a number'),
          (path, value) => {
            const result = load(stringify(withValueAt(shipped, path, value)));
            expect(result).not.toBe('loaded');
            expect((result as ConfigError).problems.map((problem) => problem.path)).toContain(keyPathText(path));
            return true;
          },
        ),
        30,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'names an unknown key added anywhere',
    () =>
      holds(
        'config: unknown key named',
        fc.property(
          fc.constantFrom(
            ...paths.filter((path) => {
              const node = path.reduce<unknown>((each, key) => (each as Record<string | number, unknown>)[key], shipped);
              return typeof node === 'object' && node !== null && !Array.isArray(node);
            }),
          ),
          fc.stringMatching(/^[a-z][A-Za-z]{2,12}$/),
          (path, key) => {
            const node = path.reduce<unknown>((each, step) => (each as Record<string | number, unknown>)[step], shipped) as Record<string, unknown>;
            fc.pre(!(key in node) && !['natMap', 'scopeDescriptions', 'rateLimits'].includes(String(path.at(-1))));
            const result = load(stringify(withValueAt(shipped, [...path, key], 1)));
            expect(result).not.toBe('loaded');
            expect((result as ConfigError).problems.map((problem) => problem.path)).toContain(keyPathText([...path, key]));
            return true;
          },
        ),
        30,
      ),
    PROPERTY_TIMEOUT,
  );
});
