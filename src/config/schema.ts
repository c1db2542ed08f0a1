import { Type, type Static, type TSchema } from '@sinclair/typebox';

/**
 * The whole configuration, types and validation from one source. Every object is closed
 * (`additionalProperties: false`): a misspelt key is an error, not a silently ignored check.
 * Defaults live here so that the shipped config files and the README agree with the code.
 */
const closed = <T extends Parameters<typeof Type.Object>[0]>(properties: T, description?: string) =>
  Type.Object(properties, { additionalProperties: false, default: {}, ...(description ? { description } : {}) });

const Seconds = (defaultValue: number, description: string, minimum = 0) => Type.Integer({ minimum, default: defaultValue, description });
/** Node's timers hold a signed 32-bit delay: a longer one fires at once instead (with a warning). */
export const LONGEST_TIMER_MS = 2_147_483_647;
const Milliseconds = (defaultValue: number, description: string, minimum = 1) =>
  Type.Integer({ minimum, maximum: LONGEST_TIMER_MS, default: defaultValue, description });
/** The DPoP replay cache (lru-cache) allocates its index arrays for the whole capacity at start: a billion entries is an out-of-memory crash, not a cache. */
const MOST_CACHE_ENTRIES = 10_000_000;
const oneOf = <const T extends readonly string[]>(values: T, defaultValue: T[number], description: string) =>
  Type.Union(
    values.map((value) => Type.Literal(value)),
    { default: defaultValue, description },
  ) as unknown as TSchema & { static: T[number] };

export const ServerSchema = closed({
  host: Type.String({ minLength: 1, default: '0.0.0.0', description: 'Address the public listener (issuer and gateway) binds to.' }),
  port: Type.Integer({ minimum: 0, maximum: 65535, default: 8080, description: 'Port of the public listener; 0 picks a free one.' }),
  trustProxy: Type.Union([Type.Boolean(), Type.Integer({ minimum: 0, maximum: 32 }), Type.Array(Type.String({ minLength: 1 }), { minItems: 1 })], {
    default: false,
    description:
      'The proxies whose X-Forwarded-For, -Proto and -Host tokengate believes: their addresses and CIDR ranges (`[10.0.0.0/8]`; `loopback`, `linklocal`, `uniquelocal` name those ranges), or the number of proxies every request passes. `false`: none. `true` is refused: it would take the address the client wrote (docs/trust-model.md#trusted-proxies).',
  }),
  bodyLimit: Type.Integer({ minimum: 1024, default: 1_048_576, description: 'Largest request body accepted, in bytes.' }),
  maxHeaderSize: Type.Integer({ minimum: 1024, default: 16_384, description: 'Largest request head accepted, in bytes (larger: 431).' }),
  maxHeaders: Type.Integer({
    minimum: 16,
    maximum: 1000,
    default: 100,
    description: 'Most header fields a gateway request may carry (more: 431), so that no upstream drops the identity headers to stay under its own limit.',
  }),
  requestTimeoutMs: Milliseconds(
    60_000,
    'Time a client has to send a whole request, head and body; past it: 408, and the connection closes within a tenth of this time more (1 s at most).',
    1_000,
  ),
  maxConnections: Type.Integer({
    minimum: 1,
    default: 10_000,
    description: 'Most connections the public listener holds open at once; one more is answered 503 and closed.',
  }),
  maxConnectionsPerAddress: Type.Integer({
    minimum: 0,
    default: 0,
    description:
      'Most connections open at once from one client address (IPv6: one /64 network); one more is answered 429 and closed. 0: no limit. Leave 0 behind a load balancer: every connection then comes from its address.',
  }),
  shutdownGraceMs: Milliseconds(10_000, 'On SIGTERM/SIGINT, how long in-flight requests may take before the process exits anyway.'),
  workers: Type.Union([Type.Integer({ minimum: 1, maximum: 256 }), Type.Literal('auto')], {
    default: 1,
    description:
      'Processes serving the public listener (node:cluster): a number, or `auto` for the CPUs this process may use (cgroup limits included). More than 1 needs a shared store (redis).',
  }),
});

export const AdminSchema = closed({
  host: Type.String({ minLength: 1, default: '127.0.0.1', description: 'Address of the ops listener (/healthz, /readyz, /metrics, admin API).' }),
  port: Type.Integer({ minimum: 0, maximum: 65535, default: 9090, description: 'Port of the ops listener; 0 picks a free one.' }),
  token: Type.String({
    default: '',
    description:
      'Bearer token the admin API requires. Required when `host` is not a loopback address. Give it through the environment: `${TOKENGATE_ADMIN_TOKEN}`. Empty: `serve` makes one at its first start and keeps it in `$XDG_STATE_HOME/tokengate/admin-token` (mode 0600), where the CLI reads it.',
  }),
  requestTimeoutMs: Milliseconds(
    10_000,
    'Time a client of the ops listener has to send a whole request, head and body; past it: 408, and the connection closes within a tenth of this time more (1 s at most).',
    1_000,
  ),
  maxConnections: Type.Integer({
    minimum: 1,
    default: 100,
    description: 'Most connections the ops listener holds open at once; one more is answered 503 and closed.',
  }),
});

