import { existsSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { percentile } from './load.js';
import { progress, type Bench, type HeapSpaces, type Row, type Scenario } from './measure.js';
import { CACHED_TOKENS, scrapeMetrics } from './metrics.js';
import { residentBytes } from './proc.js';
import { rotation, seedUserTokens, unknownTokens } from './fixtures.js';
import { startNginxDecisions, startNginxPeer, startNginxProxy, startNodeServer, startTokengate, type Tier } from './services.js';
import { freePort, waitForPort, type Placement } from './processes.js';
import { ME, ME_CACHED, ME_SIGNED, OVER_LIMIT, OVER_LIMIT_RATE, RATE_LIMITED } from './tokengate-config.js';
import { nginxVersion } from './nginx.js';
import { commandsExecuted } from './redis.js';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest } from '../../src/token/token-value.js';

/**
 * The rows of `npm run bench`: what each starts (once, shared by the rows that measure the same
 * server) and what it sends. bench/run.ts lists them in the order they run.
 */

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const mainPid = (tier: Tier) => tier.processes[0]!.pid;

/** tokengate on the run's Redis, tag key and upstream, started once per name. */
function tokengate(
  bench: Bench,
  name: string,
  placement: Placement,
  workers?: number,
  started?: (tier: Tier) => Promise<void>,
  cacheMaxEntries?: number,
): Promise<Tier | string> {
  return bench.shared(name, async () => {
    const tier = await startTokengate(bench.group, {
      name,
      placement,
      config: {
        redisUrl: bench.redis.url,
        keyPrefix: bench.keyPrefix,
        tokenTagKey: bench.tagKey,
        upstreamUrl: bench.upstream.url,
        ...(workers === undefined ? {} : { workers }),
        ...(cacheMaxEntries === undefined ? {} : { cacheMaxEntries }),
      },
      nodeFlags: bench.settings.nodeFlags,
      // One profile file per name: cluster workers would all write the same one.
      profileDir: workers === undefined ? bench.settings.cpuProfileDir : null,
    });
    if (typeof tier !== 'string' && started !== undefined) await started(tier);
    return tier;
  });
}

/**
 * The one-core tokengate; its RSS, read once it has settled after start, is the idle figure,
 * judged against the import floor's read the same way with the same node flags.
 */
function oneCoreTokengate(bench: Bench): Promise<Tier | string> {
  return tokengate(bench, 'tokengate', 'tier', undefined, async (tier) => {
    await sleep(1000);
    bench.results.memory.idleBytes = residentBytes(mainPid(tier));
    bench.results.memory.heapAndBuffers = { idleBytes: heapAndBuffers(await scrapeMetrics(tier.opsUrl!)), cachedBytes: null };
    bench.results.memory.importFloorBytes = await importFloorBytes(bench);
  });
}

/** RSS of bench/servers/import-floor.mjs (the stack imported, nothing served), 1 s after it listens, on the tier's CPU and node flags. */
async function importFloorBytes(bench: Bench): Promise<number> {
  const port = await freePort();
  const started = bench.group.spawn('import-floor', 'tier', process.execPath, [
    ...bench.settings.nodeFlags,
    'bench/servers/import-floor.mjs',
    '--port',
    String(port),
  ]);
  try {
    await waitForPort(started, port);
    await sleep(1000);
    return residentBytes(started.pid);
  } finally {
    await started.stop();
  }
}

/** V8's heap in use and the array buffers outside it (where the token cache keeps its entries), as the process reports them. */
function heapAndBuffers(metrics: Map<string, number>): number {
  return (metrics.get('nodejs_heap_size_used_bytes') ?? Number.NaN) + (metrics.get('nodejs_external_memory_bytes') ?? Number.NaN);
}

/** The young generation's reserved size and the old generation's use: where a fill's RSS goes beside the cache's arrays. */
function heapSpaces(metrics: Map<string, number>): HeapSpaces {
  return {
    newSpaceBytes: metrics.get('nodejs_heap_space_size_total_bytes{space="new"}') ?? Number.NaN,
    oldSpaceUsedBytes: metrics.get('nodejs_heap_space_size_used_bytes{space="old"}') ?? Number.NaN,
  };
}

