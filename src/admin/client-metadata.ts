import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { allowEntryProblem, canonicalAllowEntry } from '../client-metadata/client-id.js';
import type { AllowEntry, ClientMetadata, ListedEntry } from '../client-metadata/index.js';
import { TokengateError } from '../errors.js';
import { resourceRegistry } from '../resource/registry.js';
import { recordAdminChange } from './admin-auth.js';
import { asObject, invalid, readResources, readScopes, readTier, requiredString, stringList } from './validate.js';

/** An entry of the list as the admin API shows it. */
export interface AllowEntryView {
  url: string;
  /** Null: the issuer's default scopes. */
  scopes: string[] | null;
  /** Empty: every configured resource. */
  resources: string[];
  dpop: 'required' | 'allowed';
  rate_limit: string | null;
  source: 'config' | 'admin';
}

function view(entry: ListedEntry): AllowEntryView {
  return {
    url: entry.url,
    scopes: entry.scopes ?? null,
    resources: entry.resources ?? [],
    dpop: entry.dpop ?? 'allowed',
    rate_limit: entry.rateLimit ?? null,
    source: entry.source,
  };
}

/**
 * The operator's list of client ID metadata documents (`tokengate client-metadata`): the entries
 * of the config file and those added here, kept in the store for every sidecar. An entry added
 * here takes effect at the next sign-in or token request on any sidecar; removing it stops its
 * clients' sign-ins and token requests, while tokens already issued live on until they expire or
 * `POST /admin/tokens/revoke` revokes them by client id.
 */
export function registerClientMetadataRoutes(scope: FastifyInstance, context: TokengateContext): void {
  const enabled = (): ClientMetadata => {
    if (context.clientMetadata === null)
      throw new TokengateError('INVALID_REQUEST', {
        description: 'client ID metadata documents are off: set clientMetadataDocuments.enabled: true in the config',
      });
    return context.clientMetadata;
  };

  scope.get('/client-metadata/allowed', async function listAllowed() {
    return { allowed: (await enabled().allowList.entries()).map(view) };
  });

  scope.post('/client-metadata/allowed', async function allow(request) {
    const clientMetadata = enabled();
    const entry = readAllowEntry(request.body, context);
    if (clientMetadata.allowList.isConfigured(entry.url))
      throw new TokengateError('CONFLICT', { description: `${entry.url} is allowed by the config file: change it there` });
    await clientMetadata.allowList.added.put(entry);
    recordAdminChange(request, { action: 'client metadata documents allowed', url: entry.url });
    return view({ ...entry, source: 'admin' });
  });

  scope.delete<{ Querystring: { url?: unknown } }>('/client-metadata/allowed', async function disallow(request) {
    const clientMetadata = enabled();
    const url = typeof request.query.url === 'string' ? request.query.url : '';
    if (allowEntryProblem(url) !== null) throw invalid('give the entry to remove as ?url=, as the list shows it');
    const canonical = canonicalAllowEntry(url);
    if (clientMetadata.allowList.isConfigured(canonical))
      throw new TokengateError('CONFLICT', { description: `${canonical} is allowed by the config file: remove it there` });
    if (!(await clientMetadata.allowList.added.remove(canonical)))
      throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'No entry of the list added through the admin API has this url.' });
    recordAdminChange(request, { action: 'client metadata documents no longer allowed', url: canonical });
    return { url: canonical, removed: true };
  });
}

function readAllowEntry(body: unknown, context: TokengateContext): AllowEntry {
  const fields = asObject(body);
  const known = new Set(['url', 'scopes', 'resources', 'dpop', 'rate_limit']);
  const unknownFields = Object.keys(fields).filter((field) => !known.has(field));
  if (unknownFields.length > 0) throw invalid(`unknown field ${unknownFields.join(', ')} (an entry's fields: ${[...known].join(', ')})`);
  const url = requiredString(fields, 'url');
  const problem = allowEntryProblem(url);
  if (problem !== null) throw invalid(`url ${problem}`);
  const { issuer, rateLimits } = context.config;
  const scopes = stringList(fields, 'scopes');
  const resources = stringList(fields, 'resources');
  const dpop = fields.dpop;
  if (dpop !== undefined && dpop !== 'required' && dpop !== 'allowed')
    throw invalid('dpop must be "required" (DPoP-bound tokens only) or "allowed" (Bearer tokens too)');
  const rateLimit = fields.rate_limit === undefined ? null : readTier(fields.rate_limit, rateLimits);
  return {
    url: canonicalAllowEntry(url),
    ...(scopes === undefined ? {} : { scopes: readScopes(scopes, issuer) }),
    ...(resources === undefined ? {} : { resources: readResources(resources, resourceRegistry(context.config).identifiers) }),
    ...(dpop === undefined ? {} : { dpop }),
    ...(rateLimit === null ? {} : { rateLimit }),
  };
}
