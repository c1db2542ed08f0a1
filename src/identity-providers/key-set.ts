import { readFileSync } from 'node:fs';
import CachePolicy from 'http-cache-semantics';
import { createLocalJWKSet, errors, type JSONWebKeySet, type JWSHeaderParameters, type FlattenedJWSInput } from 'jose';
import { Agent, request, type Dispatcher } from 'undici';

/** Bounds of how long a fetched key set is used before it is fetched again, whatever its caching headers say. */
export const KEY_SET_FRESHNESS_BOUNDS_MS = { least: 60_000, most: 86_400_000 } as const;
const FETCH_TIMEOUT_MS = 5_000;
const MOST_KEY_SET_BYTES = 256 * 1024;

/** The key set could not be fetched and none is held: the provider's assertions cannot be checked now. */
export class KeySetUnavailableError extends Error {
  constructor(readonly reason: string) {
    super(`the identity provider's key set could not be fetched: ${reason}`);
    this.name = 'KeySetUnavailableError';
  }
}

type KeyLookup = ReturnType<typeof createLocalJWKSet>;

/**
 * One provider's signing keys, from its JWKS URL: kept as fresh as the answer's caching headers
 * say (within KEY_SET_FRESHNESS_BOUNDS_MS), fetched again at once for a `kid` it does not hold
 * (at most once per cooldown, so a stream of made-up `kid`s costs the provider nothing), and
 * only ever replaced by a newer answer: a failed fetch keeps the set in hand, so a key the
 * provider removed never comes back.
 */
export class ProviderKeySet {
  private lookup: KeyLookup | null = null;
  private freshUntil = 0;
  private lastFetchAt = Number.NEGATIVE_INFINITY;
  /**
   * When an unknown `kid` last made it fetch: the cooldown counts from there only. Counted from any
   * fetch, a routine refresh would open a window in which a key the provider just rotated in is
   * refused until the cooldown ends.
   */
  private lastUnknownKidFetchAt = Number.NEGATIVE_INFINITY;
  private fetching: Promise<void> | null = null;
  /** Why the last fetch failed, while no set is in hand: repeated to callers until the cooldown allows another try. */
  private failure: KeySetUnavailableError | null = null;
  private agent: Agent | null = null;
  /** How many fetches answered with a key set (admin listing, tests). */
  fetches = 0;

  constructor(
    readonly url: string,
    private readonly caFile: string,
    private readonly cooldownMs: number,
  ) {}

  /** jose's key resolver: the key for this header, or JWKSNoMatchingKey after a fetch found none. */
  readonly key = async (header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<CryptoKey> => {
    if (this.lookup === null || Date.now() >= this.freshUntil) await this.refresh(this.lookup === null);
    try {
      return await this.lookup!(header, token);
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey) || Date.now() - this.lastUnknownKidFetchAt < this.cooldownMs) throw error;
      this.lastUnknownKidFetchAt = Date.now();
      await this.refresh(false);
      return this.lookup!(header, token);
    }
  };

  /** Stops the connections of its fetches. */
  async close(): Promise<void> {
    await this.agent?.close();
  }

  /**
   * One fetch at a time; `required`: there is no set in hand, so a failure is the caller's, and
   * is repeated without another fetch until the cooldown (at least a second) has passed: a
   * provider that is down is not asked once per request.
   */
  private async refresh(required: boolean): Promise<void> {
    if (required && this.failure !== null && Date.now() - this.lastFetchAt < Math.max(1_000, this.cooldownMs)) throw this.failure;
    this.fetching ??= this.fetch().finally(() => (this.fetching = null));
    try {
      await this.fetching;
      this.failure = null;
    } catch (error) {
      if (required || this.lookup === null) {
        this.failure = error instanceof KeySetUnavailableError ? error : new KeySetUnavailableError('the fetch failed');
        throw this.failure;
      }
      // A set in hand stays in use (never an older one): the provider may be briefly down.
      this.freshUntil = Date.now() + KEY_SET_FRESHNESS_BOUNDS_MS.least;
    }
  }

  private async fetch(): Promise<void> {
    this.lastFetchAt = Date.now();
    let response: Dispatcher.ResponseData;
    try {
      response = await request(this.url, {
        method: 'GET',
        headers: { accept: 'application/jwk-set+json, application/json' },
        dispatcher: this.dispatcher(),
        signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
      });
    } catch (error) {
      throw new KeySetUnavailableError(networkReason(error));
    }
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw new KeySetUnavailableError(`answered ${response.statusCode}`);
    }
    const keySet = parseKeySet(await readBounded(response.body));
    this.lookup = createLocalJWKSet(keySet);
    this.freshUntil = Date.now() + freshFor(this.url, response);
    this.fetches += 1;
  }

  private dispatcher(): Agent {
    this.agent ??= new Agent({ connect: this.caFile === '' ? {} : { ca: readFileSync(this.caFile) } });
    return this.agent;
  }
}

async function readBounded(body: Dispatcher.ResponseData['body']): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > MOST_KEY_SET_BYTES) throw new KeySetUnavailableError(`the key set is larger than ${MOST_KEY_SET_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function parseKeySet(body: Buffer): JSONWebKeySet {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new KeySetUnavailableError('the key set is not valid JSON');
  }
  const keys = typeof parsed === 'object' && parsed !== null ? (parsed as { keys?: unknown }).keys : undefined;
  if (!Array.isArray(keys)) throw new KeySetUnavailableError('the key set has no "keys" array');
  // Symmetric keys are never a provider's signing keys: a published secret signs nothing.
  return { keys: keys.filter((key): key is JSONWebKeySet['keys'][number] => typeof key === 'object' && key !== null && key.kty !== 'oct') };
}

/** RFC 9111 freshness as a private cache reads it, within the bounds. */
function freshFor(url: string, response: Dispatcher.ResponseData): number {
  const policy = new CachePolicy(
    { url: new URL(url).pathname, method: 'GET', headers: {} },
    { status: response.statusCode, headers: response.headers as CachePolicy.Headers },
    { shared: false },
  );
  const ttl = policy.storable() ? Math.max(0, policy.timeToLive()) : 0;
  return Math.min(KEY_SET_FRESHNESS_BOUNDS_MS.most, Math.max(KEY_SET_FRESHNESS_BOUNDS_MS.least, ttl));
}

function networkReason(error: unknown): string {
  for (let current = error; current instanceof Error; current = current.cause) {
    const code = (current as NodeJS.ErrnoException).code;
    if (code !== undefined && !code.startsWith('UND_ERR')) return code;
  }
  return error instanceof Error ? error.name : 'unreachable';
}