function nodeTier(bench: Bench, name: string, script: string): Promise<Tier | string> {
  return bench.shared(name, () => startNodeServer(bench.group, name, 'tier', script, ['--upstream', bench.upstream.url], bench.settings.cpuProfileDir));
}

/** Where Debian's libnginx-mod-http-lua puts the module examples/ingress/nginx-decision-cache.conf loads. */
const NGINX_LUA_MODULE = '/usr/lib/nginx/modules/ngx_http_lua_module.so';

/** A tier with nginx in front, started once per id; why it cannot run when nginx is not installed. */
function nginxTier(bench: Bench, id: string, start: () => Promise<Tier | string>): Promise<Tier | string> {
  return nginxVersion() === null ? Promise.resolve('nginx is not installed (apt-get install -y nginx)') : bench.shared(id, start);
}

/** nginx + the token-check service; `cacheSeconds` 0 is the Redis-GET check, more the LRU-cached one. */
function nginxRow(id: string, title: string, placement: Placement, workers: number, cacheSeconds: number): Row {
  return {
    id,
    title,
    tier: (bench) =>
      nginxTier(bench, id, () =>
        startNginxPeer(bench.group, {
          name: id,
          placement,
          workers,
          cacheSeconds,
          upstreamPort: bench.upstream.port,
          redisUrl: bench.redis.url,
          keyPrefix: bench.keyPrefix,
        }),
      ),
  };
}

/** As long as tokengate keeps a token in its cache by default (cache.ttlSeconds). */
const PEER_CACHE_SECONDS = 60;

// One core: each tier alone on the tier CPU.

export const direct: Row = { id: 'direct', title: 'direct to the upstream', tier: async (bench) => bench.upstream };

export const floor: Row = {
  id: 'floor',
  title: 'floor: fastify + undici dispatch, no checks',
  tier: (bench) => nodeTier(bench, 'floor', 'bench/servers/floor.mjs'),
};

export const bareProxy: Row = {
  id: 'bare-proxy',
  title: 'bare @fastify/http-proxy, no checks',
  tier: (bench) => nodeTier(bench, 'bare-proxy', 'bench/servers/bare-proxy.mjs'),
};

export const nginxRedis = nginxRow('nginx-redis', 'nginx auth_request + Redis-GET check', 'tier', 1, 0);
export const nginxLru = nginxRow('nginx-lru', `nginx auth_request + LRU check (${PEER_CACHE_SECONDS} s)`, 'tier', 1, PEER_CACHE_SECONDS);

export const cacheHit: Row = { id: 'cache-hit', title: 'tokengate, cached token', tier: oneCoreTokengate };

export const nginxProxy: Row = {
  id: 'nginx-proxy',
  title: 'nginx proxying alone, no checks',
  tier: (bench) =>
    nginxTier(bench, 'nginx-proxy', () => startNginxProxy(bench.group, { name: 'nginx-proxy', placement: 'tier', upstreamPort: bench.upstream.port })),
};

/** The tokengate the nginx rows with tokengate's decisions ask: its decision listener on, ME_CACHED among its routes. */
function decisionsTokengate(bench: Bench): Promise<(Tier & { decisionsPort: number }) | string> {
  return bench.shared('tokengate-decisions', async () => {
    const decisionsPort = await freePort();
    const tier = await startTokengate(bench.group, {
      name: 'tokengate-decisions',
      placement: 'tier',
      config: { redisUrl: bench.redis.url, keyPrefix: bench.keyPrefix, tokenTagKey: bench.tagKey, upstreamUrl: bench.upstream.url, decisionsPort },
      nodeFlags: bench.settings.nodeFlags,
      profileDir: null,
    });
    return typeof tier === 'string' ? tier : { ...tier, decisionsPort };
  }) as Promise<(Tier & { decisionsPort: number }) | string>;
}

/** nginx asking the decision listener of decisionsTokengate: with auth_request, or as the decision cache example. */
async function startNginxAskingTokengate(bench: Bench, name: string, decisionCache: boolean): Promise<Tier | string> {
  const tokengate = await decisionsTokengate(bench);
  if (typeof tokengate === 'string') return tokengate;
  return startNginxDecisions(bench.group, { name, placement: 'tier', upstreamPort: bench.upstream.port, tokengate, decisionCache });
}

