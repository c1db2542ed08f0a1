import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { stringify } from 'yaml';
import { buildTokengate, type Tokengate } from '../../src/app.js';
import { parseConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/observability/logger.js';
import type { AccessTokenRecord, TokenStore } from '../../src/store/store.js';
import { generateTagKey, tokenDigest } from '../../src/token/token-value.js';
import { createTestRedisStore, deletePrefix, uniquePrefix } from './redis.js';

/** What an upstream received, as it received it. */
export interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: string;
}

export interface Upstream {
  readonly url: string;
  readonly server: Server;
  /** Every request that reached this upstream, in order. */
  readonly received: Received[];
  close(): Promise<void>;
}

type Handler = (request: IncomingMessage, response: ServerResponse, received: Received) => void;

/** Answers with what it received, as JSON. */
const echo: Handler = (_request, response, received) => {
  response.setHeader('content-type', 'application/json');
  response.end(JSON.stringify(received));
};

/** A real upstream on port 0 that records every request (method, url, headers, body) and by default echoes it. */
export async function startUpstream(handler: Handler = echo): Promise<Upstream> {
  const received: Received[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const entry = { method: request.method!, url: request.url!, headers: request.headers, rawHeaders: request.rawHeaders, body: Buffer.concat(chunks).toString('latin1') };
      received.push(entry);
      handler(request, response, entry);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    received,
    close: () => closeServer(server),
  };
}

export function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

export interface GatewayUnderTest {
  readonly tokengate: Tokengate;
  /** Base URL of the public listener, e.g. http://127.0.0.1:41234 */
  readonly url: string;
  readonly port: number;
  readonly store: TokenStore;
  /** Key prefix of the test's Redis store. */
  readonly prefix: string;
  /** Mints a token of this deployment and stores its record: a token as the issuer would make it. */
  issue(record?: Partial<AccessTokenRecord>): Promise<string>;
  close(): Promise<void>;
}

/** What issue() stores by default: a user token with the public scope, valid for an hour. */
export const USER_TOKEN = { kind: 'user', clientId: 'client-web', userId: 'user-42', scopes: ['public'], familyId: 'family-1' } as const satisfies Partial<AccessTokenRecord>;
/** An application (client_credentials) token's fields, to pass to issue(). */
export const APPLICATION_TOKEN = { kind: 'application', clientId: 'client-organizer', userId: null, scopes: ['public'], familyId: null } as const satisfies Partial<AccessTokenRecord>;

/**
 * A whole tokengate (through the config loader, so the route checks run) listening on port 0,
 * with a Redis store under its own key prefix. `store` replaces it (an unreachable Redis);
 * `wrap` puts a wrapper around it, as the token cache does.
 */
export async function startGateway(config: Record<string, unknown>, options: { store?: TokenStore; wrap?: (store: TokenStore) => TokenStore; label?: string } = {}): Promise<GatewayUnderTest> {
  const prefix = uniquePrefix(options.label ?? 'gateway');
  const redis = options.store ?? createTestRedisStore(prefix);
  const store = options.wrap?.(redis) ?? redis;
  const text = stringify({
    server: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    store: { driver: 'redis' },
    issuer: { tokenTagKey: generateTagKey() },
    logging: { level: 'silent' },
    ...config,
  });
  const tokengate = await buildTokengate(parseConfig(text, 'test.yaml', {}), { store, logger: createLogger('silent') });
  const { publicUrl } = await tokengate.listen();
  return {
    tokengate,
    url: publicUrl,
    port: Number(new URL(publicUrl).port),
    store,
    prefix,
    async issue(record = {}) {
      const token = tokengate.context.minter.mint();
      const now = Date.now();
      await store.saveAccessToken(tokenDigest(token), { ...USER_TOKEN, scopes: [...USER_TOKEN.scopes], issuedAt: now, expiresAt: now + 3_600_000, ...record });
      return token;
    },
    async close() {
      await tokengate.close();
      await redis.close();
      if (options.store === undefined) await deletePrefix(prefix);
    },
  };
}

/** Sends `text` as is over a new TCP connection and resolves with everything the server wrote back before closing. */
export function rawRequest(port: number, text: string | Buffer, waitMs = 1_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    setTimeout(() => socket.destroy(), waitMs).unref();
  });
}

/** Status code of the first response in a raw HTTP answer. */
export function statusOf(answer: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
}

/** Wraps a store, counting getAccessToken calls (the calls that would reach Redis); everything else passes through. */
export function countingStore(store: TokenStore): { store: TokenStore; calls: { getAccessToken: number } } {
  const calls = { getAccessToken: 0 };
  const counted = new Proxy(store, {
    get(target, key) {
      if (key === 'getAccessToken') {
        return (digest: string) => {
          calls.getAccessToken += 1;
          return target.getAccessToken(digest);
        };
      }
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { store: counted, calls };
}
