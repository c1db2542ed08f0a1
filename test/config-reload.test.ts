import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/load-config.js';
import type { Config } from '../src/config/schema.js';
import { tokenDigest } from '../src/token/token-value.js';
import { countingStore, startUpstream, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { accessLines, captureLog } from './support/log.js';
import { valueOf } from './support/metrics.js';
import { freePort } from './support/ports.js';
import { holdingReads } from './support/stores.js';
import { eventually } from './support/wait.js';

/**
 * Tokengate.reload: a new config validated whole and swapped in between two requests; a broken
 * one changes nothing. (SIGHUP and the file watch that call it: cli-reload.test.ts.)
 */

/** The running config with some sections replaced, through the loader as a file would go. */
function reloadWith(running: RunningTokengate, changes: Partial<Record<keyof Config, unknown>>) {
  const current = running.tokengate.context.config;
  return running.tokengate.reload(() => parseConfig(JSON.stringify({ ...current, ...changes }), 'reloaded config', {}));
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** An upstream that says who it is; `/slow` paths wait for `release()`. */
async function namedUpstream(name: string): Promise<Upstream & { release(): void; slowArrived: () => boolean }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let slowArrived = false;
  const upstream = await startUpstream((request, response) => {
    const answer = () => {
      response.setHeader('x-upstream', name);
      response.end(name);
    };
    if (request.url!.includes('/slow')) {
      slowArrived = true;
      void released.then(answer);
    } else {
      answer();
    }
  });
  return Object.assign(upstream, { release, slowArrived: () => slowArrived });
}

function connectionsOf(upstream: Upstream): Promise<number> {
  return new Promise((resolve, reject) => upstream.server.getConnections((error, count) => (error ? reject(error) : resolve(count))));
}

describe('reloading the routes', () => {
  let a: Awaited<ReturnType<typeof namedUpstream>>;
  let b: Awaited<ReturnType<typeof namedUpstream>>;
  beforeAll(async () => {
    [a, b] = await Promise.all([namedUpstream('a'), namedUpstream('b')]);
  });
  afterAll(async () => {
    a.release();
    b.release();
    await Promise.all([a.close(), b.close()]);
  });

  it('swaps them under traffic: no request fails, new requests meet the new routes, one in flight finishes where it started, then the old pool closes', async () => {
    const running = await startTokengate('reload-traffic', { config: { routes: [{ path: '/api/public/me', upstream: a.url }] } });
    try {
      const token = await running.issue();
      const slow = fetch(`${running.baseUrl}/api/public/me/slow`, { headers: bearer(token) });
      await eventually(() => a.slowArrived());

      const answers: Array<{ status: number; upstream: string | null; afterReload: boolean }> = [];
      let reloaded = false;
      let stop = false;
      const client = async () => {
        while (!stop) {
          const afterReload = reloaded;
          const response = await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) });
          await response.arrayBuffer();
          answers.push({ status: response.status, upstream: response.headers.get('x-upstream'), afterReload });
        }
      };
      const clients = Array.from({ length: 8 }, client);
      await eventually(() => answers.length >= 100, 10_000);
      const outcome = reloadWith(running, {
        routes: [
          { path: '/api/public/me', upstream: b.url },
          { path: '/api/public/tickets', upstream: b.url },
        ],
      });
      reloaded = true;
      expect(outcome).toMatchObject({ result: 'success', applied: ['routes'], restartRequired: [] });
      await eventually(() => answers.filter((answer) => answer.afterReload).length >= 100, 10_000);
      stop = true;
      await Promise.all(clients);

      expect(answers.filter((answer) => answer.status !== 200)).toEqual([]);
      expect(answers.filter((answer) => answer.afterReload && answer.upstream !== 'b')).toEqual([]);
      expect(answers.some((answer) => !answer.afterReload && answer.upstream === 'a')).toBe(true);
      const tickets = await fetch(`${running.baseUrl}/api/public/tickets`, { headers: bearer(token) });
      expect([tickets.status, tickets.headers.get('x-upstream')]).toEqual([200, 'b']);

      // The slow request holds a's connection; once it is answered, a's pool lets go of it.
      expect(await connectionsOf(a)).toBeGreaterThan(0);
      a.release();
      const answered = await slow;
      expect([answered.status, await answered.text()]).toEqual([200, 'a']);
      await eventually(async () => (await connectionsOf(a)) === 0, 5_000);
    } finally {
      await running.close();
    }
  });

  it('forwards a request that matched a route before the reload, and was still being checked, to the upstream it matched', async () => {
    let held!: ReturnType<typeof holdingReads>;
    const running = await startTokengate('reload-in-flight', {
      config: { routes: [{ path: '/api/public/me', upstream: a.url }] },
      wrap: (store) => (held = holdingReads(store)).store,
    });
    try {
      const token = await running.issue();
      // Not cached yet: its check waits on the store read, which the test holds.
      const inFlight = fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) });
      await held.read;
      expect(reloadWith(running, { routes: [{ path: '/api/public/me', upstream: b.url }] }).result).toBe('success');
      held.release();
      const response = await inFlight;
      expect([response.status, await response.text()]).toEqual([200, 'a']);
      const next = await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) });
      expect([next.status, await next.text()]).toEqual([200, 'b']);
    } finally {
      await running.close();
    }
  });

  it('keeps the running config whole when the new one is broken, logs every problem, and the old routes keep answering', async () => {
    const log = captureLog('info');
    const running = await startTokengate('reload-broken', { logger: log.logger, config: { routes: [{ path: '/api/public/me', upstream: a.url }] } });
    try {
      const token = await running.issue();
      const hashBefore = reloadWith(running, {}).hash;
      const before = running.tokengate.context.config;

      const syntax = running.tokengate.reload(() => parseConfig('routes:\n  - path: /api/public/new\n    upstream: [', 'tokengate.yaml', {}));
      expect(syntax).toMatchObject({ result: 'failure', problems: [expect.objectContaining({ message: expect.stringContaining('invalid YAML') })] });
      const invalid = reloadWith(running, {
        routes: [
          { path: '/api/public/me', upstream: b.url },
          { path: '/api/public/new', upstream: 'ftp://example.com', tokn: 'user' },
        ],
      });
      expect(invalid.result).toBe('failure');
      expect(invalid.problems.map((problem) => problem.path).sort()).toEqual(['routes[1].tokn', 'routes[1].upstream']);
      // Valid on its own (it turns the issuer off), but the running issuer owns /oauth: the route cannot be served.
      const overlapping = reloadWith(running, { issuer: { ...before.issuer, enabled: false }, routes: [{ path: '/oauth/extra', upstream: b.url }] });
      expect(overlapping).toMatchObject({
        result: 'failure',
        problems: [expect.objectContaining({ path: 'routes[0].path', message: expect.stringContaining('overlaps') })],
      });

      expect(running.tokengate.context.config).toBe(before);
      const still = await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) });
      expect([still.status, await still.text()]).toEqual([200, 'a']);
      expect((await fetch(`${running.baseUrl}/api/public/new`, { headers: bearer(token) })).status).toBe(404);
      const metrics = running.tokengate.context.metrics;
      expect(await valueOf(metrics.configReloads, { result: 'failure' })).toBe(3);
      expect(await valueOf(metrics.configInfo, { hash: hashBefore })).toBe(1);

      const failures = log.entries().filter((entry) => entry.msg === 'config reload failed: the running config stays');
      expect(failures).toHaveLength(3);
      expect(failures[0]).toMatchObject({ level: 50, file: 'tokengate.yaml', problems: [expect.objectContaining({ path: '', line: 3 })] });
      expect(failures[1]).toMatchObject({
        file: 'reloaded config',
        problems: expect.arrayContaining([
          expect.objectContaining({ path: 'routes[1].upstream', message: expect.stringContaining('must be http or https') }),
          expect.objectContaining({ path: 'routes[1].tokn', message: expect.stringContaining('unknown key') }),
        ]),
      });
    } finally {
      await running.close();
    }
  });

  it('names the changed keys that need a restart, never their values, keeps their running values and applies the rest', async () => {
    const log = captureLog('info');
    const running = await startTokengate('reload-restart-keys', { logger: log.logger, config: { routes: [{ path: '/api/public/me', upstream: a.url }] } });
    try {
      const token = await running.issue();
      const before = running.tokengate.context.config;
      const adminToken = 'a-new-admin-token-that-must-stay-secret';
      const outcome = reloadWith(running, {
        server: { ...before.server, maxHeaders: 200 },
        admin: { ...before.admin, token: adminToken },
        store: { ...before.store, keyPrefix: 'elsewhere:' },
        issuer: { ...before.issuer, scopes: ['public', 'write'] },
        gateway: { ...before.gateway, realm: 'elsewhere' },
        routes: [
          { path: '/api/public/me', upstream: a.url },
          { path: '/api/public/tickets', upstream: b.url },
        ],
      });
      expect(outcome).toMatchObject({
        result: 'success',
        applied: ['routes'],
        restartRequired: ['server.maxHeaders', 'admin.token', 'store.keyPrefix', 'issuer.scopes', 'gateway.realm'],
      });
      const config = running.tokengate.context.config;
      expect([config.server.maxHeaders, config.admin.token, config.store.keyPrefix, config.issuer.scopes, config.gateway.realm]).toEqual([
        100,
        before.admin.token,
        before.store.keyPrefix,
        ['public'],
        'tokengate',
      ]);
      const tickets = await fetch(`${running.baseUrl}/api/public/tickets`, { headers: bearer(token) });
      expect([tickets.status, await tickets.text()]).toEqual([200, 'b']);
      // The new route's refusals carry the running realm.
      expect((await fetch(`${running.baseUrl}/api/public/tickets`)).headers.get('www-authenticate')).toBe(
        'Bearer realm="tokengate", DPoP realm="tokengate", algs="ES256 EdDSA Ed25519 RS256 PS256"',
      );

      expect(log.entries().find((entry) => entry.msg.includes('take effect only on restart'))).toMatchObject({ level: 40, keys: outcome.restartRequired });
      expect(log.entries().find((entry) => entry.msg === 'config reloaded')).toMatchObject({ level: 30, hash: outcome.hash, applied: ['routes'] });
      expect(log.text()).not.toContain(adminToken);
    } finally {
      await running.close();
    }
  });
});

