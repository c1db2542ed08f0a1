import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizePath, PATH_REFUSALS, PathRefusal } from '../../src/http/path.js';
import { APPLICATION_TOKEN, startUpstream, type Upstream } from '../support/gateway.js';
import { exchange } from '../support/ingress.js';
import { startTokengate, type RunningTokengate } from '../support/instance.js';
import { PATH_ROUTES, type PathRouteName } from '../support/path-attempts.js';
import { anyText, holds, piecesOf, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * Path normalization (src/http/path.ts), as properties over any raw path: what it accepts is
 * canonical, has no dot or empty segment in any spelling, and is what a WHATWG URL parser (what
 * undici and browsers use) makes of the same path; and through a running gateway, the route a
 * request matched is the route its upstream's path belongs to.
 */

/** What path parsers disagree on: separators and their escapes, dots, parameters, overlong UTF-8, broken escapes. */
const PIECES = [
  '/',
  '/',
  'a',
  'B',
  '.',
  '..',
  '%2e',
  '%2E',
  '%2f',
  '%2F',
  '%5C',
  '%5c',
  '\\',
  ';',
  '%3b',
  '%3B',
  '%25',
  '%41',
  '%7e',
  '%7E',
  '~',
  '%c0%ae',
  '%e2%82%ac',
  '%ff',
  '%00',
  '%0a',
  '%',
  '%zz',
  '//',
  ':',
  '@',
  '!',
  '"',
  '+',
  '?',
  '#',
  '%3f',
  ' ',
  '\t',
  'é',
];
const anyPath = fc.oneof({ weight: 4, arbitrary: piecesOf(PIECES).map((path) => `/${path}`) }, { weight: 1, arbitrary: anyText() });
const UNRESERVED = /[A-Za-z0-9\-._~]/;
const REFUSALS = new Set<PathRefusal>(Object.values(PATH_REFUSALS));

/** A path as WHATWG parses it, with the escapes of unreserved characters decoded and hex digits upper-cased (RFC 3986 section 6.2.2). */
function whatwgCanonical(raw: string): string {
  const { pathname } = new URL(raw, 'http://upstream.test');
  return pathname.replace(/%[0-9A-Fa-f]{2}/g, (escape) => {
    const character = String.fromCharCode(Number.parseInt(escape.slice(1), 16));
    return UNRESERVED.test(character) ? character : escape.toUpperCase();
  });
}

describe('normalizePath, for any raw path', () => {
  it(
    'returns a canonical path or one of its refusals, never throws',
    () =>
      holds(
        'path: a path or a refusal',
        fc.property(anyPath, (raw) => {
          const path = normalizePath(raw);
          return typeof path === 'string' ? path.startsWith('/') : REFUSALS.has(path);
        }),
        1_500,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'is idempotent, and leaves no dot segment, empty segment, backslash or encoded separator, even once decoded',
    async () => {
      let accepted = 0;
      await holds(
        'path: idempotent, no dot or empty segment',
        fc.property(anyPath, (raw) => {
          const path = normalizePath(raw);
          if (path instanceof PathRefusal) return true;
          accepted += 1;
          expect(normalizePath(path)).toBe(path);
          expect(path).not.toMatch(/\/\/|\\|%2F|%5C|%25(2E|2F|5C)/i);
          // A server that decodes escapes before splitting sees the same segments, none of them a dot segment.
          const decoded = decodeURIComponent(path);
          expect(decoded.split('/')).toHaveLength(path.split('/').length);
          expect(decoded).not.toMatch(/\/\/|\\/);
          for (const segment of decoded.split('/').slice(1)) expect(['.', '..']).not.toContain(segment.split(';')[0]);
          return true;
        }),
        1_500,
      );
      // The generator reaches accepted paths often enough for the property to say something.
      expect(accepted).toBeGreaterThan(100);
    },
    PROPERTY_TIMEOUT,
  );

  it(
    'agrees with the WHATWG URL parser: it sees the same path in the raw one, and the normalized one as it is',
    () =>
      holds(
        'path: WHATWG agrees',
        fc.property(anyPath, (raw) => {
          const path = normalizePath(raw);
          if (path instanceof PathRefusal) return true;
          expect(whatwgCanonical(raw)).toBe(path);
          // undici sends the path it is given; a WHATWG server behind it reads exactly it.
          expect(new URL(path, 'http://upstream.test').pathname).toBe(path);
          return true;
        }),
        1_500,
      ),
    PROPERTY_TIMEOUT,
  );
});

describe('routes through a running gateway, for any request target', () => {
  const upstreams = {} as Record<PathRouteName, Upstream>;
  let gateway: RunningTokengate;
  let tokens: { user: string; application: string };

  beforeAll(async () => {
    for (const name of Object.keys(PATH_ROUTES) as PathRouteName[]) upstreams[name] = await startUpstream();
    gateway = await startTokengate('properties-path', {
      config: { routes: Object.entries(PATH_ROUTES).map(([name, route]) => ({ ...route, upstream: upstreams[name as PathRouteName].url })) },
    });
    tokens = { user: await gateway.issue(), application: await gateway.issue({ ...APPLICATION_TOKEN, scopes: ['public', 'admin'] }) };
  });

  afterAll(async () => {
    await gateway?.close();
    await Promise.all(Object.values(upstreams).map((upstream) => upstream.close()));
  });

  /** The most specific route whose prefix the path is, or is below (segment-aware). */
  function routeOf(path: string): PathRouteName | null {
    let found: PathRouteName | null = null;
    for (const [name, route] of Object.entries(PATH_ROUTES) as Array<[PathRouteName, (typeof PATH_ROUTES)[PathRouteName]]>) {
      if ((path === route.path || path.startsWith(`${route.path}/`)) && (found === null || route.path.length > PATH_ROUTES[found].path.length)) found = name;
    }
    return found;
  }

  // Request targets on the wire: printable ASCII only (the HTTP parser refuses the rest before any route is looked at).
  const prefixes = [...Object.values(PATH_ROUTES).map((route) => route.path), '/api/public', '/API/public/me', ''];
  const wirePieces = PIECES.filter((piece) => /^[\x21-\x7e]+$/.test(piece));
  const target = fc
    .tuple(fc.constantFrom(...prefixes), piecesOf(wirePieces, 6))
    .map(([prefix, rest]) => `${prefix}${rest}`)
    .filter((candidate) => candidate !== '' && /^[\x21-\x7e]+$/.test(candidate));

  it(
    'forwards a request only to the upstream of the route its normalized path belongs to, as exactly that path; refuses the rest, forwarding nothing',
    async () => {
      let forwarded = 0;
      await holds(
        'path: the route matched is the upstream path route',
        fc.asyncProperty(target, fc.constantFrom('user', 'application'), async (raw, kind) => {
          const before = Object.fromEntries(Object.entries(upstreams).map(([name, upstream]) => [name, upstream.received.length]));
          const answer = await exchange(gateway.port, 'GET', raw, [['Authorization', `Bearer ${tokens[kind as 'user' | 'application']}`]]);
          const reached = Object.entries(upstreams).filter(([name, upstream]) => upstream.received.length !== before[name]);
          if (answer.status !== 200) {
            expect({ raw, status: answer.status, reached: reached.map(([name]) => name) }).toEqual({ raw, status: expect.any(Number), reached: [] });
            expect(answer.status, raw).toBeGreaterThanOrEqual(400);
            expect(answer.status, raw).toBeLessThan(500);
            return true;
          }
          expect(reached, raw).toHaveLength(1);
          forwarded += 1;
          const [name, upstream] = reached[0]! as [PathRouteName, Upstream];
          const received = upstream.received.at(-1)!.url;
          const question = raw.indexOf('?');
          const rawPath = question === -1 ? raw : raw.slice(0, question);
          const receivedPath = received.split('?')[0]!;
          expect({ raw, receivedPath }).toEqual({ raw, receivedPath: normalizePath(rawPath) });
          expect({ raw, route: routeOf(receivedPath) }).toEqual({ raw, route: name });
          return true;
        }),
        100,
      );
      expect(forwarded).toBeGreaterThan(8);
    },
    PROPERTY_TIMEOUT,
  );
});