export const StoreSchema = closed({
  driver: oneOf(['memory', 'redis'] as const, 'memory', '`memory`: in-process, for a single instance; `redis`: shared by every sidecar.'),
  url: Type.String({
    default: 'redis://127.0.0.1:6379',
    description:
      'One Redis server (`redis://`, `rediss://` for TLS; user and password in the URL), used when driver is `redis` and neither `sentinel` nor `cluster` is set.',
  }),
  sentinel: closed({
    sentinels: Type.Array(Type.String(), {
      default: [],
      description: 'Redis Sentinel: the sentinels (`host:port`) that name the master. Setting them selects Sentinel.',
    }),
    masterName: Type.String({ default: '', description: 'With `sentinels`: the name the sentinels monitor the master under.' }),
    password: Type.String({ default: '', description: "With `sentinels`: the sentinels' own password (their `requirepass`), from the environment." }),
  }),
  cluster: closed({
    nodes: Type.Array(Type.String(), {
      default: [],
      description: 'Redis Cluster: some of its nodes (`host:port`), from which the rest is discovered. Setting them selects Cluster.',
    }),
    natMap: Type.Record(Type.String(), Type.String(), {
      default: {},
      description:
        'With `nodes`: node addresses as the cluster announces them (`host:port`) mapped to where tokengate reaches them, when the two differ (NAT, port forwarding).',
    }),
    scaleReads: oneOf(
      ['master', 'slave', 'all'] as const,
      'master',
      'With `nodes`: which nodes answer reads. `slave` or `all` read from replicas, which may lag: see docs/store.md before changing it.',
    ),
  }),
  username: Type.String({ default: '', description: 'With `sentinel` or `cluster`: the ACL user of the Redis servers (`store.url` carries its own).' }),
  password: Type.String({
    default: '',
    description: 'With `sentinel` or `cluster`: the password of the Redis servers, from the environment (`store.url` carries its own).',
  }),
  tls: closed({
    enabled: Type.Boolean({
      default: false,
      description: 'TLS to every Redis server and sentinel. With `url`, a `rediss://` URL turns it on as well.',
    }),
    caFile: Type.String({ default: '', description: "With TLS: a PEM file of the certificate authorities to trust instead of the system's." }),
  }),
  keyPrefix: Type.String({ default: 'tokengate:', description: 'Prefix of every Redis key and channel, so several deployments can share one Redis.' }),
  commandTimeoutMs: Milliseconds(500, 'A Redis command not answered in this time fails (the gateway then answers 503), so an outage never hangs a request.'),
  connectTimeoutMs: Milliseconds(2_000, 'Time allowed to connect to Redis.'),
  startupTimeoutMs: Milliseconds(
    30_000,
    'How long `serve` waits for the store to answer at start (Redis often starts after tokengate), retrying, before it exits with status 1.',
  ),
  waitForReplicas: Type.Optional(
    Type.Integer({
      minimum: 0,
      description:
        'Replicas that must hold a write (Redis `WAIT`) before tokengate relies on it, so a failover loses no token, revocation or spent code it acknowledged. Unset: 0 with `url`, 1 with `sentinel` or `cluster`.',
    }),
  ),
  lostReplicaWaitMs: Milliseconds(
    300_000,
    'With `waitForReplicas`: how long writes on a master still wait for a replica it lost (503 meanwhile, unless the replica is back in sync), since Redis may still promote that replica without the writes it missed. At least `down-after-milliseconds` × 10 with Sentinel, `cluster-node-timeout` × `cluster-replica-validity-factor` + `repl-ping-replica-period` with a Cluster.',
  ),
});

export const UserSourceSchema = closed({
  source: oneOf(
    ['store', 'http'] as const,
    'store',
    '`store`: users created by the operator (`tokengate users create`); `http`: the ticketing service checks e-mail and password.',
  ),
  url: Type.String({
    default: '',
    description: 'With source `http`: the URL that receives `POST {"email","password"}` and answers 200 `{"id": ...}` for valid credentials.',
  }),
  timeoutMs: Milliseconds(3_000, 'With source `http`: time allowed for the credential check.'),
});

