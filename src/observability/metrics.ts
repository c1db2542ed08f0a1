import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { SlotCounter, SlotHistogram } from './slot-metrics.js';

/** Buckets of the request path's response times, in seconds: a cache hit's half millisecond to an upstream's 10 s. */
const RESPONSE_TIME_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Buckets of `nodejs_gc_duration_seconds`: a young-generation scavenge's tenth of a millisecond to a full collection's seconds. */
const GC_PAUSE_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 1, 5];

/**
 * Every metric tokengate exports, created once per instance on its own registry (two
 * instances in one test process do not share counts). Labels are bounded sets: route names
 * from the config, stable denial reasons, grant types.
 */
export function createMetrics() {
  const registry = new Registry();
  // Under their standard names (process_cpu_seconds_total, nodejs_heap_size_used_bytes, ...), so
  // the usual Node.js dashboards and alerts work unchanged.
  // The collector's pauses in buckets fine enough for a sidecar's: a scavenge of its young
  // generation takes a fraction of a millisecond, so the default buckets (1 ms and up) held them all in one.
  collectDefaultMetrics({ register: registry, gcDurationBuckets: GC_PAUSE_BUCKETS });
  const registers = [registry];
  return {
    registry,
    ...requestMetrics(registry),
    ...configMetrics(registers),
    ...cacheMetrics(registry, registers),
    ...storeMetrics(registers),
    ...issuerMetrics(registers),
    ...sharedSignalsMetrics(registers),
    ...listenerMetrics(registers),
  };
}