/** nginx in front, as nginxRedis and nginxLru, asking tokengate's decision listener instead of a Node check service. */
export const nginxDecisions: Row = {
  id: 'nginx-decisions',
  title: 'nginx auth_request + tokengate decisions',
  tier: (bench) => nginxTier(bench, 'nginx-decisions', () => startNginxAskingTokengate(bench, 'nginx-decisions', false)),
};

/** The nginx example with the decision cache (Lua), on a route whose decisions it may keep 60 s: tokengate is asked once a minute. */
export const nginxDecisionCache: Row = {
  id: 'nginx-decision-cache',
  title: 'nginx + tokengate decisions, decision cache (cached route)',
  tier: async (bench) =>
    existsSync(NGINX_LUA_MODULE)
      ? nginxTier(bench, 'nginx-decision-cache', () => startNginxAskingTokengate(bench, 'nginx-decision-cache', true))
      : `nginx's Lua module is not installed (apt-get install -y libnginx-mod-http-lua)`,
  async traffic(bench) {
    return { request: { ...bench.me, path: ME_CACHED } };
  },
};

/** Revocations of other tokens each second of a window of nginxDecisionCacheRevoking: each reaches nginx through the feed. */
const REVOCATIONS_PER_SECOND = 100;
/** Revocations timed at the ingress after that row's last window. */
const INGRESS_REVOCATION_SAMPLES = 100;

/**
 * The decision cache row with revocations flowing: in each second of a window after its first,
 * REVOCATIONS_PER_SECOND tokens nginx holds no decision for are revoked, evenly spread, so the
 * feed carries their digests to nginx's follower (and tokengate's feed answers each poll). The
 * same nginx and tokengate as nginxDecisionCache, measured in turns with it. After the last
 * window, the delay at the ingress: a kept decision's token revoked, then asked for through
 * nginx until refused.
 */
export const nginxDecisionCacheRevoking: Row = {
  id: 'nginx-decision-cache-revoking',
  title: `nginx + tokengate decisions, decision cache (cached route), ${REVOCATIONS_PER_SECOND} revocations/s of other tokens`,
  tier: nginxDecisionCache.tier,
  async traffic(bench, _tier, windows) {
    const seconds = windows * bench.settings.windowSeconds;
    const digests = (await seedUserTokens(bench.redis.store, bench.minter, REVOCATIONS_PER_SECOND * seconds)).map((token) => tokenDigest(token));
    let next = 0;
    const revokeNext = () => {
      const digest = digests[next++ % digests.length]!;
      void bench.redis.store.tokens.revokeAccessToken(digest).catch((error: unknown) => bench.results.failures.push(`revocation: ${String(error)}`));
    };
    return {
      request: { ...bench.me, path: ME_CACHED },
      everySecond() {
        for (let index = 0; index < REVOCATIONS_PER_SECOND; index++) setTimeout(revokeNext, (index * 1000) / REVOCATIONS_PER_SECOND);
      },
    };
  },
  async finish(bench, tier) {
    const ask = async (token: string) => {
      const response = await fetch(`${tier.url}${ME_CACHED}`, { headers: bearer(token) });
      await response.arrayBuffer();
      return response.status;
    };
    const delays: number[] = [];
    for (const token of await seedUserTokens(bench.redis.store, bench.minter, INGRESS_REVOCATION_SAMPLES)) {
      // Kept: asked about once, then answered by nginx.
      if ((await ask(token)) !== 200 || (await ask(token)) !== 200) throw new Error('nginx refused a fresh token');
      await bench.redis.store.tokens.revokeAccessToken(tokenDigest(token));
      const revoked = performance.now();
      while ((await ask(token)) !== 401) {
        if (performance.now() - revoked > 5_000) throw new Error('nginx still lets through a token revoked 5 s ago');
      }
      delays.push(performance.now() - revoked);
    }
    const sorted = Float64Array.from(delays).sort();
    const figure = `revocation delay at the ingress (nginx decision cache, ${delays.length} kept decisions revoked one after another): p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms`;
    bench.results.notes.push(figure);
    progress(figure);
  },
};

