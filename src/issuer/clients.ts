import type { TokengateContext } from '../context.js';
import { isMetadataClientId } from '../client-metadata/client-id.js';
import type { ApplicationRecord } from '../store/store.js';

/** Finds the application a client_id names; null when there is none. */
export type FindClient = (clientId: string) => Promise<ApplicationRecord | null>;

/**
 * Who a client_id names: an application the operator registered, or, with client ID metadata
 * documents on, the client an allowed document describes (an https URL, which tokengate's own
 * client ids never are). The room throws CLIENT_NOT_ALLOWED or CLIENT_METADATA_UNUSABLE for a
 * URL it cannot accept; each endpoint answers those its own way.
 */
export function clientFinder(context: TokengateContext): FindClient {
  return (clientId) =>
    context.clientMetadata !== null && isMetadataClientId(clientId) ? context.clientMetadata.client(clientId) : context.store.applications.get(clientId);
}