export const IssuerSchema = closed({
  enabled: Type.Boolean({ default: true, description: 'Serve the OAuth endpoints on the public listener. A pure gateway sidecar sets false.' }),
  issuerUrl: Type.String({
    default: '',
    description:
      'Public base URL of the issuer, as clients reach it (metadata `issuer`, endpoint URLs). Empty: `http://<server.host>:<server.port>`, with `localhost` for a wildcard or loopback host.',
  }),
  tokenTagKey: Type.String({
    default: '',
    description: 'base64url key (32+ bytes) that tags minted tokens. Empty: created once and shared through the store.',
  }),
  accessTokenTtl: Seconds(7200, 'Access token lifetime in seconds (`expires_in`).', 1),
  refreshTokenTtl: Seconds(2_592_000, 'Refresh token lifetime in seconds.', 1),
  authorizationCodeTtl: Seconds(600, 'Authorization code lifetime in seconds.', 1),
  sessionTtl: Seconds(3600, 'Login session lifetime on the authorization page, in seconds.', 1),
  scopes: Type.Array(Type.String(), { default: ['public'], uniqueItems: true, description: 'Scopes this issuer knows.' }),
  defaultScopes: Type.Array(Type.String(), { default: ['public'], uniqueItems: true, description: 'Scopes granted when a request names none.' }),
  serviceName: Type.String({
    minLength: 1,
    default: 'Ticketing',
    description: 'Name of the service shown on the sign-in and consent pages ("Sign in to ...").',
  }),
  scopeDescriptions: Type.Record(Type.String(), Type.String({ minLength: 1 }), {
    default: { public: 'See your profile and manage your tickets' },
    description: 'What each scope lets an application do, in words, listed on the consent and account pages. A scope without an entry is shown by its name.',
  }),
  users: UserSourceSchema,
  loginThrottle: closed({
    maxAttemptsPerAccount: Type.Integer({ minimum: 1, default: 5, description: 'Failed logins per account in one window before the account is throttled.' }),
    maxAttemptsPerAddress: Type.Integer({
      minimum: 1,
      default: 20,
      description: 'Failed logins per client address in one window before the address is throttled.',
    }),
    windowSeconds: Seconds(900, 'Window of the login throttle, in seconds.', 1),
  }),
});

export const CacheSchema = closed({
  enabled: Type.Boolean({ default: true, description: 'Keep verified tokens in an in-process LRU cache in front of the store.' }),
  maxEntries: Type.Integer({
    minimum: 1,
    maximum: MOST_CACHE_ENTRIES,
    default: 100_000,
    description: 'Most valid tokens kept in the cache; the least recently used goes first.',
  }),
  ttlSeconds: Seconds(60, 'Longest time a token stays cached (never beyond its own expiry). 0: valid tokens are not cached.'),
  negativeTtlSeconds: Seconds(
    5,
    'How long an unknown token is remembered as unknown; also the longest a token first presented before the store had it stays refused on another sidecar. 0: not remembered.',
  ),
  negativeMaxEntries: Type.Integer({
    minimum: 1,
    maximum: MOST_CACHE_ENTRIES,
    default: 10_000,
    description: 'Most unknown tokens remembered, apart from the valid ones: a flood of unknown tokens never evicts a valid one.',
  }),
  staleIfErrorSeconds: Seconds(
    0,
    'While the store is unreachable, keep honouring cached tokens this long past their cache life (never past their own expiry). 0: off.',
  ),
});

export const IdentityHeadersSchema = closed({
  userId: Type.String({ default: 'x-auth-user-id', description: 'Header carrying the user id to the upstream (user tokens).' }),
  clientId: Type.String({ default: 'x-auth-client-id', description: 'Header carrying the client id to the upstream.' }),
  scope: Type.String({ default: 'x-auth-scope', description: 'Header carrying the granted scopes, space separated.' }),
  tokenKind: Type.String({ default: 'x-auth-token-kind', description: 'Header carrying `user` or `application`.' }),
  actorClientId: Type.String({
    default: 'x-auth-actor-client-id',
    description: 'Header carrying the client id of the service that acts for the user, on a token from a token exchange (RFC 8693).',
  }),
});

export const GatewaySchema = closed({
  realm: Type.String({ default: 'tokengate', description: 'Realm in `WWW-Authenticate: Bearer realm="..."`.' }),
  identityHeaders: IdentityHeadersSchema,
  requestIdHeader: Type.String({
    default: 'x-request-id',
    description: 'Request id header: kept from the client when present, generated otherwise, forwarded upstream.',
  }),
});

export const DecisionsSchema = closed({
  enabled: Type.Boolean({
    default: false,
    description:
      "Answer an ingress's token checks (nginx auth_request, Envoy ext_authz, Traefik ForwardAuth, Caddy forward_auth) on a listener of their own, with the gateway's routes and checks but no forwarding.",
  }),
  host: Type.String({ minLength: 1, default: '127.0.0.1', description: 'Address the decision listener binds to; only the ingress should reach it.' }),
  port: Type.Integer({ minimum: 0, maximum: 65535, default: 9191, description: 'Port of the decision listener; 0 picks a free one.' }),
  cacheSeconds: Seconds(
    0,
    'The `decisionCacheSeconds` of every route that sets none, except routes with a `rateLimit` or `dpop: required`, which an ingress never caches. 0: an ingress asks about every request (docs/ingress.md#decisions-an-ingress-may-cache).',
  ),
});

export const DpopSchema = closed({
  proofMaxAgeSeconds: Seconds(
    60,
    "How old a DPoP proof may be (its `iat`), at the token endpoint and on every route; also how long each proof's `jti` is remembered to refuse a replay on any sidecar.",
    1,
  ),
  clockSkewSeconds: Seconds(5, "How far in the future a DPoP proof's `iat` may be, for clients whose clock runs ahead."),
  tokenEndpointNonce: Type.Boolean({
    default: true,
    description:
      'The token endpoint requires a server nonce in DPoP proofs (RFC 9449 section 8): a proof without a fresh one is answered 400 `use_dpop_nonce` with a `DPoP-Nonce` to retry with.',
  }),
  nonceLifetimeSeconds: Seconds(300, 'How long a `DPoP-Nonce` the token endpoint hands out stays accepted (between this and twice this).', 10),
  replayCacheEntries: Type.Integer({
    minimum: 0,
    maximum: MOST_CACHE_ENTRIES,
    default: 10_000,
    description:
      'Proof `jti`s each process remembers itself, to refuse a replay it saw without asking the store. 0: every proof asks the store. The store is asked about every proof seen the first time either way.',
  }),
});

