import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/schema.js';
import { TokengateError } from '../errors.js';
import { normalizePath, PathRefusal } from '../http/path.js';
import type { Metrics } from '../observability/metrics.js';
import { observeRequests, type RequestLog } from '../observability/requests.js';
import { METADATA_PREFIX } from './identifier.js';
import { resourceRegistry } from './registry.js';

/**
 * Metadata documents change only with the config: clients and shared caches may keep them this
 * long (a reload that changes a resource is seen by all within it).
 */
const METADATA_MAX_AGE_SECONDS = 3600;

/**
 * GET /.well-known/oauth-protected-resource{path} (RFC 9728 section 3): the metadata of the
 * resource whose identifier has that path. The documents are built from the config alone (the
 * identifiers and the issuer URL are absolute), so they read the same whichever host or
 * ingress a client came through. The path is looked up in its canonical form, and a path the
 * gateway would refuse (encoded slashes, dot segments, double encodings) names no document: it
 * can only ever reach the document of the resource it spells, or none.
 */
/** What the endpoint reads of its instance: the config in effect (read per request, a reload replaces it), where it counts and logs. */
export interface MetadataSource {
  readonly config: Readonly<Config>;
  readonly metrics: Metrics;
  readonly requestLog: RequestLog;
}

export async function registerResourceMetadata(app: FastifyInstance, context: MetadataSource): Promise<void> {
  await app.register(async function resourceMetadata(scope) {
    observeRequests(scope, 'public', context.metrics, context.requestLog);
    scope.get(METADATA_PREFIX, serveMetadata);
    scope.get(`${METADATA_PREFIX}/*`, serveMetadata);
  });

  async function serveMetadata(request: FastifyRequest, reply: FastifyReply) {
    const target = request.raw.url!;
    const queryStart = target.indexOf('?');
    const path = normalizePath(queryStart === -1 ? target : target.slice(0, queryStart));
    const resource = path instanceof PathRefusal ? undefined : resourceRegistry(context.config).byMetadataPath.get(path);
    if (resource === undefined) throw new TokengateError('NOT_FOUND', { description: 'No protected resource is described at this path.' });
    return (
      reply
        .header('content-type', 'application/json; charset=utf-8')
        .header('cache-control', `public, max-age=${METADATA_MAX_AGE_SECONDS}`)
        // Browser-based clients read it from another origin, with no credentials.
        .header('access-control-allow-origin', '*')
        .send(resource.document)
    );
  }
}
