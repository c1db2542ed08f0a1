import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConfigError, parseConfig } from '../src/load-config.js';
import { MemoryStore } from '../src/store/memory.js';
import { runCli } from './support/cli.js';
import {
  authorizationPage,
  clientDocument,
  createTestCa,
  startDocumentServer,
  startTestDns,
  type DocumentServer,
  type TestCa,
  type TestDns,
} from './support/client-metadata.js';
import { adminFetch, startTokengate, TEST_ADMIN_TOKEN, type RunningTokengate } from './support/instance.js';

/**
 * The operator's side of client ID metadata documents: the list through the admin API and the
 * CLI (read by every sidecar at once), the memory store's own cache and list, and the config
 * checks and warning.
 */

let ca: TestCa;
let documents: DocumentServer;
let dns: TestDns;
let running: RunningTokengate;
let second: RunningTokengate;
let directory: string;

const hosts = ['configured.test', 'added.test', 'prefix.test'];
const origin = (host: string) => `https://${host}:${documents.port}`;
const documentsConfig = (allow: unknown[]) => ({
  enabled: true,
  allow,
  caFile: ca.caFile,
  nameServers: [dns.address],
  allowPrivateNetworks: ['127.0.0.1/32'],
});

/** Serves a valid document for `clientId` (its path on the one document server). */
function publish(clientId: string): string {
  documents.serveJson(new URL(clientId).pathname, clientDocument(clientId, ['https://assistant.test/callback']), { 'cache-control': 'max-age=60' });
  return clientId;
}

function admin(instance: RunningTokengate, method: string, path: string, body?: unknown): Promise<Response> {
  return adminFetch(instance, path, { method, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
}

beforeAll(async () => {
  ca = createTestCa(hosts);
  documents = await startDocumentServer(ca);
  dns = await startTestDns(Object.fromEntries(hosts.map((host) => [host, ['127.0.0.1']])));
  const config = {
    clientMetadataDocuments: documentsConfig([{ url: origin('configured.test') }]),
    rateLimits: { partner: { requestsPerSecond: 5, burst: 10 } },
  };
  running = await startTokengate('cimd-operator', { config });
  second = await startTokengate('cimd-operator-second', { sharing: running, config });
  directory = mkdtempSync(join(tmpdir(), 'tokengate-cimd-cli-'));
});

afterAll(async () => {
  await second?.close();
  await running?.close();
  await documents?.close();
  await dns?.close();
  ca?.remove();
  if (directory !== undefined) rmSync(directory, { recursive: true, force: true });
});

describe('the list through the admin API', () => {
  it('adds an entry every sidecar honours at the next sign-in, shows it beside the config file, and removes it', async () => {
    const clientId = publish(`${origin('added.test')}/client.json`);
    expect((await authorizationPage(second, clientId)).title).toBe('This application is not allowed');

    const added = await admin(running, 'POST', '/client-metadata/allowed', { url: origin('added.test'), scopes: ['public'], rate_limit: 'partner' });
    expect(added.status).toBe(200);
    expect(await added.json()).toEqual({
      url: origin('added.test'),
      scopes: ['public'],
      resources: [],
      dpop: 'allowed',
      rate_limit: 'partner',
      source: 'admin',
    });
    expect((await authorizationPage(second, clientId)).status).toBe(200);

    const list = (await (await admin(second, 'GET', '/client-metadata/allowed')).json()) as { allowed: Array<{ url: string; source: string }> };
    expect(list.allowed.map(({ url, source }) => [url, source])).toEqual([
      [origin('configured.test'), 'config'],
      [origin('added.test'), 'admin'],
    ]);
    // Its tier, by client id, as for an application.
    const tier = await admin(running, 'GET', `/applications/${encodeURIComponent(clientId)}/rate-limit`);
    expect(await tier.json()).toMatchObject({ client_id: clientId, rate_limit: 'partner', budgets: [{ policy: 'partner' }] });

    const removed = await admin(second, 'DELETE', `/client-metadata/allowed?url=${encodeURIComponent(origin('added.test'))}`);
    expect(await removed.json()).toEqual({ url: origin('added.test'), removed: true });
    const refused = await authorizationPage(running, clientId);
    expect([refused.status, refused.title]).toEqual([400, 'This application is not allowed']);
    expect((await admin(second, 'DELETE', `/client-metadata/allowed?url=${encodeURIComponent(origin('added.test'))}`)).status).toBe(404);
  });

  it('refuses an entry it cannot keep, naming the field; the config file’s entries are changed there', async () => {
    const refusals = [
      [{ url: 'http://insecure.test' }, 400, 'url must be an https origin or URL prefix'],
      [{ url: `${origin('added.test')}/?x=1` }, 400, 'url must not contain a query or fragment'],
      [{ url: origin('added.test'), scopes: ['admin'] }, 400, 'scopes: unknown scope "admin"'],
      [{ url: origin('added.test'), rate_limit: 'gold' }, 400, "rate_limit must name a policy of the config's rateLimits (partner)"],
      [{ url: origin('added.test'), secret: 'x' }, 400, 'unknown field secret'],
      [{ url: origin('configured.test') }, 409, 'is allowed by the config file: change it there'],
    ] as const;
    for (const [body, status, description] of refusals) {
      const response = await admin(running, 'POST', '/client-metadata/allowed', body);
      expect([response.status, ((await response.json()) as { error_description: string }).error_description]).toEqual([
        status,
        expect.stringContaining(description),
      ]);
    }
    expect((await admin(running, 'DELETE', `/client-metadata/allowed?url=${encodeURIComponent(origin('configured.test'))}`)).status).toBe(409);
  });

  it('answers 400 while the feature is off', async () => {
    const off = await startTokengate('cimd-operator-off');
    try {
      const response = await admin(off, 'GET', '/client-metadata/allowed');
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ error_description: expect.stringContaining('clientMetadataDocuments.enabled') });
    } finally {
      await off.close();
    }
  });
});