describe('reloading the cache settings', () => {
  it('replaces the cache with one built from the new settings (empty: each token is read from the store once more), and turns it off and on', async () => {
    let counted!: ReturnType<typeof countingStore>;
    const upstream = await startUpstream();
    const running = await startTokengate('reload-cache', {
      config: { routes: [{ path: '/api/public/me', upstream: upstream.url }] },
      wrap: (store) => (counted = countingStore(store)).store,
    });
    try {
      const token = await running.issue();
      const call = async () => expect((await fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) })).status).toBe(200);
      const subscribed = () => running.tokengate.context.cache!.subscribed;
      await subscribed();
      await call();
      await call();
      expect(counted.calls.getAccessToken).toBe(1);

      const first = running.tokengate.context.cache!;
      const resized = reloadWith(running, { cache: { ...running.tokengate.context.config.cache, maxEntries: 500 } });
      expect(resized).toMatchObject({ result: 'success', applied: ['cache'] });
      expect(running.tokengate.context.cache).not.toBe(first);
      expect(first.peek(tokenDigest(token))).toBeUndefined();
      await subscribed();
      await call();
      await call();
      expect(counted.calls.getAccessToken).toBe(2);

      expect(reloadWith(running, { cache: { ...running.tokengate.context.config.cache, enabled: false } }).result).toBe('success');
      expect(running.tokengate.context.cache).toBeNull();
      await call();
      await call();
      expect(counted.calls.getAccessToken).toBe(4);

      expect(reloadWith(running, { cache: { ...running.tokengate.context.config.cache, enabled: true } }).result).toBe('success');
      await subscribed();
      await call();
      await call();
      expect(counted.calls.getAccessToken).toBe(5);
    } finally {
      await running.close();
      await upstream.close();
    }
  });
});

describe('reloading the logging settings', () => {
  it('applies logging.level and logging.requests to the next request', async () => {
    const log = captureLog('info');
    const dead = `http://127.0.0.1:${await freePort()}`;
    const running = await startTokengate('reload-logging', {
      logger: log.logger,
      config: { logging: { level: 'info', requests: 'errors' }, routes: [{ path: '/api/public/me', upstream: dead }] },
    });
    try {
      const token = await running.issue();
      const refused = () => fetch(`${running.baseUrl}/api/public/me`);
      const failed = () => fetch(`${running.baseUrl}/api/public/me`, { headers: bearer(token) });
      const statuses = () => accessLines(log).map((line) => line.status);
      await refused();
      expect(statuses()).toEqual([]);

      reloadWith(running, { logging: { level: 'info', requests: 'all' } });
      await refused();
      expect(statuses()).toEqual([401]);

      reloadWith(running, { logging: { level: 'warn', requests: 'all' } });
      await refused();
      await failed();
      expect(statuses()).toEqual([401, 502]);

      reloadWith(running, { logging: { level: 'warn', requests: 'none' } });
      await failed();
      expect(statuses()).toEqual([401, 502]);
    } finally {
      await running.close();
    }
  });
});
