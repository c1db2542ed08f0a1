// @ts-check
/**
 * The ingress examples of this folder with the addresses of one run (tests, benchmarks). Only
 * the addresses change, and an address the example no longer names is an error, so what runs is
 * exactly the file a reader copies.
 */
import { readFileSync } from 'node:fs';

/**
 * The addresses the examples are written with (host:port each): where the ingress listens,
 * tokengate's decision listener, and the example user and organizer APIs
 * (examples/ticketing-api).
 */
export const EXAMPLE_ADDRESSES = Object.freeze({
  ingress: '127.0.0.1:8000',
  decisions: '127.0.0.1:9191',
  userApi: '127.0.0.1:3001',
  organizerApi: '127.0.0.1:3002',
});

/** @typedef {{ [Name in keyof typeof EXAMPLE_ADDRESSES]: string }} Addresses */

/**
 * @param {string} file the example's name in this folder
 * @param {Partial<Addresses>} addresses the addresses the example names
 */
function withAddresses(file, addresses) {
  const text = readFileSync(new URL(file, import.meta.url), 'utf8');
  /** @type {Map<string, string>} */
  const byExample = new Map(
    Object.entries(addresses).map(([name, address]) => [EXAMPLE_ADDRESSES[/** @type {keyof Addresses} */ (name)], /** @type {string} */ (address)]),
  );
  for (const example of byExample.keys()) {
    if (!text.includes(example)) throw new Error(`examples/ingress/${file} no longer names ${example}`);
  }
  // One pass, so an address given for one name is never replaced again as another's example.
  const pattern = new RegExp([...byExample.keys()].map((example) => example.replaceAll('.', '\\.')).join('|'), 'g');
  return text.replace(pattern, (example) => /** @type {string} */ (byExample.get(example)));
}

/**
 * An nginx example for these addresses: examples/ingress/nginx.conf (auth_request), or
 * nginx-decision-cache.conf (the same with a cache of tokengate's decisions). Its paths are
 * relative to nginx's prefix: run it with `nginx -p DIR -c FILE -e DIR/error.log`.
 * @param {Addresses} addresses
 * @param {{ workerProcesses?: number | 'auto', example?: 'nginx.conf' | 'nginx-decision-cache.conf' }} [options]
 */
export function nginxConf(addresses, { workerProcesses = 'auto', example = 'nginx.conf' } = {}) {
  const text = withAddresses(example, addresses);
  if (!text.includes('worker_processes auto;')) throw new Error(`examples/ingress/${example} no longer sets worker_processes auto`);
  return text.replace('worker_processes auto;', `worker_processes ${workerProcesses};`);
}

/**
 * examples/ingress/nginx-decision-cache.conf for these addresses.
 * @param {Addresses} addresses
 * @param {{ workerProcesses?: number | 'auto' }} [options]
 */
export function nginxDecisionCacheConf(addresses, options = {}) {
  return nginxConf(addresses, { ...options, example: 'nginx-decision-cache.conf' });
}

/**
 * examples/ingress/Caddyfile for these addresses (run it with `caddy run --adapter caddyfile --config FILE`).
 * @param {Addresses} addresses
 */
export function caddyfile(addresses) {
  // A Caddy site names its port, and binds its host apart.
  const { ingress, ...others } = addresses;
  const [host, port] = ingress.split(':');
  const text = withAddresses('Caddyfile', others);
  const site = 'http://:8000 {\n\tbind 127.0.0.1\n';
  if (!text.includes(site)) throw new Error('examples/ingress/Caddyfile no longer serves http://:8000 bound to 127.0.0.1');
  return text.replace(site, `http://:${port} {\n\tbind ${host}\n`);
}