export const ClientMetadataAllowSchema = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      description:
        'An https origin (`https://claude.ai`: every client id on it) or URL prefix ending in `/` (`https://apps.example/clients/`: every client id under it), or one client id exactly.',
    }),
    scopes: Type.Optional(Type.Array(Type.String(), { uniqueItems: true, description: 'Scopes its clients may be granted. Unset: `issuer.defaultScopes`.' })),
    resources: Type.Optional(
      Type.Array(Type.String(), {
        uniqueItems: true,
        description: 'Resource identifiers its clients may get tokens for. Unset or empty: every configured resource.',
      }),
    ),
    dpop: Type.Optional(oneOf(['required', 'allowed'] as const, 'allowed', '`required`: its clients get DPoP-bound tokens only.')),
    rateLimit: Type.Optional(
      Type.String({ description: "The `rateLimits` policy that meters its clients instead of their routes' own (their tier). Unset: the routes' own." }),
    ),
  },
  { additionalProperties: false },
);

/** Signature algorithms an identity provider may sign with: asymmetric only (never `none`, never HMAC, whose key would be the published one). */
export const IDENTITY_ASSERTION_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'] as const;

/**
 * A provider's Shared Signals transmitter (SSF 1.0): the Security Event Tokens (CAEP, RISC) it
 * sends and how they reach tokengate (docs/continuous-access.md).
 */
export const SharedSignalsSchema = Type.Object(
  {
    name: Type.String({
      pattern: '^[A-Za-z0-9_-]{1,64}$',
      description:
        "The receiver's name (1 to 64 letters, digits, `-` and `_`): its push endpoint is `/ssf/events/<name>` on the public listener, and the `provider` label of its metrics.",
    }),
    configurationUrl: Type.String({
      minLength: 1,
      description: "The transmitter's configuration metadata, its `/.well-known/ssf-configuration` URL (https, fetched like the key set, `caFile` included).",
    }),
    delivery: oneOf(
      ['push', 'poll'] as const,
      'push',
      '`push` (RFC 8935): the transmitter POSTs each event to `/ssf/events/<name>`; `poll` (RFC 8936): one sidecar at a time polls the transmitter and acknowledges what it applied.',
    ),
    audience: Type.String({ default: '', description: 'The `aud` its events must name. Empty: `issuer.issuerUrl`.' }),
    pushAuthorization: Type.String({
      default: '',
      description:
        'push: the whole `Authorization` header the transmitter must send (`Bearer <secret>`, 16 characters or more); given to the transmitter by the operator, or by tokengate when it creates the stream. Give it through the environment; never logged.',
    }),
    pushEndpointUrl: Type.String({
      default: '',
      description:
        'push, on a stream tokengate creates: the URL the transmitter is told to push to. Empty: `issuer.issuerUrl` followed by `/ssf/events/<name>`.',
    }),
    transmitterAuthorization: Type.String({
      default: '',
      description:
        'The whole `Authorization` header tokengate sends the transmitter, to configure its stream (create it, read it and its status, ask for a verification) and to poll. Empty: a stream the operator made (`streamId`), which tokengate only receives. Give it through the environment; never logged.',
    }),
    streamId: Type.String({
      default: '',
      description:
        'A stream the operator made at the transmitter. Empty: tokengate creates one through the configuration endpoint (needs `transmitterAuthorization`) and keeps its id in the store.',
    }),
    pollUrl: Type.String({
      default: '',
      description:
        "poll, on a stream the operator made: its poll endpoint (https). Empty: the stream's own, read from the transmitter (needs `transmitterAuthorization`).",
    }),
    events: Type.Array(Type.String({ minLength: 1 }), {
      default: [],
      uniqueItems: true,
      description: 'The event types asked for when tokengate creates the stream. Empty: every type tokengate acts on.',
    }),
    narrowingClaims: Type.Array(Type.String({ minLength: 1 }), {
      default: ['scope', 'resource', 'groups', 'roles', 'entitlements'],
      uniqueItems: true,
      description: "Claims whose change (CAEP `token-claims-change`) revokes the subject's tokens; a change of the provider's `userClaim` always does.",
    }),
    maxEventAgeSeconds: Seconds(86_400, 'Oldest event accepted (its `iat`); each is remembered as long, so one delivered again is applied once.', 60),
    pollIntervalMs: Milliseconds(1_000, 'poll: the wait after an answer without events; after a failure the wait doubles, up to a minute.', 50),
    maxEvents: Type.Integer({ minimum: 1, maximum: 1_000, default: 100, description: 'poll: most events asked for in one poll.' }),
    statusIntervalSeconds: Seconds(
      300,
      "How often the stream's status is read again (with `transmitterAuthorization`); a paused or disabled stream is not polled meanwhile.",
      1,
    ),
  },
  { additionalProperties: false },
);

