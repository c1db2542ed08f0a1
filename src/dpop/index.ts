import type { DpopConfig } from '../config/schema.js';
import type { Backend } from '../store/backend.js';
import { NonceIssuer } from './nonce.js';
import type { ProofWindow } from './proof.js';
import { proofMarksFor, ReplayGuard } from './replay.js';

/** What checking DPoP proofs needs, built once per instance (src/app.ts) and shared by the issuer and both listeners. */
export interface Dpop {
  readonly window: ProofWindow;
  readonly replay: ReplayGuard;
  readonly nonces: NonceIssuer;
  /** The token endpoint requires its nonce in every proof. */
  readonly tokenEndpointNonce: boolean;
}

/** `backend`: where the replay marks live; `tagKey`: the deployment's shared token tag key, from which nonces are keyed. */
export function createDpop(config: DpopConfig, backend: Backend, tagKey: Buffer): Dpop {
  const window = { maxAgeSeconds: config.proofMaxAgeSeconds, clockSkewSeconds: config.clockSkewSeconds };
  // A proof is accepted while its iat is within [now - maxAge - skew, now + skew]: its mark must outlive that.
  const markMs = (config.proofMaxAgeSeconds + 2 * config.clockSkewSeconds) * 1000;
  return {
    window,
    replay: new ReplayGuard(proofMarksFor(backend), markMs, config.replayCacheEntries),
    nonces: new NonceIssuer(tagKey, config.nonceLifetimeSeconds * 1000),
    tokenEndpointNonce: config.tokenEndpointNonce,
  };
}

export { DPOP_SIGNING_ALGORITHMS, protectedResourceDpopMetadata } from './algorithms.js';
