import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { buildTokengate, type Tokengate } from '../../src/app.js';
import { parseConfig } from '../../src/load-config.js';
import { clientSecretDigest } from '../../src/issuer/client-auth.js';
import type { AccessTokenRecord, AuthorizationCodeRecord, Store } from '../../src/store/store.js';
import { generateTagKey, tokenDigest } from '../../src/token/token-value.js';
import { USER_TOKEN } from './gateway.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './redis.js';
import { deleteTopologyPrefix, openTopologyStore, type TestTopology } from './topologies.js';

/** A whole tokengate (through the config loader, so its checks run) listening on free loopback ports. */
export interface RunningTokengate {
  readonly tokengate: Tokengate;
  /** The store it runs over, as `wrap` wrapped it. */
  readonly store: Store;
  /** The Redis key prefix of its data (or of the instance it shares; unused when a `store` was given). */
  readonly prefix: string;
  /** The local Cluster or Sentinel set-up its store runs on; undefined for the shared standalone Redis. */
  readonly topology: TestTopology | undefined;
  /** Public listener, e.g. http://127.0.0.1:41234 (no trailing slash). */
  readonly baseUrl: string;
  /** Port of the public listener (for raw sockets). */
  readonly port: number;
  /** Ops listener. */
  readonly opsUrl: string;
  /** Decision listener, when the config enables it (`decisions: { enabled: true }`); null otherwise. */
  readonly decisionsUrl: string | null;
  /** Mints a token of this deployment and stores its record: a token as the issuer would make it. */
  issue(record?: Partial<AccessTokenRecord>): Promise<string>;
  /** Stops it, closes its store and deletes the data it made. */
  close(): Promise<void>;
}

export interface StartOptions {
  /** Config sections merged over the test defaults, each one level deep; a list (`routes`) is taken as given. */
  config?: Record<string, unknown>;
  /** Fixed public port, for tests whose issuerUrl must name it. */
  port?: number;
  /**
   * Another instance whose data (prefix) and token tag key this one takes: a second sidecar of
   * the same deployment. The data stays the other's to delete.
   */
  sharing?: RunningTokengate;
  /** A store to use instead of a fresh Redis prefix (e.g. one that cannot reach Redis); closed by close(), its data left alone. */
  store?: Store;
  /** Puts a wrapper around the store, as the token cache does (e.g. one that counts reads). */
  wrap?: (store: Store) => Store;
  /** A logger to use instead of a silent one (tests that read the log). */
  logger?: Logger;
  /** Runs before the listeners bind: a test adds routes of its own to `tokengate.app` here. */
  beforeListen?: (tokengate: Tokengate) => void;
  /** Run on a local Cluster or Sentinel set-up instead of the shared Redis (a `sharing` instance takes the other's). */
  topology?: TestTopology;
}

/** The admin token of every test instance that sets none of its own. */
export const TEST_ADMIN_TOKEN = 'test-admin-token-0123456789abcdef';

/** A call to a test instance's admin API (`path` below /admin) with its admin token, as the CLI makes it. */
export function adminFetch(running: RunningTokengate, path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (!headers.has('authorization')) headers.set('authorization', `Bearer ${running.tokengate.context.config.admin.token}`);
  if (init.body !== undefined && !headers.has('content-type')) headers.set('content-type', 'application/json');
  return fetch(`${running.opsUrl}/admin${path}`, { ...init, headers });
}

