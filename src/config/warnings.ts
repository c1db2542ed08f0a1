import { getHeapStatistics } from 'node:v8';
import type { Config } from './schema.js';
import { isLoopback } from './load.js';

/**
 * What a valid config may still get wrong: things that are allowed (a proxy or a port mapping
 * can make them right) but usually a mistake. `tokengate check` prints them, `serve` logs them.
 */
export function configWarnings(config: Readonly<Config>, heapLimitBytes = getHeapStatistics().heap_size_limit): string[] {
  return [issuerPortWarning(config), cacheHeapWarning(config, heapLimitBytes), privateDocumentNetworksWarning(config)].filter(
    (warning): warning is string => warning !== null,
  );
}

/** Heap a started tokengate holds before it caches anything (measured: about 21 MB), with room to spare. */
const BASE_HEAP_BYTES = 32 * 1024 * 1024;
/** Heap one cached token holds (measured: about 300 bytes with 100,000 cached). */
const CACHED_TOKEN_BYTES = 300;
/** A remembered unknown token is its digest and a marker, no record: an estimate below a cached token's. */
const UNKNOWN_TOKEN_BYTES = 200;
/** An old generation filled past this share of its limit spends its time collecting, then runs out. */
const HEAP_SHARE = 0.75;
/** The young generation's part of V8's heap limit on 64-bit with the image's flags (three semi-spaces of 16 MB): the cache lives in the old one. */
const YOUNG_GENERATION_BYTES = 48 * 1024 * 1024;

/**
 * A full cache that would not fit the heap V8 was given (`--max-old-space-size`, which the image
 * sets small to keep a sidecar's memory low): the process would slow down collecting, then abort.
 */
function cacheHeapWarning({ cache }: Readonly<Config>, heapLimitBytes: number): string | null {
  if (!cache.enabled) return null;
  const cacheBytes = cache.maxEntries * CACHED_TOKEN_BYTES + (cache.negativeTtlSeconds > 0 ? cache.negativeMaxEntries * UNKNOWN_TOKEN_BYTES : 0);
  const neededBytes = BASE_HEAP_BYTES + cacheBytes;
  const oldGenerationBytes = Math.max(heapLimitBytes - YOUNG_GENERATION_BYTES, heapLimitBytes / 2);
  if (neededBytes <= oldGenerationBytes * HEAP_SHARE) return null;
  const mib = (bytes: number) => Math.ceil(bytes / 1024 / 1024);
  return `cache.maxEntries (${cache.maxEntries}) and cache.negativeMaxEntries (${cache.negativeMaxEntries}) need about ${mib(neededBytes)} MB of heap when the cache is full, more than ${Math.round(HEAP_SHARE * 100)} % of the ${mib(oldGenerationBytes)} MB old generation this process may use: give node --max-old-space-size=${Math.ceil(mib(neededBytes) / HEAP_SHARE)} or more (NODE_OPTIONS), or lower the cache sizes.`;
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

/** Documents allowed from private networks: right for tests and a private deployment, a server-side request forgery risk anywhere else. */
function privateDocumentNetworksWarning({ clientMetadataDocuments }: Readonly<Config>): string | null {
  const networks = clientMetadataDocuments.allowPrivateNetworks;
  if (!clientMetadataDocuments.enabled || networks.length === 0) return null;
  return `clientMetadataDocuments.allowPrivateNetworks lets client metadata documents be fetched from ${networks.join(', ')}: any host on the allow list that resolves there is fetched from, so keep it to tests and private deployments, and never list a network with services that trust requests from tokengate.`;
}
