import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateTagKey } from '../src/token/token-value.js';
import { startServe, tempConfigs, type ServeProcess } from './support/cli.js';
import { startUpstream, storeUserToken, type Upstream } from './support/gateway.js';
import { startCollector, type Collector } from './support/otlp.js';
import { deletePrefix, REDIS_URL, uniquePrefix } from './support/redis.js';
import { eventually } from './support/wait.js';

/** `server.workers`: every worker traces the requests it serves and exports its own spans. */

const configs = tempConfigs();
const prefix = uniquePrefix('tracing-workers');
const tagKey = generateTagKey();
let upstream: Upstream;
let collector: Collector;
let serve: ServeProcess | undefined;
let token: string;

beforeAll(async () => {
  upstream = await startUpstream();
  collector = await startCollector();
  token = await storeUserToken(prefix, tagKey, 600_000);
});

afterAll(async () => {
  serve?.child.kill('SIGKILL');
  await serve?.exited;
  await collector?.close();
  await upstream?.close();
  await deletePrefix(prefix);
  configs.remove();
});

describe('tracing with server.workers', () => {
  it('exports the spans of every worker, each from its own process', async () => {
    serve = await startServe(
      configs.write(
        `server:\n  host: 127.0.0.1\n  port: 0\n  workers: 2\nadmin:\n  port: 0\nlogging:\n  level: info\n` +
          `issuer:\n  issuerUrl: http://localhost:8080\n  tokenTagKey: ${tagKey}\n` +
          `store:\n  driver: redis\n  url: ${REDIS_URL}\n  keyPrefix: "${prefix}"\n` +
          `routes:\n  - path: /api/public/me\n    upstream: ${upstream.url}\n` +
          `tracing:\n  enabled: true\n  endpoint: ${collector.url}\n  scheduledDelayMs: 50\n`,
      ),
    );
    // A new connection per request, so the primary spreads them over the workers.
    const statuses = await Promise.all(
      Array.from({ length: 40 }, async () => {
        const response = await fetch(`${serve!.publicUrl}/api/public/me`, { headers: { authorization: `Bearer ${token}`, connection: 'close' } });
        await response.arrayBuffer();
        return response.status;
      }),
    );
    expect(statuses.every((status) => status === 200)).toBe(true);
    const servers = () => collector.spans.filter((span) => span.kind === 2);
    await eventually(() => servers().length >= 40, 10_000);
    expect(new Set(servers().map((span) => span.resource['process.pid'])).size).toBe(2);
  }, 180_000);
});
