import { pino } from 'pino';
import { buildTokengate } from '../src/app.js';
import { parseConfig } from '../src/load-config.js';
import { check, isDenial, locate } from '../src/gateway/check.js';
import { compileRouteTable } from '../src/gateway/route-table.js';
import { RouteRequests } from '../src/observability/requests.js';
import { MemoryStore } from '../src/store/memory.js';
import { generateTagKey, tokenDigest } from '../src/token/token-value.js';

/**
 * `node --import tsx bench/rate-limit-check.ts` (docs/benchmarks.md): the CPU that metering adds
 * to one request's check, without the network, so that a shared, noisy machine does not drown
 * it. The cached token's check (src/gateway/check.ts) on a route without a
 * limit, and on the same route with a policy it never reaches (plus building the RateLimit
 * fields), alternated in rounds; the medians are printed.
 */

const REQUESTS_PER_ROUND = 500_000;
const ROUNDS = 7;

const config = parseConfig(
  JSON.stringify({
    issuer: { tokenTagKey: generateTagKey() },
    logging: { level: 'silent' },
    rateLimits: { under: { requestsPerSecond: 1_000_000, burst: 100_000 } },
    routes: [
      { path: '/api/public/me', token: 'user', upstream: 'http://127.0.0.1:1' },
      { path: '/api/public/limited', token: 'user', upstream: 'http://127.0.0.1:1', rateLimit: 'under' },
    ],
  }),
  'bench/rate-limit-check.ts',
  {},
);
const store = new MemoryStore();
const tokengate = await buildTokengate(config, { store, logger: pino({ level: 'silent' }) });
const { context } = tokengate;
const table = compileRouteTable(
  config,
  context.metrics,
  () => ({}),
  (label) => new RouteRequests(context.metrics.requests, context.requestLog, 'public', label),
  context.rateLimiter,
);
const token = context.minter.mint();
const now = Date.now();
await store.tokens.saveAccessToken(tokenDigest(token), {
  kind: 'user',
  clientId: 'bench',
  userId: 'u',
  scopes: ['public'],
  familyId: 'f',
  issuedAt: now,
  expiresAt: now + 3_600_000,
});
const request = { method: 'GET', headers: { authorization: `Bearer ${token}` }, rawHeaders: ['Authorization', `Bearer ${token}`] };
// Read by the DPoP step alone, which a Bearer token on these routes never reaches.
const subject = { method: 'GET', protocol: 'http', host: 'localhost', url: '/' };

/** CPU nanoseconds per checked request. */
async function measure(path: string, requests: number): Promise<number> {
  const started = process.cpuUsage();
  for (let index = 0; index < requests; index++) {
    const located = locate(table, 'GET', path, 2, 100);
    if (isDenial(located)) throw new Error(located.reason);
    const pending = check(context, located, request, null, 0, subject);
    const checked = pending instanceof Promise ? await pending : pending;
    if (isDenial(checked)) throw new Error(checked.reason);
    checked.admission?.appendFields([]);
  }
  const used = process.cpuUsage(started);
  return ((used.user + used.system) * 1000) / requests;
}

// Warm-up: the token into the cache, the first leases, the optimizing compiler.
await measure('/api/public/me', 200_000);
await measure('/api/public/limited', 200_000);
const off: number[] = [];
const limited: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  off.push(await measure('/api/public/me', REQUESTS_PER_ROUND));
  limited.push(await measure('/api/public/limited', REQUESTS_PER_ROUND));
}
const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
process.stdout.write(
  `check of a cached token, CPU per request (median of ${ROUNDS} rounds): no limit ${median(off).toFixed(0)} ns, rate limited ${median(limited).toFixed(0)} ns: +${(median(limited) - median(off)).toFixed(0)} ns\n`,
);
await tokengate.close();
