import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ConfigError, parseConfig } from '../src/load-config.js';
import { APPLICATION_TOKEN, rawRequest, startUpstream, statusOf, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { PATH_ATTEMPTS as ATTEMPTS, PATH_ROUTES as ROUTES, type PathRouteName as RouteName } from './support/path-attempts.js';

/**
 * Path confusion: every attempt is sent byte for byte over a socket, and the test asserts on
 * what each upstream actually received. One upstream per route, so "reached the wrong route"
 * is visible as "reached the wrong upstream".
 */

const upstreams = {} as Record<RouteName, Upstream>;
let gateway: RunningTokengate;
let tokens: { user: string; application: string };

beforeAll(async () => {
  for (const name of Object.keys(ROUTES) as RouteName[]) upstreams[name] = await startUpstream();
  gateway = await startTokengate('gateway-paths', {
    config: { routes: Object.entries(ROUTES).map(([name, route]) => ({ ...route, upstream: upstreams[name as RouteName].url })) },
  });
  tokens = { user: await gateway.issue(), application: await gateway.issue(APPLICATION_TOKEN) };
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all(Object.values(upstreams).map((upstream) => upstream.close()));
});

describe('path confusion', () => {
  it(`sends none of ${ATTEMPTS.length} crafted paths to a route it was not checked for, or outside its route's prefix`, async () => {
    expect(ATTEMPTS.length).toBeGreaterThanOrEqual(30);
    for (const [target, kind, outcome] of ATTEMPTS) {
      const before = Object.fromEntries(Object.entries(upstreams).map(([name, upstream]) => [name, upstream.received.length]));
      const answer = await rawRequest(
        gateway.port,
        `GET ${target} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${tokens[kind]}\r\nConnection: close\r\n\r\n`,
      );
      const reached = Object.entries(upstreams)
        .filter(([name, upstream]) => upstream.received.length !== before[name])
        .map(([name]) => name);
      if ('refused' in outcome) {
        expect({ target, status: statusOf(answer), reached }).toEqual({ target, status: outcome.refused, reached: [] });
        expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), target).toEqual({
          error: expect.stringMatching(/^[a-z_]+$/),
          error_description: expect.any(String),
        });
      } else {
        expect({ target, status: statusOf(answer), reached }).toEqual({ target, status: 200, reached: [outcome.reaches] });
        const received = upstreams[outcome.reaches].received.at(-1)!.url;
        expect({ target, received }).toEqual({ target, received: outcome.as });
        const prefix = ROUTES[outcome.reaches].path;
        const receivedPath = received.split('?')[0]!;
        expect(receivedPath === prefix || receivedPath.startsWith(`${prefix}/`), target).toBe(true);
      }
    }
  });
});

describe('route checks at load', () => {
  function problemsOf(routes: unknown[], extra: Record<string, unknown> = {}): string[] {
    try {
      parseConfig(stringify({ store: { driver: 'memory' }, routes, ...extra }), 'routes.yaml', {});
      return [];
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      return error.problems.map((problem) => `${problem.path}: ${problem.message}`);
    }
  }
  const upstream = 'http://127.0.0.1:3001';

  it('accepts the shipped ticketing layout and nested prefixes', () => {
    expect(
      problemsOf([
        { path: '/api/public/me', upstream },
        { path: '/api/public/me/settings', upstream, scopes: ['settings'] },
      ]),
    ).toEqual([]);
  });

  it('refuses prefixes that are not canonical, duplicated (also by letter case), or overlap the issuer', () => {
    for (const path of ['api/x', '/api//x', '/api/./x', '/api/../x', '/api/%2e%2e', '/api/%7Ex', '/api/x?y', '/api\\x', '/api/{id}', '/api/%2F']) {
      expect(problemsOf([{ path, upstream }]), path).toEqual([expect.stringMatching(/^routes\[0\]\.path: .*canonical form/)]);
    }
    expect(
      problemsOf([
        { path: '/api/x', upstream },
        { path: '/api/x/', upstream },
      ]),
    ).toEqual([expect.stringMatching(/^routes\[1\]\.path: .*already routed by routes\[0\]/)]);
    expect(
      problemsOf([
        { path: '/api/x', upstream },
        { path: '/API/X', upstream },
      ]),
    ).toEqual([expect.stringMatching(/^routes\[1\]\.path: .*ignoring letter case/)]);
    for (const path of ['/', '/oauth', '/oauth/token', '/.well-known/x']) {
      expect(problemsOf([{ path, upstream }]), path).toEqual([expect.stringMatching(/^routes\[0\]\.path: .*overlaps the issuer/)]);
    }
    expect(problemsOf([{ path: '/', upstream }], { issuer: { enabled: false } })).toEqual([]);
  });

  it('refuses upstreams that are not plain origins, methods it does not forward, and scopes that are not scope tokens', () => {
    expect(problemsOf([{ path: '/a', upstream: 'http://127.0.0.1:3001/v1' }])).toEqual([expect.stringMatching(/^routes\[0\]\.upstream: .*without a path/)]);
    expect(problemsOf([{ path: '/a', upstream: 'ftp://x' }])).toEqual([expect.stringMatching(/must be http or https/)]);
    expect(problemsOf([{ path: '/a', upstream: 'http://u:p@x' }])).toEqual([expect.stringMatching(/must not embed credentials/)]);
    expect(problemsOf([{ path: '/a', upstream, methods: ['GET', 'TRACE'] }])).toEqual([
      expect.stringMatching(/^routes\[0\]\.methods\[1\]: "TRACE" is not forwarded/),
    ]);
    expect(problemsOf([{ path: '/a', upstream, scopes: ['a"b'] }])).toEqual([expect.stringMatching(/^routes\[0\]\.scopes\[0\]: .*not a scope token/)]);
  });

  it('refuses identity and request id header names that are reserved, repeated or spelt with "_"', () => {
    const problems = problemsOf([], {
      gateway: {
        requestIdHeader: 'X-Auth-Scope',
        identityHeaders: { userId: 'x_user', clientId: 'Authorization', scope: 'x-auth-scope', tokenKind: 'x-kind' },
      },
    });
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^gateway\.identityHeaders\.userId: .*letters, digits/),
        expect.stringMatching(/^gateway\.identityHeaders\.clientId: .*reserved/),
        expect.stringMatching(/^gateway\.requestIdHeader: .*already used by gateway\.identityHeaders\.scope/),
      ]),
    );
  });
});