export const cacheMiss: Row = {
  id: 'cache-miss',
  title: 'tokengate, cache miss',
  tier: oneCoreTokengate,
  async traffic(bench, _tier, windows) {
    const seeded = performance.now();
    const perWindow = Math.ceil(bench.settings.missTokens / windows);
    const next = rotation(await seedUserTokens(bench.redis.store, bench.minter, perWindow * windows));
    progress(`seeded ${perWindow * windows} tokens in ${((performance.now() - seeded) / 1000).toFixed(1)} s`);
    // No warm-up sends them: the first window of this row warms up with the cached token.
    return { request: { method: 'GET', path: ME, setupRequest: (request) => ({ ...request, headers: bearer(next()) }) }, requestsPerWindow: perWindow };
  },
  async finish(bench, tier) {
    const metrics = await scrapeMetrics(tier.opsUrl!);
    bench.results.memory.cached = { tokens: metrics.get(CACHED_TOKENS) ?? Number.NaN, bytes: residentBytes(mainPid(tier)) };
    if (bench.results.memory.heapAndBuffers !== null) bench.results.memory.heapAndBuffers.cachedBytes = heapAndBuffers(metrics);
  },
};

// The signed identity: a tokengate of its own (its key refresh reads Redis, which the forged row counts), the route passing one.

function signedIdentityTokengate(bench: Bench): Promise<Tier | string> {
  return bench.shared('tokengate-signed', () =>
    startTokengate(bench.group, {
      name: 'tokengate-signed',
      placement: 'tier',
      config: { redisUrl: bench.redis.url, keyPrefix: bench.keyPrefix, tokenTagKey: bench.tagKey, upstreamUrl: bench.upstream.url, signedIdentity: true },
      nodeFlags: bench.settings.nodeFlags,
      profileDir: null,
    }),
  );
}

/**
 * The cached token on the signed identity's tokengate, on a route without one: the base its
 * signed row is judged against, measured in turns with it on the same process, so that the ratio
 * is what the signed identity adds to a request and nothing of two processes' JIT or placement.
 */
export const signedIdentityOff: Row = {
  id: 'signed-identity-off',
  title: "tokengate, cached token, route without a signed identity (the signed rows' tokengate)",
  tier: signedIdentityTokengate,
};

export const cacheHitSigned: Row = {
  id: 'cache-hit-signed',
  title: 'tokengate, cached token, signed identity',
  tier: signedIdentityTokengate,
  async traffic(bench) {
    return { request: { ...bench.me, path: ME_SIGNED } };
  },
};

export const cacheMissSigned: Row = {
  id: 'cache-miss-signed',
  title: 'tokengate, cache miss, signed identity',
  tier: signedIdentityTokengate,
  async traffic(bench, _tier, windows) {
    const perWindow = Math.ceil(bench.settings.missTokens / windows);
    const next = rotation(await seedUserTokens(bench.redis.store, bench.minter, perWindow * windows));
    // Each token once: a store read and one signature per request.
    return { request: { method: 'GET', path: ME_SIGNED, setupRequest: (request) => ({ ...request, headers: bearer(next()) }) }, requestsPerWindow: perWindow };
  },
};

// Added latency: a moderate rate, where the gateway is not the bottleneck.

const atRate = (row: Row): Row => ({ ...row, id: `${row.id}-at-rate`, title: `${row.title}, 2,000 req/s`, rate: 2_000, connections: 2 });
export const directAtRate = atRate(direct);
export const cacheHitAtRate = atRate(cacheHit);

// The issuer, and what a forger costs.

export const forgedFlood: Row = {
  id: 'forged',
  title: 'tokengate, forged-token flood (401)',
  tier: oneCoreTokengate,
  async traffic(bench, tier) {
    // Tokens of the right shape under another deployment's tag key: refused before any store call.
    const next = rotation(unknownTokens(createTokenMinter(decodeTagKey(generateTagKey())), 10_000));
    // The warm-up sends the run's stored token: read it into the cache now, before counting.
    await (await fetch(`${tier.url}${ME}`, { headers: bench.me.headers as Record<string, string> })).arrayBuffer();
    const before = await commandsExecuted(bench.redis.store.backend);
    bench.results.forgedStoreCalls = -before;
    return { request: { method: 'GET', path: ME, setupRequest: (request) => ({ ...request, headers: bearer(next()) }) }, expectedStatus: 401 };
  },
  async finish(bench) {
    bench.results.forgedStoreCalls! += await commandsExecuted(bench.redis.store.backend);
  },
};

