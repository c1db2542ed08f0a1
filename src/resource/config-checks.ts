import type { ConfigProblem } from '../config/problem.js';
import type { Config } from '../config/schema.js';
import { identifierPath, identifierProblem, METADATA_PREFIX } from './identifier.js';

/**
 * Load-time checks of `resources` and of the routes that name one: each identifier valid and
 * listed once, no two published at the same metadata path (the listener answers by path), every
 * route's `resource` a listed one, and an issuer URL to name in the metadata.
 */
export function checkResources(config: Pick<Config, 'resources' | 'routes' | 'issuer' | 'server'>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const identifiers = new Set<string>();
  const metadataPaths = new Map<string, number>();
  config.resources.forEach((resource, index) => {
    const at = `resources[${index}].identifier`;
    const problem = identifierProblem(resource.identifier);
    if (problem !== null) return problems.push({ path: at, message: problem });
    if (identifiers.has(resource.identifier)) return problems.push({ path: at, message: `"${resource.identifier}" is listed more than once` });
    identifiers.add(resource.identifier);
    const path = identifierPath(resource.identifier);
    const previous = metadataPaths.get(path);
    if (previous !== undefined)
      return problems.push({
        path: at,
        message: `"${resource.identifier}" has the same path as resources[${previous}], so both would be described at ${METADATA_PREFIX}${path}`,
      });
    metadataPaths.set(path, index);
  });
  config.routes.forEach((route, index) => {
    if (route.resource !== undefined && !identifiers.has(route.resource))
      problems.push({ path: `routes[${index}].resource`, message: `"${route.resource}" is not the identifier of one of resources[]` });
  });
  // An empty issuer URL is derived from a fixed port after these checks.
  if (config.resources.length > 0 && config.issuer.issuerUrl === '' && config.server.port === 0)
    problems.push({
      path: 'issuer.issuerUrl',
      message: "resources are described with the issuer's URL (authorization_servers): set issuer.issuerUrl, or a fixed server.port to derive it from",
    });
  return problems;
}
