import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { withTokens, type AccessTokenRecord, type Store } from '../../src/store/store.js';
import { createTokenMinter, decodeTagKey, tokenDigest } from '../../src/token/token-value.js';
import { createTestRedisStore } from './redis.js';

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
      const entry = {
        method: request.method!,
        url: request.url!,
        headers: request.headers,
        rawHeaders: request.rawHeaders,
        body: Buffer.concat(chunks).toString('latin1'),
      };
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

/** What a running tokengate's issue() stores by default: a user token with the public scope, valid for an hour. */
export const USER_TOKEN = {
  kind: 'user',
  clientId: 'client-web',
  userId: 'user-42',
  scopes: ['public'],
  familyId: 'family-1',
} as const satisfies Partial<AccessTokenRecord>;
/** An application (client_credentials) token's fields, to pass to issue(). */
export const APPLICATION_TOKEN = {
  kind: 'application',
  clientId: 'client-organizer',
  userId: null,
  scopes: ['public'],
  familyId: null,
} as const satisfies Partial<AccessTokenRecord>;

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
export function countingStore(store: Store): { store: Store; calls: { getAccessToken: number } } {
  const calls = { getAccessToken: 0 };
  const counted = new Proxy(store.tokens, {
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
  return { store: withTokens(store, counted), calls };
}

/**
 * A user token of the deployment whose tag key is `tagKey`, its record stored under `prefix` on
 * the shared Redis: what a `tokengate serve` process of that deployment honours.
 */
export async function storeUserToken(prefix: string, tagKey: string, lifeMs: number): Promise<string> {
  const store = createTestRedisStore(prefix);
  try {
    const token = createTokenMinter(decodeTagKey(tagKey)).mint();
    await store.tokens.saveAccessToken(tokenDigest(token), { ...USER_TOKEN, scopes: ['public'], issuedAt: Date.now(), expiresAt: Date.now() + lifeMs });
    return token;
  } finally {
    await store.close();
  }
}
