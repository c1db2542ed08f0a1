import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto';
import { calculateJwkThumbprint, type JWK } from 'jose';
import { tokenDigest } from '../../src/token/token-value.js';
import type { Row } from './measure.js';
import { scrapeMetrics } from './metrics.js';
import { commandsExecuted } from './redis.js';
import { DPOP_PATH } from './tokengate-config.js';

/**
 * The DPoP cached-token row: the same one-core tokengate as the cached-token row, a token bound
 * to the load generator's key already in its cache, and a fresh proof with every request, as a
 * DPoP client sends it. What it costs beyond Bearer is the proof's signature check and its
 * replay mark in Redis (one command per request, counted here per 1,000 requests).
 *
 * autocannon asks for each request synchronously, so the proofs are signed here with
 * node:crypto (ES256, the most common proof algorithm) rather than with jose's asynchronous
 * API; tokengate checks them with jose.
 */
export function cacheHitDpop(oneCoreTokengate: Row['tier']): Row {
  return {
    id: 'cache-hit-dpop',
    title: 'tokengate, cached DPoP token (proof per request)',
    tier: oneCoreTokengate,
    async traffic(bench, tier) {
      const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      const jwk = publicKey.export({ format: 'jwk' }) as JWK;
      const token = bench.minter.mint();
      const now = Date.now();
      await bench.redis.store.tokens.saveAccessToken(tokenDigest(token), {
        kind: 'user',
        clientId: 'bench-fan-app',
        userId: 'user-dpop',
        scopes: ['public'],
        familyId: 'family-dpop',
        issuedAt: now,
        expiresAt: now + 2 * 3_600_000,
        jkt: await calculateJwkThumbprint(jwk, 'sha256'),
      });
      const proofs = proofMaker(privateKey, jwk, `${tier.url}${DPOP_PATH}`, token);
      // Read the token into the cache first, so the row measures the cached path.
      const warm = await fetch(`${tier.url}${DPOP_PATH}`, { headers: { authorization: `DPoP ${token}`, dpop: proofs() } });
      if (warm.status !== 200) throw new Error(`the DPoP warm-up request was answered ${warm.status}`);
      bench.results.dpopStoreCommands = { commands: -(await commandsExecuted(bench.redis.store.backend)), requests: -(await dpopRequests(tier.opsUrl!)) };
      return {
        request: { method: 'GET', path: DPOP_PATH, setupRequest: (request) => ({ ...request, headers: { authorization: `DPoP ${token}`, dpop: proofs() } }) },
        warmsUp: true,
      };
    },
    async finish(bench, tier) {
      // Both counts include the warm-up's requests: every DPoP request tokengate answered since traffic().
      const counted = bench.results.dpopStoreCommands!;
      counted.commands += await commandsExecuted(bench.redis.store.backend);
      counted.requests += await dpopRequests(tier.opsUrl!);
    },
  };
}

/** The requests tokengate has answered on the DPoP route (tokengate_gateway_requests_total, every outcome). */
async function dpopRequests(opsUrl: string): Promise<number> {
  let total = 0;
  for (const [series, value] of await scrapeMetrics(opsUrl)) {
    if (series.startsWith('tokengate_gateway_requests_total{') && series.includes(`route="${DPOP_PATH}"`)) total += value;
  }
  return total;
}

/** A new proof for each call: GET `htu`, a fresh jti, the current iat, `ath` of `token`. */
function proofMaker(privateKey: KeyObject, jwk: JWK, htu: string, token: string): () => string {
  const header = Buffer.from(JSON.stringify({ typ: 'dpop+jwt', alg: 'ES256', jwk: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y } })).toString('base64url');
  const ath = tokenDigest(token);
  return () => {
    const claims = { htm: 'GET', htu, jti: randomUUID(), iat: Math.floor(Date.now() / 1000), ath };
    const input = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
    return `${input}.${sign('sha256', Buffer.from(input), { key: privateKey, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
  };
}
