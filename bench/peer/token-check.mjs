import { LRUCache } from 'lru-cache';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
// The project's own Redis store and digest, as built by `npm run build` (npm run bench builds first).
import { RedisStore } from '../../dist/store/redis.js';
import { tokenDigest } from '../../dist/token/token-value.js';

/**
 * The peer's token check, as people write it next to nginx `auth_request`: take the bearer
 * token, look its digest up in the same Redis tokengate uses, answer 204 with identity headers
 * for a live user token with the `public` scope, 401 otherwise; nginx copies the identity
 * headers onto the proxied request.
 *
 * `--cache-seconds N` puts an LRU cache in front of the Redis read, the way such a check is
 * usually sped up: a record found is kept N seconds (tokengate's cache keeps a token 60 s by
 * default), as many records as tokengate's cache holds. Nothing tells it of a revocation: a
 * revoked token stays accepted until its entry ages out.
 *
 * Plain JavaScript on plain node, like every server of the benchmark.
 */
const { values } = parseArgs({
  options: { port: { type: 'string' }, redis: { type: 'string' }, prefix: { type: 'string' }, 'cache-seconds': { type: 'string', default: '0' } },
});
const store = new RedisStore({
  connection: { topology: { kind: 'standalone', url: String(values.redis) } },
  keyPrefix: String(values.prefix),
  commandTimeoutMs: 500,
  connectTimeoutMs: 2_000,
  waitForReplicas: 0,
});
const cacheSeconds = Number(values['cache-seconds']);
const cache = cacheSeconds > 0 ? new LRUCache({ max: 100_000, ttl: cacheSeconds * 1000 }) : null;
const BEARER = /^Bearer ([A-Za-z0-9_-]{43})$/i;

function lookUp(digest) {
  const cached = cache?.get(digest);
  if (cached !== undefined) return Promise.resolve(cached);
  return store.getAccessToken(digest).then((record) => {
    if (record !== null) cache?.set(digest, record);
    return record;
  });
}

function answer(response, status, headers = {}) {
  response.writeHead(status, headers);
  response.end();
}

const server = createServer((request, response) => {
  const token = BEARER.exec(request.headers.authorization ?? '')?.[1];
  if (token === undefined) return answer(response, 401);
  lookUp(tokenDigest(token)).then(
    (record) => {
      if (record === null || record.expiresAt <= Date.now() || record.kind !== 'user' || !record.scopes.includes('public')) return answer(response, 401);
      answer(response, 204, {
        'x-auth-user-id': record.userId ?? '',
        'x-auth-client-id': record.clientId,
        'x-auth-scope': record.scopes.join(' '),
        'x-auth-token-kind': record.kind,
      });
    },
    () => answer(response, 503),
  );
});
server.keepAliveTimeout = 120_000;
server.headersTimeout = 125_000;
server.listen(Number(values.port), '127.0.0.1');
process.once('SIGTERM', () => server.close(() => store.close().then(() => process.exit(0))));