export const issuance: Row = {
  id: 'issuance',
  title: 'tokengate, client_credentials issuance (tokens/s)',
  tier: oneCoreTokengate,
  async traffic(_bench, tier) {
    const client = await createApplication(tier, 'bench organizer');
    return {
      request: {
        method: 'POST',
        path: '/oauth/token',
        headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: client.basic },
        body: 'grant_type=client_credentials',
      },
      expectedStatus: 200,
      // The token endpoint's code is not what the cached-token warm-up optimizes.
      warmsUp: true,
    };
  },
};

// Memory.

export const soak: Row = {
  id: 'soak',
  title: 'tokengate, cached token, soak',
  tier: oneCoreTokengate,
  async traffic(bench, tier) {
    const samples: number[] = [];
    bench.results.memory.soak = samples;
    return { request: bench.me, everySecond: () => samples.push(residentBytes(mainPid(tier))) };
  },
};

/** A cache of `fillTokens` entries (a tokengate of its own, cache.maxEntries that size) read full once, each token once: what a million cached tokens cost. */
export const cacheFill: Row = {
  id: 'cache-fill',
  title: 'tokengate, cache filled with distinct tokens',
  tier: (bench) =>
    tokengate(
      bench,
      'tokengate-fill',
      'tier',
      undefined,
      async () => {
        await sleep(1000);
      },
      bench.settings.fillTokens,
    ),
  async traffic(bench, tier, windows) {
    const seeded = performance.now();
    const next = rotation(await seedUserTokens(bench.redis.store, bench.minter, bench.settings.fillTokens));
    progress(`seeded ${bench.settings.fillTokens} tokens in ${((performance.now() - seeded) / 1000).toFixed(1)} s`);
    const idle = await scrapeMetrics(tier.opsUrl!);
    bench.results.memory.fill = {
      tokens: 0,
      idleBytes: residentBytes(mainPid(tier)),
      bytes: 0,
      idleHeapBytes: heapAndBuffers(idle),
      heapBytes: 0,
      idleSpaces: heapSpaces(idle),
      spaces: null,
    };
    return {
      request: { method: 'GET', path: ME, setupRequest: (request) => ({ ...request, headers: bearer(next()) }) },
      // In windows short enough for the load's time limit; each token is sent once over all of them.
      requestsPerWindow: Math.ceil(bench.settings.fillTokens / windows),
    };
  },
  async finish(bench, tier) {
    const metrics = await scrapeMetrics(tier.opsUrl!);
    Object.assign(bench.results.memory.fill!, {
      tokens: metrics.get(CACHED_TOKENS) ?? Number.NaN,
      bytes: residentBytes(mainPid(tier)),
      heapBytes: heapAndBuffers(metrics),
      spaces: heapSpaces(metrics),
    });
  },
};

export const unknownTokenFlood: Row = {
  id: 'unknown-flood',
  title: 'tokengate, unknown-token flood (401)',
  tier: oneCoreTokengate,
  async traffic(bench, tier) {
    const next = rotation(unknownTokens(bench.minter, bench.settings.floodTokens));
    const flood = { beforeBytes: residentBytes(mainPid(tier)), during: [] as number[], after: [] as number[] };
    bench.results.memory.flood = flood;
    return {
      request: { method: 'GET', path: ME, setupRequest: (request) => ({ ...request, headers: bearer(next()) }) },
      expectedStatus: 401,
      requestsPerWindow: bench.settings.floodTokens,
      everySecond: () => flood.during.push(residentBytes(mainPid(tier))),
    };
  },
  async finish(bench, tier) {
    for (let second = 0; second < bench.settings.settleSeconds; second++) {
      await sleep(1000);
      bench.results.memory.flood!.after.push(residentBytes(mainPid(tier)));
    }
  },
};

// Two workers, nothing pinned but the load side: tokengate's server.workers against nginx with two worker processes.

export const workersTokengate: Row = {
  id: 'workers-tokengate',
  title: 'tokengate, 2 workers, cached token',
  tier: (bench) => tokengate(bench, 'tokengate-workers', 'anywhere', 2),
};

export const workersNginxRedis = nginxRow('workers-nginx-redis', 'nginx 2 workers auth_request + Redis-GET check', 'anywhere', 2, 0);
export const workersNginxLru = nginxRow('workers-nginx-lru', 'nginx 2 workers auth_request + LRU check', 'anywhere', 2, PEER_CACHE_SECONDS);

