import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import type { ConfigProblem } from '../config/problem.js';
import type { Config } from '../config/schema.js';
import { allowEntryProblem, canonicalAllowEntry } from './client-id.js';
import { networkProblem } from './network.js';

/**
 * Load-time checks of `clientMetadataDocuments`: list entries that parse, appear once and name
 * scopes, resources and policies the config has; bounds in order; networks, CA file and name
 * servers usable.
 */
export function checkClientMetadata(config: Pick<Config, 'clientMetadataDocuments' | 'issuer' | 'resources' | 'rateLimits'>): ConfigProblem[] {
  const settings = config.clientMetadataDocuments;
  const problems: ConfigProblem[] = [];
  const at = (key: string) => `clientMetadataDocuments.${key}`;
  const seen = new Set<string>();
  settings.allow.forEach((entry, index) => {
    const problem = allowEntryProblem(entry.url);
    if (problem !== null) return problems.push({ path: at(`allow[${index}].url`), message: `"${entry.url}" ${problem}` });
    const url = canonicalAllowEntry(entry.url);
    if (seen.has(url)) problems.push({ path: at(`allow[${index}].url`), message: `"${entry.url}" is listed more than once` });
    seen.add(url);
    for (const scope of entry.scopes ?? []) {
      if (!config.issuer.scopes.includes(scope)) problems.push({ path: at(`allow[${index}].scopes`), message: `"${scope}" is not in issuer.scopes` });
    }
    for (const resource of entry.resources ?? []) {
      if (!config.resources.some((configured) => configured.identifier === resource))
        problems.push({ path: at(`allow[${index}].resources`), message: `"${resource}" is not the identifier of one of resources[]` });
    }
    if (entry.rateLimit !== undefined && !Object.hasOwn(config.rateLimits, entry.rateLimit))
      problems.push({ path: at(`allow[${index}].rateLimit`), message: `"${entry.rateLimit}" is not a policy of rateLimits` });
  });
  if (settings.minCacheSeconds > settings.maxCacheSeconds)
    problems.push({ path: at('minCacheSeconds'), message: `is more than maxCacheSeconds (${settings.maxCacheSeconds})` });
  settings.allowPrivateNetworks.forEach((network, index) => {
    const problem = networkProblem(network);
    if (problem !== null) problems.push({ path: at(`allowPrivateNetworks[${index}]`), message: `${problem}, got "${network}"` });
  });
  if (settings.caFile !== '' && !existsSync(settings.caFile)) problems.push({ path: at('caFile'), message: `no such file: ${settings.caFile}` });
  settings.nameServers.forEach((server, index) => {
    if (!isNameServer(server))
      problems.push({
        path: at(`nameServers[${index}]`),
        message: `expected an IP address with an optional port (10.0.0.2, 10.0.0.2:53, [fd00::2]:53), got "${server}"`,
      });
  });
  return problems;
}

/** What node's resolver takes (`setServers`): an IP address, with a port after `:` (IPv4) or `]:` (IPv6 in brackets). */
function isNameServer(value: string): boolean {
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(value);
  if (bracketed !== null) return isIP(bracketed[1]!) === 6 && (bracketed[2] === undefined || Number(bracketed[2]) <= 65_535);
  if (isIP(value) !== 0) return true;
  const [address, port] = value.split(':');
  return isIP(address!) === 4 && port !== undefined && /^\d{1,5}$/.test(port) && Number(port) <= 65_535;
}