export const IdentityProviderSchema = Type.Object(
  {
    issuer: Type.String({ minLength: 1, description: 'The `iss` of its identity assertions (an https URL), exactly as the provider writes it.' }),
    jwksUrl: Type.String({ minLength: 1, description: 'Where its signing keys are published (an https URL, a JSON Web Key Set).' }),
    caFile: Type.String({
      default: '',
      description: "A PEM file of the certificate authorities to trust for the key set instead of the system's (a private provider, tests).",
    }),
    algorithms: Type.Array(Type.String(), {
      default: ['RS256', 'ES256'],
      minItems: 1,
      uniqueItems: true,
      description: `The signature algorithms accepted from it, among ${IDENTITY_ASSERTION_ALGORITHMS.join(', ')} (never \`none\`, never HMAC).`,
    }),
    userClaim: Type.String({
      minLength: 1,
      default: 'email',
      description: "The assertion's claim holding the e-mail address of the tokengate user (`tokengate users create`) its subject is.",
    }),
    jitUsers: Type.Boolean({
      default: false,
      description: 'Create the user (without a password) when no user has that e-mail address; off: such an assertion is refused.',
    }),
    maxAssertionLifetimeSeconds: Seconds(300, 'Longest lifetime (`exp` - `iat`) of an assertion accepted from it.', 1),
    keyRefreshCooldownSeconds: Seconds(
      30,
      'Shortest time between two fetches of its key set caused by an unknown `kid` (a fetch its caching headers call for is not held back).',
    ),
    sharedSignals: Type.Optional(SharedSignalsSchema),
  },
  { additionalProperties: false },
);

export const ClientMetadataDocumentsSchema = closed({
  enabled: Type.Boolean({
    default: false,
    description:
      'Accept an https URL as `client_id` when the operator allows it (`allow`, or `tokengate client-metadata allow`): tokengate fetches the client ID metadata document it names and treats its client as a public one (docs/client-metadata.md).',
  }),
  allow: Type.Array(ClientMetadataAllowSchema, {
    default: [],
    description: 'The documents accepted, beside those the operator allows through the admin API; nothing else is ever fetched.',
  }),
  fetchTimeoutMs: Milliseconds(
    5_000,
    'Time a document has to arrive whole (connection, answer and body); past it the fetch is cut and the sign-in refused.',
    100,
  ),
  maxDocumentBytes: Type.Integer({ minimum: 512, default: 5_120, description: 'Largest document read; a larger one is cut off and refused.' }),
  maxConcurrentFetches: Type.Integer({
    minimum: 1,
    default: 16,
    description: 'Most documents one process fetches at once; a sign-in that would need one more gets the error page rather than waiting in a queue.',
  }),
  minCacheSeconds: Seconds(60, 'Shortest time a fetched document is kept (shared by every sidecar through the store), whatever its caching headers say.', 1),
  maxCacheSeconds: Seconds(3_600, 'Longest time a fetched document is kept before it is fetched again, whatever its caching headers say.', 1),
  allowPrivateNetworks: Type.Array(Type.String(), {
    default: [],
    description:
      'Networks (CIDR, e.g. `10.20.0.0/16`) a document host may resolve to although they are private, loopback or link-local: for tests and private deployments only. Empty: only public addresses.',
  }),
  caFile: Type.String({
    default: '',
    description: "A PEM file of the certificate authorities to trust for documents instead of the system's (a private deployment's own CA, tests).",
  }),
  nameServers: Type.Array(Type.String(), {
    default: [],
    description:
      "DNS servers (an IP address, with `:port` when not 53) that resolve document hosts instead of the system's resolver (a split-horizon deployment, tests).",
  }),
});

export const SignedIdentitySchema = closed({
  enabled: Type.Boolean({
    default: false,
    description:
      'Keep signing keys in the store and publish them at `/.well-known/tokengate-identity-jwks.json`, so that routes with `signedIdentity` pass the resource service a signed identity it can verify (docs/gateway.md#signed-identity).',
  }),
  algorithm: oneOf(
    ['ES256', 'EdDSA'] as const,
    'ES256',
    'Signature algorithm of new keys: `ES256` (ECDSA P-256) or `EdDSA` (Ed25519). Keys already made keep theirs.',
  ),
  header: Type.String({
    minLength: 1,
    default: 'x-tokengate-identity',
    description: "Header carrying the signed identity (a compact JWT) to the upstream and in the decision listener's answers.",
  }),
  audience: Type.String({
    default: '',
    description:
      'The `aud` of assertions on routes with neither `signedIdentityAudience` nor `resource`. Empty: such a route cannot ask for a signed identity.',
  }),
  lifetimeSeconds: Type.Integer({
    minimum: 10,
    maximum: 3600,
    default: 120,
    description: "How long an assertion is valid (its `exp`; never past the token's own expiry). It is signed again when a quarter of this is left.",
  }),
  maxBytes: Type.Integer({
    minimum: 256,
    maximum: 8192,
    default: 1024,
    description: "Largest assertion allowed: a config whose routes could produce a larger one is refused (upstream servers limit a header's size).",
  }),
  jwksMaxAgeSeconds: Seconds(
    300,
    'How long resource services may keep the JWKS (its `Cache-Control: max-age`); a new key is published longer than this before it signs.',
    1,
  ),
  keyRefreshSeconds: Seconds(
    10,
    'How often each sidecar reads the signing keys from the store again (and rotates them when `rotationIntervalSeconds` is due).',
    1,
  ),
  rotationIntervalSeconds: Seconds(
    2_592_000,
    'Make a new signing key when the newest is this old (30 days by default). 0: only by hand (`tokengate keys rotate`).',
  ),
  keyEncryptionKey: Type.String({
    default: '',
    description:
      'base64url key of 32 bytes that encrypts the private signing keys in the store. Give it through the environment. Empty: derived from the token tag key (then a copy of the store holds both, unless `issuer.tokenTagKey` is set outside it).',
  }),
});

