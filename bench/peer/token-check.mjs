import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';

/**
 * The token check people write next to nginx `auth_request`: node:http, the bearer token's
 * SHA-256 looked up with one ioredis GET in the Redis tokengate writes (the record is JSON at
 * `<prefix>at:<digest>`), JSON.parse, and for a live user token with the `public` scope a 200
 * with the one identity header nginx passes on (the user id); 401 otherwise.
 *
 * `--cache-seconds N` puts an LRU cache of the parsed records in front of the GET, the way such
 * a check is usually sped up: a record found is kept N seconds (tokengate's cache keeps a token
 * 60 s by default), as many as tokengate's cache holds. Nothing tells it of a revocation: a
 * revoked token stays accepted until its entry ages out.
 *
 * Plain JavaScript on plain node, like every server of the benchmark.
 */
const { values } = parseArgs({
  options: { port: { type: 'string' }, redis: { type: 'string' }, prefix: { type: 'string' }, 'cache-seconds': { type: 'string', default: '0' } },
});
const redis = new Redis(String(values.redis));
const keyPrefix = `${values.prefix}at:`;
const cacheSeconds = Number(values['cache-seconds']);
const cache = cacheSeconds > 0 ? new LRUCache({ max: 100_000, ttl: cacheSeconds * 1000 }) : null;

async function lookUp(token) {
  const digest = createHash('sha256').update(token).digest('base64url');
  const cached = cache?.get(digest);
  if (cached !== undefined) return cached;
  const json = await redis.get(keyPrefix + digest);
  const record = json === null ? null : JSON.parse(json);
  if (record !== null) cache?.set(digest, record);
  return record;
}

const server = createServer(async (request, response) => {
  const authorization = request.headers.authorization;
  try {
    const record = authorization?.startsWith('Bearer ') ? await lookUp(authorization.slice(7)) : null;
    if (record === null || record.expiresAt <= Date.now() || record.kind !== 'user' || !record.scopes.includes('public')) {
      response.writeHead(401).end();
    } else {
      response.writeHead(200, { 'x-auth-user-id': record.userId }).end();
    }
  } catch {
    response.writeHead(503).end();
  }
});
server.keepAliveTimeout = 120_000;
server.headersTimeout = 125_000;
server.listen(Number(values.port), '127.0.0.1');
process.once('SIGTERM', () => server.close(() => redis.quit().then(() => process.exit(0))));
