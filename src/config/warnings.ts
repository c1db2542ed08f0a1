import type { Config } from './schema.js';
import { isLoopback } from './load.js';

/**
 * What a valid config may still get wrong: things that are allowed (a proxy or a port mapping
 * can make them right) but usually a mistake. `tokengate check` prints them, `serve` logs them.
 */
export function configWarnings(config: Readonly<Config>): string[] {
  return [issuerPortWarning(config)].filter((warning): warning is string => warning !== null);
}

/** An issuer URL on this machine that names another port than the public listener's: metadata would send clients past tokengate. */
function issuerPortWarning({ issuer, server }: Readonly<Config>): string | null {
  if (!issuer.enabled || server.port === 0) return null;
  const url = new URL(issuer.issuerUrl);
  if (!isLoopback(url.hostname.replace(/^\[|\]$/g, ''))) return null;
  const port = url.port !== '' ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
  if (port === server.port) return null;
  return `issuer.issuerUrl (${issuer.issuerUrl}) names port ${port} on this machine, but the public listener is on port ${server.port} (server.port): clients following the metadata miss tokengate unless something forwards port ${port} to it. Leave issuer.issuerUrl unset to derive it from the listener.`;
}
