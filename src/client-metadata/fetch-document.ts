import { readFileSync } from 'node:fs';
import CachePolicy from 'http-cache-semantics';
import { Agent, request, type Dispatcher } from 'undici';
import { addressPolicy, ForbiddenAddressError, guardedLookup, literalAddress, resolverOf, type AddressPolicy } from './network.js';

/**
 * Fetching a client ID metadata document, and nothing but that: a GET of an https URL the
 * operator's list allowed, from a public address (./network.ts), answered 200 with
 * `application/json` of at most `maxBytes`, whole within `timeoutMs` (connection, answer and
 * body together: a server that sends one byte a second is cut at the deadline), never following
 * a redirect, with at most `maxConcurrent` fetches of this process at once. The caller decides
 * what the document says (./document.ts) and how long it is kept (./documents.ts).
 */

export interface FetchSettings {
  readonly timeoutMs: number;
  readonly maxBytes: number;
  readonly maxConcurrent: number;
  readonly allowPrivateNetworks: readonly string[];
  /** PEM file of the CAs to trust instead of the system's; '' for the system's. */
  readonly caFile: string;
  /** DNS servers instead of the system's resolver; empty for the system's. */
  readonly nameServers: readonly string[];
}

/** Why a fetch failed; each is a value of the fetch metric's `result` label. */
export type FetchFailure = 'forbidden_address' | 'unreachable' | 'timeout' | 'redirect' | 'status' | 'not_json' | 'too_large' | 'busy';

/** A document that could not be had; `message` is public (no secret is ever in a document's URL or answer line). */
export class DocumentFetchError extends Error {
  constructor(
    readonly reason: FetchFailure,
    message: string,
  ) {
    super(message);
    this.name = 'DocumentFetchError';
  }
}

export interface FetchedDocument {
  /** The parsed JSON body. */
  readonly json: unknown;
  /** How long the answer's caching headers let it be kept (RFC 9111), before the operator's bounds. */
  readonly freshForMs: number;
}

export class DocumentFetcher {
  private inFlight = 0;
  private agent: Agent | null = null;
  private readonly policy: AddressPolicy;

  constructor(private readonly settings: FetchSettings) {
    this.policy = addressPolicy(settings.allowPrivateNetworks);
  }

  async fetch(url: string): Promise<FetchedDocument> {
    if (this.inFlight >= this.settings.maxConcurrent) {
      throw new DocumentFetchError('busy', `too many documents are being fetched at once (${this.settings.maxConcurrent}); try again in a moment`);
    }
    this.inFlight += 1;
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(), this.settings.timeoutMs);
    try {
      return await this.get(new URL(url), deadline.signal);
    } catch (error) {
      throw this.failure(error, url, deadline.signal.aborted);
    } finally {
      clearTimeout(timer);
      this.inFlight -= 1;
    }
  }

  close(): Promise<void> {
    return this.agent?.close() ?? Promise.resolve();
  }

  private async get(url: URL, signal: AbortSignal): Promise<FetchedDocument> {
    // A literal address is connected to without a lookup: it is checked here instead.
    const literal = literalAddress(url.hostname);
    const range = literal === null ? null : this.policy(literal);
    if (literal !== null && range !== null) throw new ForbiddenAddressError(url.hostname, literal, range);
    const response = await request(url, {
      method: 'GET',
      headers: { accept: 'application/json', 'user-agent': 'tokengate (client ID metadata documents)' },
      dispatcher: this.dispatcher(),
      signal,
    });
    try {
      checkAnswer(response, this.settings.maxBytes);
      const body = await readLimited(response.body, this.settings.maxBytes);
      return { json: parseJson(body), freshForMs: freshFor(url, response) };
    } finally {
      // Whatever was not read is not wanted: the connection goes rather than draining it (its abort error is expected).
      if (!response.body.readableEnded) response.body.on('error', () => {}).destroy();
    }
  }

  private dispatcher(): Agent {
    this.agent ??= new Agent({
      connect: {
        lookup: guardedLookup(resolverOf(this.settings.nameServers), this.policy),
        timeout: this.settings.timeoutMs,
        ...(this.settings.caFile === '' ? {} : { ca: readFileSync(this.settings.caFile) }),
      },
      headersTimeout: this.settings.timeoutMs,
      bodyTimeout: this.settings.timeoutMs,
      // Documents are fetched rarely (once per cache life): no connection is kept for the next.
      pipelining: 0,
    });
    return this.agent;
  }

  private failure(error: unknown, url: string, timedOut: boolean): DocumentFetchError {
    if (error instanceof DocumentFetchError) return error;
    const forbidden = forbiddenAddressIn(error);
    if (forbidden !== null) return new DocumentFetchError('forbidden_address', forbidden.message);
    const host = new URL(url).host;
    if (timedOut) return new DocumentFetchError('timeout', `${host} did not send the document within ${this.settings.timeoutMs} ms`);
    return new DocumentFetchError('unreachable', `${host} could not be reached (${describeNetworkError(error)})`);
  }
}

function checkAnswer(response: Dispatcher.ResponseData, maxBytes: number): void {
  const status = response.statusCode;
  if (status >= 300 && status < 400) throw new DocumentFetchError('redirect', `the document URL answered a redirect (HTTP ${status}), which is not followed`);
  if (status !== 200) throw new DocumentFetchError('status', `the document URL answered HTTP ${status} instead of 200`);
  const mediaType = String(response.headers['content-type'] ?? '')
    .split(';')[0]!
    .trim()
    .toLowerCase();
  if (mediaType !== 'application/json') {
    throw new DocumentFetchError('not_json', `the document is served as ${mediaType === '' ? 'no content type' : mediaType}, not application/json`);
  }
  const length = Number(response.headers['content-length'] ?? 0);
  if (length > maxBytes) throw new DocumentFetchError('too_large', `the document is ${length} bytes, more than the ${maxBytes} allowed`);
}

/** The body, counted as it arrives: past `maxBytes` the stream is cut, whatever Content-Length said. */
async function readLimited(body: Dispatcher.ResponseData['body'], maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new DocumentFetchError('too_large', `the document is larger than the ${maxBytes} bytes allowed`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    throw new DocumentFetchError('not_json', 'the document is not valid JSON');
  }
}

/** RFC 9111 freshness (max-age, Expires, no-store, ...), as a private cache reads it. */
function freshFor(url: URL, response: Dispatcher.ResponseData): number {
  const policy = new CachePolicy(
    { url: url.pathname, method: 'GET', headers: {} },
    { status: response.statusCode, headers: response.headers as CachePolicy.Headers },
    { shared: false },
  );
  return policy.storable() ? Math.max(0, policy.timeToLive()) : 0;
}

function forbiddenAddressIn(error: unknown): ForbiddenAddressError | null {
  for (let current = error; current instanceof Error; current = current.cause) if (current instanceof ForbiddenAddressError) return current;
  return null;
}

/** The network's own words, never a body: a code (ECONNREFUSED, CERT_HAS_EXPIRED) or a short message. */
function describeNetworkError(error: unknown): string {
  for (let current = error; current instanceof Error; current = current.cause) {
    const code = (current as NodeJS.ErrnoException).code;
    if (code !== undefined && !code.startsWith('UND_ERR')) return code;
  }
  return error instanceof Error ? error.message : String(error);
}
