import type { Logger } from 'pino';
import type { ClientMetadata } from './client-metadata/index.js';
import type { Config } from './config/schema.js';
import type { Dpop } from './dpop/index.js';
import type { Metrics } from './observability/metrics.js';
import type { RateLimiter } from './ratelimit/limiter.js';
import type { RequestLog } from './observability/requests.js';
import type { CachedTokens } from './store/cached.js';
import type { Store } from './store/store.js';
import type { TokenMinter } from './token/token-value.js';
import type { Tracing } from './tracing/index.js';

/**
 * What every part of one tokengate instance shares: built once by buildTokengate(). A reload
 * (Tokengate.reload) replaces `config`, `store` and `cache` whole, between two requests; read
 * them when they are needed, not once at start.
 */
export interface TokengateContext {
  /** The config in effect: the resources, routes, rate limit policies, cache and logging settings of the last reload, the rest as started. */
  config: Readonly<Config>;
  /** The store as the gateway should read it (its tokens through the cache when the cache is on). */
  store: Store;
  /** The token cache itself when it is on (the gateway asks it first, before the tag check); null otherwise. */
  cache: CachedTokens | null;
  readonly minter: TokenMinter;
  /** DPoP proof checking: window, replay marks in the shared store, token endpoint nonces (config `dpop`, bound at start). */
  readonly dpop: Dpop;
  readonly metrics: Metrics;
  readonly log: Logger;
  /** The rate limit policies, the budgets this sidecar holds, and the applications' tiers. */
  readonly rateLimiter: RateLimiter;
  /** Clients whose client_id is a metadata document URL, on the operator's list; null unless `clientMetadataDocuments.enabled`. */
  readonly clientMetadata: ClientMetadata | null;
  /** Which completed requests get an access log line (`logging.requests`). */
  readonly requestLog: RequestLog;
  /** OpenTelemetry traces (`tracing`); null when off, and then none of it is loaded. */
  readonly tracing: Tracing | null;
}