export const OpenIdConnectSchema = closed({
  enabled: Type.Boolean({
    default: false,
    description:
      'OpenID Connect on the authorization code flow (docs/openid-connect.md): the `openid`, `email` and `profile` scopes, ID tokens, UserInfo at `/oauth/userinfo`, discovery at `/.well-known/openid-configuration` and the ID token keys at `/.well-known/jwks.json`. Off: none of these exist, and no signing keys are made.',
  }),
  algorithms: Type.Array(Type.Union([Type.Literal('RS256'), Type.Literal('ES256')]), {
    minItems: 1,
    uniqueItems: true,
    default: ['RS256', 'ES256'],
    description:
      "The algorithms ID tokens may be signed with, a key set of its own in the store for each: `RS256` (OpenID Connect's mandatory one, every application's default; required) and `ES256`, which an application chooses with `id_token_signed_response_alg`.",
  }),
  idTokenLifetimeSeconds: Type.Integer({
    minimum: 10,
    maximum: 86_400,
    default: 3600,
    description: 'How long an ID token is valid (its `exp`).',
  }),
  jwksMaxAgeSeconds: Seconds(
    300,
    'How long applications may keep the JWKS at `/.well-known/jwks.json` (its `Cache-Control: max-age`); a new key is published longer than this before it signs, and at least 60 s (openid-client fetches the key set again for an unknown key only once its copy is 60 s old).',
    1,
  ),
  keyRefreshSeconds: Seconds(
    10,
    'How often each sidecar reads the ID token keys from the store again (and rotates them when `rotationIntervalSeconds` is due).',
    1,
  ),
  rotationIntervalSeconds: Seconds(
    2_592_000,
    'Make a new ID token key (of each algorithm) when the newest is this old (30 days by default). 0: only by hand (`tokengate openid-keys rotate`).',
  ),
  keyEncryptionKey: Type.String({
    default: '',
    description:
      'base64url key of 32 bytes that encrypts the private ID token keys in the store. Give it through the environment. Empty: derived from the token tag key (then a copy of the store holds both, unless `issuer.tokenTagKey` is set outside it).',
  }),
});

