import type { Logger } from 'pino';
import { isMetadataClientId } from './client-metadata/client-id.js';
import type { ClientMetadata } from './client-metadata/index.js';
import type { CacheConfig, Config } from './config/schema.js';
import { createDpop, type Dpop } from './dpop/index.js';
import { IdentityProviders } from './identity-providers/index.js';
import { SharedSignals } from './shared-signals/index.js';
import type { SignedIdentity } from './identity/index.js';
import type { OpenIdConnect } from './openid/index.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import { RequestLog } from './observability/requests.js';
import { leasesFor } from './ratelimit/leases.js';
import { RateLimiter } from './ratelimit/limiter.js';
import { cached, type CachedTokens } from './store/cached.js';
import { withTokens, type Store } from './store/store.js';
import { createTokenMinter, decodeTagKey, generateTagKey, type TokenMinter } from './token/token-value.js';
import { startTracing, type Tracing } from './tracing/index.js';

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
  /** The identity providers trusted for identity assertions (`identityProviders`, reloadable), and their assertions' single-use marks. */
  readonly identityProviders: IdentityProviders;
  /** The Shared Signals receivers of the providers that name a transmitter (reloadable with them): events that end their subjects' access. */
  readonly sharedSignals: SharedSignals;
  /** Which completed requests get an access log line (`logging.requests`). */
  readonly requestLog: RequestLog;
  /** OpenTelemetry traces (`tracing`); null when off, and then none of it is loaded. */
  readonly tracing: Tracing | null;
  /** The signing keys and the signer of identity assertions (`signedIdentity`); null unless `signedIdentity.enabled`. */
  readonly identity: SignedIdentity | null;
  /** The ID token keys, their signing and verifying (`openidConnect`); null unless `openidConnect.enabled`. */
  readonly openid: OpenIdConnect | null;
}

export interface CreatedContext {
  readonly context: TokengateContext;
  /** The token cache a cache config gives (null when off), over the opened store's tokens: a reload swaps it in. */
  cacheFor(settings: CacheConfig): CachedTokens | null;
  /** The opened store, its tokens read through `tokenCache` when there is one: the context's `store` with that cache. */
  readThrough(tokenCache: CachedTokens | null): Store;
}

/**
 * The context of one instance over an opened store. `verifiesTokens`: only the public listener
 * verifies tokens at speed, so only a process that serves it keeps a token cache (a primary's
 * admin API reads the store).
 */
export async function createContext(config: Readonly<Config>, store: Store, log: Logger, verifiesTokens: boolean): Promise<CreatedContext> {
  const tagKey = config.issuer.tokenTagKey !== '' ? config.issuer.tokenTagKey : await store.secrets.getOrCreate('token-tag-key', generateTagKey());
  const tagKeyBytes = decodeTagKey(tagKey);
  const metrics = createMetrics();
  // The store answered when it was opened (openStore pings it, and a store a caller passes in is its own).
  metrics.storeUp.set(1);
  const cacheFor = (settings: CacheConfig): CachedTokens | null => (settings.enabled && verifiesTokens ? cached(store.tokens, settings, metrics) : null);
  const readThrough = (tokenCache: CachedTokens | null): Store => (tokenCache === null ? store : withTokens(store, tokenCache));
  const cache = cacheFor(config.cache);
  // Loaded only when on: a deployment without it never holds its code.
  const clientMetadata = config.clientMetadataDocuments.enabled
    ? (await import('./client-metadata/index.js')).createClientMetadata(config.clientMetadataDocuments, config.issuer, store.backend, metrics, log)
    : null;
  // Every process that serves requests exports its own spans (each worker of server.workers).
  const tracing = verifiesTokens
    ? await startTracing(config.tracing, process.env, { exported: metrics.traceSpansExported, dropped: metrics.traceSpansDropped }, log)
    : null;
  // Loaded only when on, like the client metadata documents.
  const identity = config.signedIdentity.enabled
    ? await (await import('./identity/index.js')).createSignedIdentity(config, store.backend, tagKeyBytes, log, verifiesTokens)
    : null;
  const openid = config.openidConnect.enabled
    ? await (await import('./openid/index.js')).createOpenIdConnect(config, store.backend, tagKeyBytes, log, verifiesTokens)
    : null;
  const identityProviders = new IdentityProviders(config.identityProviders, store.backend, log);
  const context: TokengateContext = {
    config,
    store: readThrough(cache),
    cache,
    minter: createTokenMinter(tagKeyBytes),
    dpop: createDpop(config.dpop, store.backend, tagKeyBytes),
    metrics,
    log,
    rateLimiter: new RateLimiter(config, leasesFor(store.backend), (clientId) => applicationTier(context, clientId), metrics, log),
    clientMetadata,
    identityProviders,
    sharedSignals: new SharedSignals(config.identityProviders, {
      backend: store.backend,
      tokens: () => context.store.tokens,
      identityProviders,
      metrics,
      log,
      tracing,
      issuerUrl: config.issuer.issuerUrl,
      // Polling and stream set-up are done by processes that serve requests (each worker of server.workers), one at a time.
      runsStreamWork: verifiesTokens,
    }),
    requestLog: new RequestLog(config.logging.requests),
    tracing,
    identity,
    openid,
  };
  return { context, cacheFor, readThrough };
}

/** An application's rate limit tier: a registered one's own, or a metadata document client's from its entry of the list. */
async function applicationTier(context: TokengateContext, clientId: string): Promise<string | null> {
  if (context.clientMetadata !== null && isMetadataClientId(clientId)) return context.clientMetadata.tier(clientId);
  return (await context.store.applications.get(clientId))?.rateLimit ?? null;
}