// Revocation: how soon a second sidecar refuses a token revoked through the first.

export const revocation: Scenario = {
  id: 'revocation',
  rowIds: ['revocation'],
  async run(bench) {
    const first = await oneCoreTokengate(bench);
    const second = await tokengate(bench, 'tokengate-2', 'tier');
    if (typeof first === 'string' || typeof second === 'string') {
      bench.results.notes.push(`revocation skipped: ${typeof first === 'string' ? first : second}`);
      return;
    }
    bench.results.revocation = await measureRevocations(bench, first, second);
    progress(`revocation: p50 ${bench.results.revocation.p50Ms.toFixed(1)} ms, p99 ${bench.results.revocation.p99Ms.toFixed(1)} ms`);
  },
};

/**
 * Revokes, through the first sidecar's /oauth/revoke, a token the second has cached, then asks
 * the second until it answers 401. The delay runs from sending the revocation, so it includes
 * the first sidecar's work, Redis and the pub/sub fan-out.
 */
async function measureRevocations(bench: Bench, first: Tier, second: Tier): Promise<NonNullable<Bench['results']['revocation']>> {
  const client = await createApplication(first, 'bench web');
  const ask = async (token: string) => {
    const response = await fetch(`${second.url}${ME}`, { headers: bearer(token) });
    await response.arrayBuffer();
    return response.status;
  };
  const delays: number[] = [];
  for (let i = 0; i < bench.settings.revocations; i++) {
    const [token] = await seedUserTokens(bench.redis.store, bench.minter, 1, client.clientId);
    if ((await ask(token!)) !== 200 || (await ask(token!)) !== 200) throw new Error('the second sidecar refused a fresh token');
    const sent = performance.now();
    const revoked = fetch(`${first.url}/oauth/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: client.basic },
      body: `token=${token}&token_type_hint=access_token`,
    });
    while ((await ask(token!)) !== 401) {
      if (performance.now() - sent > 5_000) throw new Error('the second sidecar still accepts a token revoked 5 s ago');
    }
    delays.push(performance.now() - sent);
    const answer = await revoked;
    if (answer.status !== 200) throw new Error(`/oauth/revoke answered ${answer.status}: ${await answer.text()}`);
  }
  const sorted = Float64Array.from(delays).sort();
  return { samples: delays.length, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted.at(-1)! };
}

/** A confidential application, created as an operator does: the admin API on the ops listener. */
async function createApplication(tier: Tier, name: string): Promise<{ clientId: string; basic: string }> {
  const response = await fetch(`${tier.opsUrl}/admin/applications`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, redirect_uris: ['http://127.0.0.1/callback'], confidential: true }),
  });
  const body = (await response.json()) as { client_id?: string; client_secret?: string };
  if (response.status !== 201 || body.client_id === undefined || body.client_secret === undefined)
    throw new Error(`the admin API answered ${response.status} to creating an application: ${JSON.stringify(body)}`);
  const credentials = `${encodeURIComponent(body.client_id)}:${encodeURIComponent(body.client_secret)}`;
  return { clientId: body.client_id, basic: `Basic ${Buffer.from(credentials).toString('base64')}` };
}

// Rate limits: the same route with and without a policy, side by side on one tokengate.

function rateLimitedTokengate(bench: Bench): Promise<Tier | string> {
  return bench.shared('tokengate-rate-limits', () =>
    startTokengate(bench.group, {
      name: 'tokengate-rate-limits',
      placement: 'tier',
      config: { redisUrl: bench.redis.url, keyPrefix: bench.keyPrefix, tokenTagKey: bench.tagKey, upstreamUrl: bench.upstream.url, rateLimits: true },
      nodeFlags: bench.settings.nodeFlags,
      profileDir: null,
    }),
  );
}

export const rateLimitOff: Row = { id: 'rate-limit-off', title: 'tokengate, cached token, route without a rate limit', tier: rateLimitedTokengate };

export const rateLimitUnder: Row = {
  id: 'rate-limit-under',
  title: 'tokengate, cached token, rate limited route under its limit',
  tier: rateLimitedTokengate,
  async traffic(bench) {
    return { request: { ...bench.me, path: RATE_LIMITED } };
  },
};

/** Three times its policy's rate: two answers in three are the 429 path. */
export const rateLimitOver: Row = {
  id: 'rate-limit-over',
  title: `tokengate, cached token, rate limited route at 3x its limit (${OVER_LIMIT_RATE.toLocaleString('en')} req/s)`,
  tier: rateLimitedTokengate,
  rate: OVER_LIMIT_RATE,
  connections: 10,
  steady: true,
  async traffic(bench) {
    return { request: { ...bench.me, path: OVER_LIMIT }, expectedStatus: [200, 429] };
  },
};

/**
 * The over-limit row alone, its Redis commands counted: what an application that stays over its
 * limit costs the store (the bound of docs/rate-limits.md), beside the 429s it was answered.
 */
export const rateLimitOverCommands: Row = {
  id: 'rate-limit-over-commands',
  title: `tokengate, rate limited route at 3x its limit (${OVER_LIMIT_RATE.toLocaleString('en')} req/s), Redis commands counted`,
  tier: rateLimitedTokengate,
  rate: OVER_LIMIT_RATE,
  connections: 10,
  steady: true,
  async traffic(bench, tier) {
    await (await fetch(`${tier.url}${OVER_LIMIT}`, { headers: bench.me.headers as Record<string, string> })).arrayBuffer();
    bench.results.rateLimitOver = { commands: -(await commandsExecuted(bench.redis.store.backend)), seconds: 0, refused: 0 };
    return { request: { ...bench.me, path: OVER_LIMIT }, expectedStatus: [200, 429] };
  },
  async finish(bench, _tier, result) {
    const counted = bench.results.rateLimitOver!;
    counted.commands += await commandsExecuted(bench.redis.store.backend);
    counted.seconds = result.load.seconds;
    counted.refused = result.load.statuses['429'] ?? 0;
  },
};

/** The under-limit row alone, its Redis commands counted: what the leases cost the store. */
export const rateLimitCommands: Row = {
  id: 'rate-limit-commands',
  title: 'tokengate, rate limited route under its limit, Redis commands counted',
  tier: rateLimitedTokengate,
  async traffic(bench, tier) {
    // The token is cached and the application's tier read before counting starts.
    await (await fetch(`${tier.url}${RATE_LIMITED}`, { headers: bench.me.headers as Record<string, string> })).arrayBuffer();
    bench.results.rateLimitCommandsPer1k = -(await commandsExecuted(bench.redis.store.backend));
    return { request: { ...bench.me, path: RATE_LIMITED } };
  },
  async finish(bench, _tier, result) {
    const commands = bench.results.rateLimitCommandsPer1k! + (await commandsExecuted(bench.redis.store.backend));
    // Every request of the windows: the warm-up's (GET /api/public/me, cached) cost no command.
    bench.results.rateLimitCommandsPer1k = (commands * 1000) / result.load.requests;
  },
};

// Tracing: the cached-token row with tracing off (no SDK loaded) and on at three sampling ratios.

/** The receiver every traced tokengate exports to, on the load generator's core. */
function collectorTier(bench: Bench): Promise<Tier> {
  return bench.shared('collector', () => startNodeServer(bench.group, 'collector', 'load', 'bench/servers/collector.mjs', [])) as Promise<Tier>;
}

function tracedRow(id: string, title: string, ratio: number | null): Row {
  return {
    id,
    title,
    tier: (bench) =>
      bench.shared(id, async () => {
        const tracing = ratio === null ? undefined : { endpoint: (await collectorTier(bench)).url, ratio };
        return startTokengate(bench.group, {
          name: id,
          placement: 'tier',
          config: { redisUrl: bench.redis.url, keyPrefix: bench.keyPrefix, tokenTagKey: bench.tagKey, upstreamUrl: bench.upstream.url, tracing },
          nodeFlags: bench.settings.nodeFlags,
          profileDir: null,
        });
      }),
  };
}

export const tracingOff = tracedRow('tracing-off', 'tokengate, cached token, tracing off (no SDK loaded)', null);
export const tracingUnsampled = tracedRow('tracing-unsampled', 'tokengate, cached token, tracing on, 0 % sampled', 0);
export const tracingTenth = tracedRow('tracing-10', 'tokengate, cached token, tracing on, 10 % sampled', 0.1);
export const tracingAll = tracedRow('tracing-100', 'tokengate, cached token, tracing on, 100 % sampled', 1);
