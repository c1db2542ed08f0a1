import { lookup as systemLookup, Resolver } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Which addresses a document may be fetched from, checked on the addresses the name resolves to
 * and nowhere else: the fetcher's `lookup` resolves the host once, refuses it when any address
 * is not public, and hands the connection the very address it checked, so a name that answers
 * a public address to the check and a private one to the connection (DNS rebinding) gets
 * nowhere. Classification is ipaddr.js's: loopback, private, unique-local, link-local (cloud
 * metadata services at 169.254.169.254 and fd00:ec2::254), carrier-grade NAT, multicast,
 * reserved and every other special range are refused; only `unicast` passes. An IPv4 address
 * mapped into IPv6 (::ffff:127.0.0.1) is judged as the IPv4 address it is.
 */

/** A host resolved to an address documents may not come from: no connection is made. */
export class ForbiddenAddressError extends Error {
  readonly code = 'ERR_CLIENT_METADATA_FORBIDDEN_ADDRESS';
  constructor(
    readonly host: string,
    readonly address: string,
    readonly range: string,
  ) {
    super(`${host} resolves to ${address} (${range}), which documents may not be fetched from`);
    this.name = 'ForbiddenAddressError';
  }
}

export type AddressPolicy = (address: string) => string | null;

/**
 * The range that forbids `address`, or null when documents may come from it: public unicast
 * addresses, and those in `allowedNetworks` (CIDRs the operator allows, for tests and private
 * deployments).
 */
export function addressPolicy(allowedNetworks: readonly string[]): AddressPolicy {
  const allowed = allowedNetworks.map((network) => ipaddr.parseCIDR(network));
  return (text) => {
    let address: ipaddr.IPv4 | ipaddr.IPv6 = ipaddr.parse(text);
    if (address.kind() === 'ipv6' && (address as ipaddr.IPv6).isIPv4MappedAddress()) address = (address as ipaddr.IPv6).toIPv4Address();
    for (const [network, bits] of allowed) if (network.kind() === address.kind() && address.match(network, bits)) return null;
    const range = address.range();
    return range === 'unicast' ? null : range;
  };
}

/** What the networks given in config allow, or why they cannot be parsed (for the config check). */
export function networkProblem(network: string): string | null {
  try {
    ipaddr.parseCIDR(network);
    return null;
  } catch {
    return 'expected a network in CIDR notation, e.g. 10.20.0.0/16 or fd12:3456::/48';
  }
}

export type Resolve = (host: string) => Promise<LookupAddress[]>;

/** The system's resolver (getaddrinfo: /etc/hosts, then DNS), or the given DNS servers'. */
export function resolverOf(nameServers: readonly string[]): Resolve {
  if (nameServers.length === 0) return (host) => systemLookup(host, { all: true, order: 'verbatim' });
  const resolver = new Resolver({ timeout: 2_000, tries: 1 });
  resolver.setServers([...nameServers]);
  return async (host) => {
    const [v4, v6] = await Promise.all([resolver.resolve4(host).catch(noRecords), resolver.resolve6(host).catch(noRecords)]);
    const addresses = [...v4.map((address) => ({ address, family: 4 })), ...v6.map((address) => ({ address, family: 6 }))];
    if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: 'ENOTFOUND' });
    return addresses;
  };
}

/** A family with no record is not a failure while the other has one. */
function noRecords(error: NodeJS.ErrnoException): string[] {
  if (error.code === 'ENODATA' || error.code === 'ENOTFOUND') return [];
  throw error;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net and tls connections: resolves once, refuses the host when any of its
 * addresses is forbidden (one private answer among public ones is enough to refuse: the
 * connection could be steered to it), and answers with the checked addresses only.
 */
export function guardedLookup(resolve: Resolve, policy: AddressPolicy) {
  return function lookup(host: string, options: { all?: boolean; family?: number | string }, callback: LookupCallback): void {
    resolve(host).then(
      (addresses) => {
        for (const { address } of addresses) {
          const range = policy(address);
          if (range !== null) return callback(new ForbiddenAddressError(host, address, range), '');
        }
        const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : Number(options.family ?? 0);
        const usable = family === 4 || family === 6 ? addresses.filter((entry) => entry.family === family) : addresses;
        if (usable.length === 0) return callback(Object.assign(new Error(`${host} has no IPv${family} address`), { code: 'ENOTFOUND' }), '');
        if (options.all === true) return callback(null, usable);
        return callback(null, usable[0]!.address, usable[0]!.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, ''),
    );
  };
}

/** A URL's host as an address when it is one (`[::1]` without its brackets); null for a name. */
export function literalAddress(hostname: string): string | null {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return isIP(bare) === 0 ? null : bare;
}
