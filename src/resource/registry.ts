import type { Config } from '../config/schema.js';
import { protectedResourceDpopMetadata } from '../dpop/index.js';
import { identifierPath, METADATA_PREFIX, metadataUrl } from './identifier.js';

/** One configured resource, compiled: what the issuer, the route table and the metadata endpoint read. */
export interface ProtectedResource {
  readonly identifier: string;
  /** Absolute URL of its metadata document: the `resource_metadata` of its routes' challenges. */
  readonly metadataUrl: string;
  /** Path of that document on the public listener. */
  readonly metadataPath: string;
  /** The document itself (RFC 9728 section 2), serialized once. */
  readonly document: string;
}

export interface ResourceRegistry {
  /** Every registered identifier, in config order. */
  readonly identifiers: readonly string[];
  readonly byIdentifier: ReadonlyMap<string, ProtectedResource>;
  readonly byMetadataPath: ReadonlyMap<string, ProtectedResource>;
}

/** Compiled once per config object (a reload brings a new one), so callers read it per request for free. */
const compiled = new WeakMap<Readonly<Config>, ResourceRegistry>();

/** The resources of `config` (already checked by checkResources at load). */
export function resourceRegistry(config: Readonly<Config>): ResourceRegistry {
  let registry = compiled.get(config);
  if (registry === undefined) {
    registry = compileRegistry(config);
    compiled.set(config, registry);
  }
  return registry;
}

function compileRegistry(config: Readonly<Config>): ResourceRegistry {
  const resources = config.resources.map(({ identifier }): ProtectedResource => {
    const metadataPath = `${METADATA_PREFIX}${identifierPath(identifier)}`;
    return { identifier, metadataUrl: metadataUrl(identifier), metadataPath, document: JSON.stringify(protectedResourceMetadata(identifier, config)) };
  });
  return {
    identifiers: resources.map((resource) => resource.identifier),
    byIdentifier: new Map(resources.map((resource) => [resource.identifier, resource])),
    byMetadataPath: new Map(resources.map((resource) => [resource.metadataPath, resource])),
  };
}

/**
 * RFC 9728 section 2: the resource, the issuer that issues its tokens, the scopes its routes
 * require and how its routes accept a token. Built from the routes that name the resource, so
 * it says what the gateway actually enforces, DPoP included (RFC 9449 section 5.2): the proof
 * algorithms accepted, and whether every route of the resource takes DPoP-bound tokens only.
 */
export function protectedResourceMetadata(identifier: string, config: Readonly<Config>) {
  const routes = config.routes.filter((route) => route.resource === identifier);
  const scopes = [...new Set(routes.flatMap((route) => route.scopes))];
  const methods = ['header'];
  if (routes.some((route) => route.allowBodyToken)) methods.push('body');
  if (routes.some((route) => route.allowQueryToken)) methods.push('query');
  return {
    resource: identifier,
    authorization_servers: [config.issuer.issuerUrl.replace(/\/+$/, '')],
    ...(scopes.length > 0 ? { scopes_supported: scopes } : {}),
    bearer_methods_supported: methods,
    ...protectedResourceDpopMetadata(routes),
  };
}