describe('tokengate client-metadata', () => {
  it('allows, lists and disallows; tokens revoke takes a client id URL', async () => {
    const config = join(directory, 'tokengate.yaml');
    writeFileSync(config, `admin:\n  host: 127.0.0.1\n  port: ${new URL(running.opsUrl).port}\n  token: ${TEST_ADMIN_TOKEN}\nlogging:\n  level: silent\n`);
    const cli = (...args: string[]) => runCli([...args, '--config', config], { env: { TOKENGATE_CONFIG: '' } });
    const prefix = `${origin('prefix.test')}/clients/`;
    const allowed = await cli('client-metadata', 'allow', prefix, '--dpop', 'required');
    expect([allowed.code, allowed.stdout.trim()]).toEqual([
      0,
      `Allowed client metadata documents under ${prefix} (scopes: (default), resources: (all), dpop: required, rate limit: -)`,
    ]);
    const clientId = publish(`${prefix}assistant.json`);
    expect((await authorizationPage(running, clientId)).status).toBe(200);
    // By whole segments: a sibling path is not under the prefix.
    expect((await authorizationPage(running, publish(`${origin('prefix.test')}/clients-evil/x.json`))).status).toBe(400);

    const listed = await cli('client-metadata', 'list');
    expect(listed.stdout).toContain(`${prefix}  [admin]  scopes: (default), resources: (all), dpop: required, rate limit: -`);
    expect(listed.stdout).toContain(`${origin('configured.test')}  [config]`);
    const revoked = await cli('tokens', 'revoke', '--client', clientId);
    expect([revoked.code, revoked.stdout.trim()]).toEqual([0, `Revoked 0 tokens of application ${clientId}.`]);
    const removed = await cli('client-metadata', 'disallow', prefix);
    expect([removed.code, removed.stdout.trim()]).toEqual([0, `Removed ${prefix} from the client metadata list.`]);
    const again = await cli('client-metadata', 'disallow', prefix);
    expect([again.code, again.stderr.trim()]).toEqual([1, 'tokengate: the admin API refused: No entry of the list added through the admin API has this url.']);
  }, 180_000);

  it('check warns while private networks are allowed', async () => {
    const config = join(directory, 'private.yaml');
    writeFileSync(config, `clientMetadataDocuments:\n  enabled: true\n  allowPrivateNetworks: [10.20.0.0/16]\n`);
    const checked = await runCli(['check', '--config', config], { env: { TOKENGATE_CONFIG: '' } });
    expect(checked.code).toBe(0);
    expect(checked.stderr).toContain(
      'tokengate: warning: clientMetadataDocuments.allowPrivateNetworks lets client metadata documents be fetched from 10.20.0.0/16',
    );
  }, 60_000);
});

