import { TokengateError } from '../errors.js';
import type { ApplicationRecord } from '../store/store.js';
import type { ResourceRegistry } from './registry.js';

/**
 * Audiences (RFC 8707): which resources a token is for. The issuer decides them from the
 * `resource` parameters of a request, the gateway compares them with the route's resource.
 *
 * A request that names no resource gets the application's default: every registered resource
 * the application may use (its `resources`, or all of them when it lists none). So clients
 * that predate resource indicators keep working, with tokens bound to what their application
 * may reach anyway. With no resources configured, tokens carry no audience.
 */

/** A `resource` parameter as sent: absent, once, or repeated (a form's array, a JSON list). */
export function readResourceParameter(value: unknown): string[] | undefined {
  if (value === undefined || value === '') return undefined;
  const values = Array.isArray(value) ? value : [value];
  if (values.length === 0 || !values.every((item): item is string => typeof item === 'string' && item !== ''))
    throw invalidTarget('The resource parameter must be one or more absolute URIs.');
  return [...new Set(values)];
}

/** The resources an application may receive tokens for, registered ones only. */
export function permittedResources(application: Pick<ApplicationRecord, 'resources'>, registry: ResourceRegistry): readonly string[] {
  const limited = application.resources;
  if (limited === undefined || limited.length === 0) return registry.identifiers;
  return registry.identifiers.filter((identifier) => limited.includes(identifier));
}

/**
 * The audience of a new grant: the requested resources, each registered and permitted for the
 * application, or the application's default when none is requested. Throws invalid_target.
 */
export function grantAudience(
  requested: readonly string[] | undefined,
  application: Pick<ApplicationRecord, 'resources'>,
  registry: ResourceRegistry,
): string[] {
  const permitted = permittedResources(application, registry);
  if (requested === undefined) return [...permitted];
  for (const resource of requested) {
    if (!registry.byIdentifier.has(resource)) throw invalidTarget(unregisteredResource(resource, registry));
    if (!permitted.includes(resource)) throw invalidTarget(`The application may not request tokens for ${resource}.`);
  }
  return [...requested];
}

/**
 * The audience of a token issued from an existing grant (a code, a refresh token): the
 * requested resources, each within the grant's audience, or the grant's whole audience. A grant
 * recorded before resources were configured has none: it gets the application's default.
 * Throws invalid_target for a resource outside the grant: a refresh never widens it.
 */
export function narrowAudience(
  grant: readonly string[] | undefined,
  requested: readonly string[] | undefined,
  application: Pick<ApplicationRecord, 'resources'>,
  registry: ResourceRegistry,
): { grant: string[]; token: string[] } {
  const granted = grant === undefined || grant.length === 0 ? grantAudience(undefined, application, registry) : [...grant];
  if (requested === undefined) return { grant: granted, token: granted };
  const outside = requested.filter((resource) => !granted.includes(resource));
  if (outside.length > 0) throw invalidTarget('A requested resource is not among those this grant was authorized for.');
  return { grant: granted, token: [...requested] };
}

/** Whether a token may be used at a route of `resource` (a token without an audience may not). */
export function isAudience(audience: readonly string[], resource: string): boolean {
  // A loop, not includes() over a spread: this runs on every request of a route with a resource.
  for (const entry of audience) if (entry === resource) return true;
  return false;
}

const UNKNOWN_RESOURCE = 'A requested resource is not registered with this issuer.';

/**
 * What is wrong with a requested resource the registry does not hold: not an absolute URI
 * without a fragment (RFC 8707 section 2), or an absolute URI this issuer does not know, when it
 * is another spelling of a registered identifier (letter case, a trailing "/"), naming that one.
 * The value is the client's: it is never echoed back, only a registered identifier is.
 */
function unregisteredResource(resource: string, registry: ResourceRegistry): string {
  const url = URL.parse(resource);
  if (url === null || resource.includes('#')) return 'A resource parameter is not an absolute URI without a fragment (RFC 8707).';
  const spelling = withoutTrailingSlash(url.href);
  const registered = registry.identifiers.find((identifier) => withoutTrailingSlash(new URL(identifier).href) === spelling);
  return registered === undefined ? UNKNOWN_RESOURCE : `${UNKNOWN_RESOURCE} Identifiers are compared exactly: did you mean ${registered}?`;
}

function withoutTrailingSlash(href: string): string {
  return href.endsWith('/') ? href.slice(0, -1) : href;
}

function invalidTarget(description: string): TokengateError {
  return new TokengateError('INVALID_TARGET', { description });
}