export const RouteSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, description: 'Path prefix, e.g. `/api/public/tickets`; matches the prefix itself and everything below it.' }),
    methods: Type.Array(Type.String({ pattern: '^[A-Z]+$' }), {
      minItems: 1,
      uniqueItems: true,
      default: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      description: 'HTTP methods the route accepts.',
    }),
    token: oneOf(['user', 'application', 'any'] as const, 'user', 'Kind of token the route accepts.'),
    scopes: Type.Array(Type.String(), { default: [], uniqueItems: true, description: 'Scopes the token must all hold.' }),
    upstream: Type.Optional(
      Type.String({
        description:
          'Upstream base URL every accepted token goes to. Optional while `decisions.enabled`: a route without upstreams is only decided for an ingress (the gateway answers it 404).',
      }),
    ),
    upstreams: Type.Optional(
      Type.Object(
        {
          user: Type.Optional(Type.String({ description: 'Upstream for user tokens.' })),
          application: Type.Optional(Type.String({ description: 'Upstream for application tokens.' })),
        },
        { additionalProperties: false, description: 'Per token kind upstreams, instead of `upstream`.' },
      ),
    ),
    timeoutMs: Milliseconds(30_000, 'Time the upstream has to send its response head (504 after it), and then each part of its body.'),
    streamIdleTimeoutMs: Milliseconds(
      300_000,
      "For a request whose Accept names `text/event-stream` (Server-Sent Events, an MCP client's streams): how long the upstream's body may go without a chunk before the gateway ends it. The head still comes within `timeoutMs`.",
    ),
    allowQueryToken: Type.Boolean({ default: true, description: 'Accept `access_token` in the query string of GET requests.' }),
    allowBodyToken: Type.Boolean({ default: true, description: 'Accept `access_token` in a form or JSON body of POST requests.' }),
    dpop: oneOf(
      ['required', 'allowed'] as const,
      'allowed',
      '`required`: only DPoP-bound tokens, each with its proof (`Authorization: DPoP` and a `DPoP` header). `allowed`: Bearer tokens too; a DPoP-bound token always needs its proof.',
    ),
    resource: Type.Optional(
      Type.String({
        description:
          'Identifier of the resource (one of `resources`) this route belongs to: only tokens whose audience includes it pass, and every challenge names its metadata (docs/gateway.md#resources).',
      }),
    ),
    allowedOrigins: Type.Optional(
      Type.Array(Type.String(), {
        description:
          "Browser origins (`https://app.example`) whose requests the gateway forwards on this route: a request with another `Origin` is 403 `foreign_origin`; `*`: any. Unset: the resource's own origin on a route with a `resource`, else any (docs/gateway.md#origins-and-hosts).",
      }),
    ),
    allowedHosts: Type.Optional(
      Type.Array(Type.String(), {
        description:
          'The `Host` values (`api.example`, `127.0.0.1:8080`) the gateway answers on this route: another is 403 `foreign_host`. Unset: any (docs/gateway.md#origins-and-hosts).',
      }),
    ),
    rateLimit: Type.Optional(
      Type.String({
        description:
          'The `rateLimits` policy that meters this route (docs/rate-limits.md); an application given a tier of its own (`tokengate apps update --rate-limit`) is metered by that policy instead. Unset: not metered.',
      }),
    ),
    decisionCacheSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          "How long an ingress may reuse the decision listener's 200 for the same request and credential (never beyond the token's expiry), marked `X-Tokengate-Cache-Seconds`; a revoked token then reaches this route through that ingress for up to this long. 0: never. Not with `rateLimit` or `dpop: required`. Unset: `decisions.cacheSeconds`.",
      }),
    ),
    signedIdentity: Type.Optional(
      Type.Union([Type.Literal('beside'), Type.Literal('instead')], {
        description:
          "Pass the upstream (and an ingress, in the decision listener's answers) a signed identity in `signedIdentity.header`: `beside` the identity headers, or `instead` of them. Needs `signedIdentity.enabled`. Unset: none.",
      }),
    ),
    signedIdentityAudience: Type.Optional(
      Type.String({
        minLength: 1,
        description: "The `aud` of this route's signed identity. Unset: the route's `resource`, else `signedIdentity.audience`.",
      }),
    ),
    allowQueryTokenThroughIngress: Type.Boolean({
      default: false,
      description:
        'On the decision listener, accept `access_token` in the query as `allowQueryToken` does. The ingress forwards the query as the client sent it, token included.',
    }),
  },
  { additionalProperties: false },
);

export const ResourceSchema = Type.Object(
  {
    identifier: Type.String({
      minLength: 1,
      description:
        'The resource identifier (RFC 8707): the absolute URI clients name in `resource` and tokens carry as their audience, e.g. `https://api.ticketing.example/api/public`. https, or http on a loopback host for development; no query or fragment. Its metadata is served at `/.well-known/oauth-protected-resource` followed by its path.',
    }),
  },
  { additionalProperties: false },
);

export const RateLimitPolicySchema = Type.Object(
  {
    // Optional: defaults are not filled in inside a record's entries; compilePolicy applies this one.
    by: Type.Optional(
      oneOf(
        ['application', 'user'] as const,
        'application',
        "What one budget belongs to: `application` (the token's client id, all its users together) or `user` (each user of each application apart; application tokens share their application's).",
      ),
    ),
    requestsPerSecond: Type.Number({
      exclusiveMinimum: 0,
      maximum: 1_000_000,
      description: 'Sustained rate admitted, in requests per second (fractions allowed: 0.5 is one every 2 s).',
    }),
    burst: Type.Integer({ minimum: 1, maximum: 1_000_000, description: 'Requests admitted at once above the sustained rate, after a quiet spell.' }),
    requestsPerHour: Type.Optional(Type.Integer({ minimum: 1, description: 'Quota per calendar hour (UTC), on top of the rate. Unset: none.' })),
    requestsPerDay: Type.Optional(Type.Integer({ minimum: 1, description: 'Quota per calendar day (UTC), on top of the rate. Unset: none.' })),
  },
  { additionalProperties: false },
);

export const LoggingSchema = closed({
  level: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info', 'Log level.'),
  requests: oneOf(
    ['all', 'errors', 'none'] as const,
    'errors',
    'Access log: one line per completed request (`all`), only for requests the service failed to serve, answered 5xx or cut short by the upstream (`errors`), or none.',
  ),
});