export async function startTokengate(label: string, options: StartOptions = {}): Promise<RunningTokengate> {
  const defaults: Record<string, Record<string, unknown>> = {
    server: { host: '127.0.0.1', port: options.port ?? 0 },
    admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
    decisions: { host: '127.0.0.1', port: 0 },
    store: { driver: 'redis' },
    issuer: {
      tokenTagKey: options.sharing?.tokengate.context.config.issuer.tokenTagKey ?? generateTagKey(),
      issuerUrl: `http://127.0.0.1:${options.port ?? 8080}`,
    },
    logging: { level: 'silent' },
  };
  const sections: Record<string, unknown> = { ...defaults };
  for (const [name, value] of Object.entries(options.config ?? {})) {
    sections[name] = typeof value === 'object' && value !== null && !Array.isArray(value) ? { ...defaults[name], ...value } : value;
  }
  const config = parseConfig(JSON.stringify(sections), `test config (${label})`, {});
  const ownsData = options.store === undefined && options.sharing === undefined;
  const prefix = options.sharing?.prefix ?? uniquePrefix(label);
  const topology = options.sharing?.topology ?? options.topology;
  const unwrapped = options.store ?? (topology === undefined ? createTestRedisStore(prefix) : await openTopologyStore(topology, prefix));
  const store = options.wrap?.(unwrapped) ?? unwrapped;
  const tokengate = await buildTokengate(config, { store, logger: options.logger });
  options.beforeListen?.(tokengate);
  const { publicUrl, opsUrl, decisionsUrl } = await tokengate.listen();
  return {
    tokengate,
    store,
    prefix,
    topology,
    baseUrl: publicUrl,
    port: Number(new URL(publicUrl).port),
    opsUrl,
    decisionsUrl,
    async issue(record = {}) {
      const token = tokengate.context.minter.mint();
      const now = Date.now();
      await store.tokens.saveAccessToken(tokenDigest(token), {
        ...USER_TOKEN,
        scopes: [...USER_TOKEN.scopes],
        issuedAt: now,
        expiresAt: now + 3_600_000,
        ...record,
      });
      return token;
    },
    async close() {
      await tokengate.close();
      await unwrapped.close();
      if (ownsData) await (topology === undefined ? deletePrefix(prefix) : deleteTopologyPrefix(topology, prefix));
    },
  };
}

export interface TestApplication {
  clientId: string;
  /** Undefined for a public client. */
  clientSecret: string | undefined;
  redirectUri: string;
}

/** Registers an application straight in the store, exactly as the admin API records one. */
export async function registerApplication(
  store: Store,
  options: { confidential?: boolean; scopes?: string[]; redirectUri?: string } = {},
): Promise<TestApplication> {
  const confidential = options.confidential ?? true;
  const clientId = `client-${randomUUID()}`;
  const clientSecret = confidential ? `secret-${randomUUID()}` : undefined;
  const redirectUri = options.redirectUri ?? 'https://app.example/callback';
  await store.applications.put({
    clientId,
    name: 'Test application',
    secretDigest: clientSecret === undefined ? null : clientSecretDigest(clientSecret),
    redirectUris: [redirectUri],
    scopes: options.scopes ?? ['public'],
    confidential,
    createdAt: Date.now(),
  });
  return { clientId, clientSecret, redirectUri };
}

/** A user straight in the store (these tests never log in, so the hash is a placeholder). */
export async function registerUser(store: Store): Promise<string> {
  const id = randomUUID();
  await store.users.create({ id, email: `${id}@example.com`, passwordHash: 'scrypt$placeholder', createdAt: Date.now() });
  return id;
}

/** Mints and stores an authorization code exactly as /oauth/authorize does after consent. */
export async function issueAuthorizationCode(
  running: RunningTokengate,
  application: TestApplication,
  userId: string,
  overrides: Partial<AuthorizationCodeRecord> = {},
): Promise<{ code: string; record: AuthorizationCodeRecord }> {
  const code = running.tokengate.context.minter.mint();
  const now = Date.now();
  const record: AuthorizationCodeRecord = {
    clientId: application.clientId,
    userId,
    redirectUri: application.redirectUri,
    scopes: ['public'],
    codeChallenge: null,
    codeChallengeMethod: null,
    familyId: randomUUID(),
    issuedAt: now,
    expiresAt: now + 600_000,
    ...overrides,
  };
  await running.store.codes.save(tokenDigest(code), record);
  return { code, record };
}

export function basicAuthorization(clientId: string, secret: string): string {
  const encode = (value: string) => encodeURIComponent(value).replace(/%20/g, '+');
  return `Basic ${Buffer.from(`${encode(clientId)}:${encode(secret)}`).toString('base64')}`;
}

/** POSTs a form body (values may repeat when given as arrays). */
export function postForm(url: string, parameters: Record<string, string | string[] | undefined>, headers: Record<string, string> = {}): Promise<Response> {
  const body = new URLSearchParams();
  for (const [name, value] of Object.entries(parameters)) {
    for (const item of value === undefined ? [] : [value].flat()) body.append(name, item);
  }
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: body.toString() });
}

/** The credentials of a confidential test application as body parameters. */
export function clientCredentials(application: TestApplication): { client_id: string; client_secret: string | undefined } {
  return { client_id: application.clientId, client_secret: application.clientSecret };
}
