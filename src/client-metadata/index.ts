import type { Logger } from 'pino';
import type { ClientMetadataDocumentsConfig, IssuerConfig } from '../config/schema.js';
import { TokengateError } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { Backend } from '../store/backend.js';
import { AllowList, allowedEntriesFor } from './allow-list.js';
import { clientIdProblem, isMetadataClientId, type MetadataClient } from './client-id.js';
import { documentCacheFor } from './document-cache.js';
import { DocumentUnavailableError, Documents } from './documents.js';
import { DocumentFetcher } from './fetch-document.js';

/**
 * Client ID metadata documents: clients whose `client_id` is an https URL serving their
 * metadata, accepted when the operator's list allows them. The issuer asks this room for such a
 * client and gets an application record like a registered public client's (no secret, so PKCE
 * with S256; redirect URIs from the document; scopes, resources, DPoP and tier from the list's
 * entry), so every rule of an application applies to it unchanged.
 *
 *   client id -> its form (./client-id.ts) -> the list (./allow-list.ts) -> its document, kept or
 *   fetched once for every sidecar (./documents.ts, ./fetch-document.ts, ./network.ts) -> checked
 *   (./document.ts) -> an application record
 */

export { isMetadataClient, isMetadataClientId, type MetadataClient } from './client-id.js';
export type { AllowEntry, ListedEntry } from './allow-list.js';

export class ClientMetadata {
  constructor(
    readonly allowList: AllowList,
    private readonly documents: Documents,
    private readonly fetcher: DocumentFetcher,
    private readonly issuer: Pick<IssuerConfig, 'defaultScopes'>,
  ) {}

  /**
   * The client `clientId` names; throws CLIENT_NOT_ALLOWED (not a usable URL, or on no entry of
   * the list) or CLIENT_METADATA_UNUSABLE (its document could not be had or fails the check),
   * and StoreUnavailableError when the store does not answer.
   */
  async client(clientId: string): Promise<MetadataClient> {
    const problem = clientIdProblem(clientId);
    if (problem !== null) throw notAllowed(`The application's client_id is a URL that ${problem}, so it cannot name a client metadata document.`);
    const entry = await this.allowList.find(clientId);
    if (entry === null) throw notAllowed(`The application ${new URL(clientId).host} (${clientId}) is not on this service's list of allowed applications.`);
    let document;
    try {
      document = await this.documents.get(clientId);
    } catch (error) {
      if (!(error instanceof DocumentUnavailableError)) throw error;
      throw new TokengateError('CLIENT_METADATA_UNUSABLE', {
        description: `The description of the application ${new URL(clientId).host} could not be used: ${error.message}.`,
        detail: `client metadata document ${clientId}: ${error.reason}`,
      });
    }
    const host = new URL(clientId).host;
    return {
      clientId,
      name: host,
      secretDigest: null,
      redirectUris: document.redirectUris,
      scopes: entry.scopes ?? [...this.issuer.defaultScopes],
      confidential: false,
      createdAt: document.fetchedAt,
      ...(entry.dpop === undefined ? {} : { dpop: entry.dpop }),
      ...(entry.resources === undefined ? {} : { resources: entry.resources }),
      rateLimit: entry.rateLimit ?? null,
      metadataDocument: { host, clientName: document.clientName },
    };
  }

  /** A client's rate limit tier: its entry's, read from the list alone (no document is fetched for it). */
  async tier(clientId: string): Promise<string | null> {
    return (await this.allowList.find(clientId))?.rateLimit ?? null;
  }

  close(): Promise<void> {
    return this.fetcher.close();
  }
}

function notAllowed(description: string): TokengateError {
  return new TokengateError('CLIENT_NOT_ALLOWED', { description, detail: 'client metadata document not allowed' });
}

export function createClientMetadata(
  settings: ClientMetadataDocumentsConfig,
  issuer: Pick<IssuerConfig, 'defaultScopes'>,
  backend: Backend,
  metrics: Metrics,
  log: Logger,
): ClientMetadata {
  const fetcher = new DocumentFetcher({
    timeoutMs: settings.fetchTimeoutMs,
    maxBytes: settings.maxDocumentBytes,
    maxConcurrent: settings.maxConcurrentFetches,
    allowPrivateNetworks: settings.allowPrivateNetworks,
    caFile: settings.caFile,
    nameServers: settings.nameServers,
  });
  const documents = new Documents(
    documentCacheFor(backend),
    fetcher,
    { minMs: settings.minCacheSeconds * 1000, maxMs: settings.maxCacheSeconds * 1000 },
    settings.fetchTimeoutMs,
    (result, clientId) => {
      metrics.clientMetadataFetches.inc({ result });
      if (result !== 'fetched') log.warn({ clientId, result }, 'client metadata document not usable');
    },
  );
  return new ClientMetadata(new AllowList(settings.allow, allowedEntriesFor(backend)), documents, fetcher, issuer);
}

/** Whether `clientId` is one this room answers for, in a deployment that has it on. */
export function namesMetadataDocument(clientMetadata: ClientMetadata | null, clientId: string): clientMetadata is ClientMetadata {
  return clientMetadata !== null && isMetadataClientId(clientId);
}