/** The request path's: requests by route and outcome, their times, the upstreams' times, the decision listener's answers. */
function requestMetrics(registry: Registry) {
  return {
    // The request path's metrics are slots (src/observability/slot-metrics.ts): one addition per request.
    gatewayRequests: new SlotCounter(
      'tokengate_gateway_requests_total',
      'Requests the gateway decided on, by route, outcome (forwarded or denied) and reason.',
      ['route', 'outcome', 'reason'],
      registry,
    ),
    gatewayDuration: new SlotHistogram(
      'tokengate_gateway_request_duration_seconds',
      'Time from request to the response head, forwarded requests included, by route.',
      ['route'],
      RESPONSE_TIME_BUCKETS,
      registry,
    ),
    requests: new SlotCounter(
      'tokengate_http_requests_total',
      'Requests answered, by listener, route (a gateway route prefix, or an issuer or admin endpoint), method and status class.',
      ['listener', 'route', 'method', 'status_class'],
      registry,
    ),
    upstreamDuration: new SlotHistogram(
      'tokengate_upstream_request_duration_seconds',
      "Time from sending a request upstream to the upstream's response head, by route and status class of the answer.",
      ['route', 'status_class'],
      RESPONSE_TIME_BUCKETS,
      registry,
    ),
    decisions: new SlotCounter(
      'tokengate_decisions_total',
      'Checks the decision listener answered for an ingress, by route, outcome (allowed or denied) and reason.',
      ['route', 'outcome', 'reason'],
      registry,
    ),
    decisionDuration: new SlotHistogram(
      'tokengate_decision_duration_seconds',
      'Time from a check request to its answer on the decision listener, by route.',
      ['route'],
      [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registry,
    ),
  };
}

/** The config in effect and its reloads, and the policies it sets: rate limits, client metadata documents. */
function configMetrics(registers: Registry[]) {
  return {
    configReloads: new Counter({
      name: 'tokengate_config_reloads_total',
      help: 'Config reloads (SIGHUP or a change of the file), by result: success, or failure (the running config stays).',
      labelNames: ['result'] as const,
      registers,
    }),
    configLastReloadSuccessful: new Gauge({
      name: 'tokengate_config_last_reload_successful',
      help: '1 when the last config reload applied (or none was tried since start), 0 when it failed and the file on disk is not the config in effect.',
      // With several workers, 0 when any worker refused the file.
      aggregator: 'min',
      registers,
    }),
    traceSpansExported: new Counter({
      name: 'tokengate_trace_spans_exported_total',
      help: 'Spans the OTLP collector accepted (tracing on).',
      registers,
    }),
    traceSpansDropped: new Counter({
      name: 'tokengate_trace_spans_dropped_total',
      help: 'Spans never exported, by reason: queue_full (the export queue was full), export_failed (the collector refused, failed or did not answer in time).',
      labelNames: ['reason'] as const,
      registers,
    }),
    rateLimited: new Counter({
      name: 'tokengate_rate_limited_total',
      help: 'Requests refused 429 by a rate limit policy, by route, policy and reason (rate_limited or quota_exceeded), on the gateway and the decision listener.',
      labelNames: ['route', 'policy', 'reason'] as const,
      registers,
    }),
    rateLimitLeases: new Counter({
      name: 'tokengate_rate_limit_leases_total',
      help: 'Leases of rate limit permits asked of the store, by policy and result: granted, exhausted (the store had none left) or failed (the store did not answer: the sidecar limits alone at its share).',
      labelNames: ['policy', 'result'] as const,
      registers,
    }),
    clientMetadataFetches: new Counter({
      name: 'tokengate_client_metadata_fetches_total',
      help: 'Client ID metadata documents fetched, by result: fetched, or why not (forbidden_address, unreachable, timeout, redirect, status, not_json, too_large, invalid, busy). No URL is a label: the set stays bounded.',
      labelNames: ['result'] as const,
      registers,
    }),
    configInfo: new Gauge({
      name: 'tokengate_config_info',
      help: 'Always 1; its hash label identifies the config in effect (secrets left out).',
      labelNames: ['hash'] as const,
      // Workers of one process load the same file: their series is one, not one per worker.
      aggregator: 'max',
      registers,
    }),
  };
}

/** The in-process token cache. */
function cacheMetrics(registry: Registry, registers: Registry[]) {
  return {
    cacheHits: new SlotCounter('tokengate_cache_hits_total', 'Token lookups answered from the in-process cache with a valid token.', [], registry),
    cacheNegativeHits: new Counter({ name: 'tokengate_cache_negative_hits_total', help: 'Token lookups answered from the cache as unknown.', registers }),
    cacheMisses: new Counter({ name: 'tokengate_cache_misses_total', help: 'Token lookups that went to the store.', registers }),
    cacheSharedMisses: new Counter({
      name: 'tokengate_cache_shared_misses_total',
      help: 'Lookups that joined a store call already in flight for the same token.',
      registers,
    }),
    cacheStaleHits: new Counter({
      name: 'tokengate_cache_stale_hits_total',
      help: 'Token lookups answered from the cache because the store failed (unreachable or timed out).',
      registers,
    }),
    cacheEvictions: new Counter({
      name: 'tokengate_cache_evictions_total',
      help: 'Entries evicted from the cache to make room, by kind (valid or unknown tokens).',
      labelNames: ['kind'] as const,
      registers,
    }),
    cacheResets: new Counter({ name: 'tokengate_cache_resets_total', help: 'Whole-cache clears after the revocation feed was interrupted.', registers }),
    cacheEntries: new Gauge({
      name: 'tokengate_cache_entries',
      help: 'Entries in the token cache, by kind (valid or unknown tokens).',
      labelNames: ['kind'] as const,
      registers,
    }),
  };
}

/** The store, its revocation feed, and the tokens refused before reaching it. */
function storeMetrics(registers: Registry[]) {
  return {
    forgedTokens: new Counter({
      name: 'tokengate_forged_tokens_total',
      help: "Presented tokens refused without a store call because their tag is not this deployment's.",
      registers,
    }),
    storeDuration: new Histogram({
      name: 'tokengate_store_request_duration_seconds',
      help: 'Latency of token store calls on the verification path, by outcome (ok or error).',
      labelNames: ['outcome'] as const,
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    }),
    // With several workers, the gauges below say 1 only when they hold for every worker.
    storeUp: new Gauge({ name: 'tokengate_store_up', help: '1 when the last store call succeeded, 0 when it failed.', aggregator: 'min', registers }),
    revocationFeedUp: new Gauge({
      name: 'tokengate_revocation_feed_up',
      help: '1 while revocations from other sidecars arrive; 0 while the subscription is down (the cache then asks the store first).',
      // With several workers, 1 only when every worker's feed is up.
      aggregator: 'min',
      registers,
    }),
    revocationMessages: new Counter({ name: 'tokengate_revocation_messages_total', help: 'Revocation messages received from the store feed.', registers }),
    revocationDelay: new Histogram({
      name: 'tokengate_revocation_delay_seconds',
      help: 'Time from a revocation being published to this instance dropping the cache entries.',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    }),
  };
}

/** The issuer: tokens issued and refused, sign-ins, authorization redirects, back-channel logouts. */
function issuerMetrics(registers: Registry[]) {
  return {
    tokensIssued: new Counter({
      name: 'tokengate_tokens_issued_total',
      help: 'Access tokens issued, by grant type.',
      labelNames: ['grant_type'] as const,
      registers,
    }),
    tokenErrors: new Counter({
      name: 'tokengate_token_errors_total',
      help: 'Token endpoint errors, by error code.',
      labelNames: ['error'] as const,
      registers,
    }),
    logins: new Counter({
      name: 'tokengate_logins_total',
      help: 'Login attempts on the authorization page, by outcome (success, failure, throttled, unavailable).',
      labelNames: ['outcome'] as const,
      registers,
    }),
    authorizationResponses: new Counter({
      name: 'tokengate_authorization_responses_total',
      help: 'Redirects from the authorization endpoint back to applications, by result (code, or the error sent: access_denied, invalid_request, invalid_scope, unsupported_response_type).',
      labelNames: ['result'] as const,
      registers,
    }),
    backchannelLogouts: new Counter({
      name: 'tokengate_backchannel_logouts_total',
      help: "Logout tokens sent to applications' back-channel logout URIs, by outcome (sent: answered 2xx; failed: refused, or every attempt failed).",
      labelNames: ['outcome'] as const,
      registers,
    }),
  };
}

/** The Shared Signals receivers (docs/continuous-access.md): `provider` is a receiver's configured name, one of a few. */
function sharedSignalsMetrics(registers: Registry[]) {
  return {
    sharedSignalsEvents: new Counter({
      name: 'tokengate_shared_signals_events_total',
      help: 'Events received in verified Security Event Tokens, by provider, type (the short name, or other) and outcome (applied, no_effect, recorded, duplicate, unknown_type, unsupported_subject, failed).',
      labelNames: ['provider', 'type', 'outcome'] as const,
      registers,
    }),
    sharedSignalsRefusals: new Counter({
      name: 'tokengate_shared_signals_refusals_total',
      help: 'Security Event Tokens refused, by provider and RFC 8935 error (invalid_request, invalid_key, invalid_issuer, invalid_audience, authentication_failed, access_denied).',
      labelNames: ['provider', 'error'] as const,
      registers,
    }),
    sharedSignalsPollLag: new Histogram({
      name: 'tokengate_shared_signals_poll_lag_seconds',
      help: "Time from a polled event's iat to its application, by provider.",
      labelNames: ['provider'] as const,
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
      registers,
    }),
    sharedSignalsPolls: new Counter({
      name: 'tokengate_shared_signals_polls_total',
      help: 'Polls of a transmitter, by provider and result (answered, failed).',
      labelNames: ['provider', 'result'] as const,
      registers,
    }),
  };
}

/** What every listener does below the routes: its connections and the answers the HTTP layer gives itself. */
function listenerMetrics(registers: Registry[]) {
  return {
    openConnections: new Gauge({
      name: 'tokengate_open_connections',
      help: 'Connections open on each listener (public, ops).',
      labelNames: ['listener'] as const,
      registers,
    }),
    refusedConnections: new Counter({
      name: 'tokengate_refused_connections_total',
      help: 'Connections answered and closed unread because a connection limit was reached, by listener and reason (max_connections, max_connections_per_address).',
      labelNames: ['listener', 'reason'] as const,
      registers,
    }),
    clientErrors: new Counter({
      name: 'tokengate_client_errors_total',
      help: 'Requests the HTTP layer answered before any route, then closed their connection, by listener and reason (request_timeout, headers_too_large, malformed, connect).',
      labelNames: ['listener', 'reason'] as const,
      registers,
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
