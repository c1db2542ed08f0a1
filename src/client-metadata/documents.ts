import { hash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClientDocument } from './document.js';
import { DocumentProblem, readDocument } from './document.js';
import type { DocumentCache } from './document-cache.js';
import { DocumentFetchError, type DocumentFetcher, type FetchFailure } from './fetch-document.js';

/**
 * A client's document as every sidecar shares it: read from the cache while it lives; when it
 * does not, fetched by one process of the whole deployment at a time (the cache's fetch lock)
 * while the others wait for what it keeps, and within one process by one request while the
 * others await the same promise. So a burst of sign-ins of one client fetches its document once
 * per cache life, however many sidecars it spreads over.
 *
 * A document is kept for the life its caching headers give it, within the operator's bounds.
 * When that ends it is fetched again; a fetch that fails, or a document that fails the check, is
 * not kept, and the sign-in fails (closed). The failure itself is shared for FAILURE_SHARED_MS,
 * so the requests that waited on that fetch get its answer instead of each fetching again.
 */

/** Every way a document can fail, as the fetch metric counts it: the fetcher's, and a document that fails the check. */
export type DocumentFailure = FetchFailure | 'invalid';

export class DocumentUnavailableError extends Error {
  constructor(
    readonly reason: DocumentFailure,
    message: string,
  ) {
    super(message);
    this.name = 'DocumentUnavailableError';
  }
}

export interface DocumentLifetime {
  readonly minMs: number;
  readonly maxMs: number;
}

const FAILURE_SHARED_MS = 2_000;
/** How often a process waiting on another's fetch looks for its outcome. */
const POLL_MS = 25;
/** The lock outlives the fetch's own deadline by this much, for the time to keep what it fetched. */
const LOCK_MARGIN_MS = 1_000;

export class Documents {
  private readonly loading = new Map<string, Promise<ClientDocument>>();

  constructor(
    private readonly cache: DocumentCache,
    private readonly fetcher: DocumentFetcher,
    private readonly lifetime: DocumentLifetime,
    private readonly fetchTimeoutMs: number,
    private readonly counted: (result: DocumentFailure | 'fetched', clientId: string) => void,
  ) {}

  /** The checked document of `clientId`; rejects with DocumentUnavailableError (or the store's StoreUnavailableError). */
  get(clientId: string): Promise<ClientDocument> {
    let loading = this.loading.get(clientId);
    if (loading === undefined) {
      loading = this.load(clientId).finally(() => this.loading.delete(clientId));
      this.loading.set(clientId, loading);
    }
    return loading;
  }

  private async load(clientId: string): Promise<ClientDocument> {
    const key = hash('sha256', clientId, 'base64url');
    const lockMs = this.fetchTimeoutMs + LOCK_MARGIN_MS;
    const giveUpAt = Date.now() + lockMs + LOCK_MARGIN_MS;
    for (;;) {
      const known = await this.known(key);
      if (known !== null) return known;
      const lock = await this.cache.lock(key, lockMs);
      if (lock !== null) {
        try {
          // Looked at again under the lock: another process may have kept it since the first look.
          return (await this.known(key)) ?? (await this.fetchAndKeep(clientId, key));
        } finally {
          await this.cache.unlock(key, lock);
        }
      }
      if (Date.now() >= giveUpAt) throw new DocumentUnavailableError('timeout', 'the document is being fetched elsewhere and did not arrive in time');
      await sleep(POLL_MS);
    }
  }

  /** The kept document, or the shared failure thrown; null when neither is there. */
  private async known(key: string): Promise<ClientDocument | null> {
    const document = await this.cache.document(key);
    if (document !== null) return JSON.parse(document) as ClientDocument;
    const failure = await this.cache.failure(key);
    if (failure === null) return null;
    const { reason, message } = JSON.parse(failure) as { reason: DocumentFailure; message: string };
    throw new DocumentUnavailableError(reason, message);
  }

  private async fetchAndKeep(clientId: string, key: string): Promise<ClientDocument> {
    let failure: DocumentUnavailableError;
    try {
      const fetched = await this.fetcher.fetch(clientId);
      const document = readDocument(clientId, fetched.json, Date.now());
      const lifetimeMs = Math.min(this.lifetime.maxMs, Math.max(this.lifetime.minMs, fetched.freshForMs));
      await this.cache.keepDocument(key, JSON.stringify(document), lifetimeMs);
      this.counted('fetched', clientId);
      return document;
    } catch (error) {
      if (error instanceof DocumentFetchError) failure = new DocumentUnavailableError(error.reason, error.message);
      else if (error instanceof DocumentProblem) failure = new DocumentUnavailableError('invalid', error.message);
      else throw error;
    }
    this.counted(failure.reason, clientId);
    // This process's own limit says nothing about the document: the others need not wait for it.
    if (failure.reason !== 'busy') await this.cache.keepFailure(key, JSON.stringify({ reason: failure.reason, message: failure.message }), FAILURE_SHARED_MS);
    throw failure;
  }
}