export const TracingSchema = closed({
  enabled: Type.Boolean({
    default: false,
    description:
      'Export OpenTelemetry traces over OTLP/HTTP: a server span per request on the public and decision listeners, child spans where time goes (docs/tracing.md). Off: no tracing code is loaded. OTEL_TRACES_EXPORTER=otlp turns it on, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none off.',
  }),
  serviceName: Type.String({ minLength: 1, default: 'tokengate', description: '`service.name` of the spans (OTEL_SERVICE_NAME wins).' }),
  resourceAttributes: Type.Record(Type.String({ minLength: 1 }), Type.String(), {
    default: {},
    description: 'More resource attributes (`deployment.environment.name: prod`); OTEL_RESOURCE_ATTRIBUTES adds to them and wins on a shared key.',
  }),
  sampler: oneOf(
    ['parentbased_traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'traceidratio', 'always_on', 'always_off'] as const,
    'parentbased_traceidratio',
    "Which requests are recorded, the OpenTelemetry way (OTEL_TRACES_SAMPLER wins). `parentbased_*` follows the caller's sampled flag when a traceparent arrives.",
  ),
  samplerRatio: Type.Number({
    minimum: 0,
    maximum: 1,
    default: 1,
    description: 'Share of traces started here that are recorded, for the `*traceidratio` samplers (OTEL_TRACES_SAMPLER_ARG wins).',
  }),
  endpoint: Type.String({
    default: 'http://localhost:4318',
    description: "The collector's OTLP/HTTP base URL; spans go to `<endpoint>/v1/traces` (OTEL_EXPORTER_OTLP_ENDPOINT wins).",
  }),
  tracesEndpoint: Type.String({
    default: '',
    description: 'The full URL spans are posted to, instead of `<endpoint>/v1/traces` (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT wins).',
  }),
  protocol: oneOf(['http/protobuf', 'http/json'] as const, 'http/protobuf', 'OTLP encoding (OTEL_EXPORTER_OTLP_PROTOCOL or _TRACES_PROTOCOL wins).'),
  headers: Type.Record(Type.String({ minLength: 1 }), Type.String(), {
    default: {},
    description: "Headers sent with every export, e.g. a collector's API key from the environment (OTEL_EXPORTER_OTLP_HEADERS adds to them). Never logged.",
  }),
  timeoutMs: Milliseconds(10_000, 'How long one export may take, retries included (OTEL_EXPORTER_OTLP_TIMEOUT or _TRACES_TIMEOUT wins).'),
  maxQueueSize: Type.Integer({
    minimum: 1,
    default: 2048,
    description: 'Spans waiting for export, at most; more are dropped and counted (OTEL_BSP_MAX_QUEUE_SIZE wins).',
  }),
  maxExportBatchSize: Type.Integer({ minimum: 1, default: 512, description: 'Spans per export request (OTEL_BSP_MAX_EXPORT_BATCH_SIZE wins).' }),
  scheduledDelayMs: Milliseconds(5_000, 'Longest a finished span waits before its batch is sent (OTEL_BSP_SCHEDULE_DELAY wins).'),
});

export const ConfigSchema = Type.Object(
  {
    server: ServerSchema,
    admin: AdminSchema,
    store: StoreSchema,
    issuer: IssuerSchema,
    cache: CacheSchema,
    gateway: GatewaySchema,
    decisions: DecisionsSchema,
    dpop: DpopSchema,
    signedIdentity: SignedIdentitySchema,
    openidConnect: OpenIdConnectSchema,
    clientMetadataDocuments: ClientMetadataDocumentsSchema,
    identityProviders: Type.Array(IdentityProviderSchema, {
      default: [],
      description:
        'The identity providers whose identity assertions (ID-JAG) the token endpoint accepts with the JWT bearer grant (docs/issuer.md#identity-assertions). Reloadable: a provider removed has every token issued from its assertions revoked.',
    }),
    resources: Type.Array(ResourceSchema, {
      default: [],
      description:
        'The resources (APIs) tokens are issued for. A route names its resource by identifier; tokens are bound to the resources asked for, or by default to every resource their application may use (docs/issuer.md#resources).',
    }),
    routes: Type.Array(RouteSchema, { default: [] }),
    rateLimits: Type.Record(Type.String(), RateLimitPolicySchema, {
      default: {},
      description:
        'Rate limit policies by name (letters, digits, `-` and `_`), for routes to name in `rateLimit` and operators to give an application as its tier.',
    }),
    logging: LoggingSchema,
    tracing: TracingSchema,
  },
  { additionalProperties: false },
);

export type Config = Static<typeof ConfigSchema>;
export type RouteConfig = Static<typeof RouteSchema>;
export type ResourceConfig = Static<typeof ResourceSchema>;
export type StoreConfig = Static<typeof StoreSchema>;
export type CacheConfig = Static<typeof CacheSchema>;
export type IssuerConfig = Static<typeof IssuerSchema>;
export type GatewayConfig = Static<typeof GatewaySchema>;
export type LoggingConfig = Static<typeof LoggingSchema>;
export type TracingConfig = Static<typeof TracingSchema>;
export type RateLimitPolicyConfig = Static<typeof RateLimitPolicySchema>;
export type DecisionsConfig = Static<typeof DecisionsSchema>;
export type DpopConfig = Static<typeof DpopSchema>;
export type SignedIdentityConfig = Static<typeof SignedIdentitySchema>;
export type OpenIdConnectConfig = Static<typeof OpenIdConnectSchema>;
export type ClientMetadataDocumentsConfig = Static<typeof ClientMetadataDocumentsSchema>;
export type IdentityProviderConfig = Static<typeof IdentityProviderSchema>;
export type SharedSignalsConfig = Static<typeof SharedSignalsSchema>;
export type ClientMetadataAllowConfig = Static<typeof ClientMetadataAllowSchema>;