describe('with the memory store (a single instance)', () => {
  it('keeps its own list and cache: 20 concurrent sign-ins fetch the document once', async () => {
    const alone = await startTokengate('cimd-memory', { store: new MemoryStore(), config: { clientMetadataDocuments: documentsConfig([]) } });
    try {
      const clientId = publish(`${origin('added.test')}/memory.json`);
      expect((await authorizationPage(alone, clientId)).status).toBe(400);
      expect((await admin(alone, 'POST', '/client-metadata/allowed', { url: `${origin('added.test')}/memory.json` })).status).toBe(200);
      const pages = await Promise.all(Array.from({ length: 20 }, () => authorizationPage(alone, clientId)));
      expect(pages.map((page) => page.status)).toEqual(Array(20).fill(200));
      expect(documents.requestsOf('/memory.json')).toBe(1);
      // An entry naming one client id allows that id only, not the URLs below it.
      const below = publish(`${origin('added.test')}/memory.json/more.json`);
      expect((await authorizationPage(alone, below)).status).toBe(400);
      expect(documents.requestsOf('/memory.json/more.json')).toBe(0);
    } finally {
      await alone.close();
    }
  });
});

describe('config checks', () => {
  it('name the key and the line of every entry it cannot use', () => {
    const text = [
      'resources:',
      '  - identifier: https://api.example/mcp',
      'clientMetadataDocuments:',
      '  enabled: true',
      '  minCacheSeconds: 600',
      '  maxCacheSeconds: 60',
      '  allow:',
      '    - url: http://claude.ai',
      '    - url: https://Claude.ai',
      '    - url: https://chatgpt.com',
      '      scopes: [admin]',
      '      resources: [https://api.example/other]',
      '      rateLimit: gold',
      '    - url: https://chatgpt.com/',
      '  allowPrivateNetworks: [10.0.0.0/33]',
      '  nameServers: [dns.example:53]',
      '  caFile: /nonexistent/ca.pem',
    ].join('\n');
    let problems: Array<{ path: string; line?: number; message: string }> = [];
    try {
      parseConfig(text, 'cimd.yaml', {});
    } catch (error) {
      problems = (error as ConfigError).problems;
    }
    expect(problems.map(({ path, line }) => `${path}:${line}`)).toEqual([
      'clientMetadataDocuments.minCacheSeconds:5',
      'clientMetadataDocuments.allow[0].url:8',
      'clientMetadataDocuments.allow[1].url:9',
      'clientMetadataDocuments.allow[2].scopes:11',
      'clientMetadataDocuments.allow[2].resources:12',
      'clientMetadataDocuments.allow[2].rateLimit:13',
      'clientMetadataDocuments.allow[3].url:14',
      'clientMetadataDocuments.allowPrivateNetworks[0]:15',
      'clientMetadataDocuments.nameServers[0]:16',
      'clientMetadataDocuments.caFile:17',
    ]);
    expect(problems.find((problem) => problem.path.endsWith('allow[1].url'))?.message).toBe('"https://Claude.ai" must be written as https://claude.ai');
    expect(problems.find((problem) => problem.path.endsWith('allow[3].url'))?.message).toBe('"https://chatgpt.com/" is listed more than once');
  });
});
