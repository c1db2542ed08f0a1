import type { IncomingMessage } from 'node:http';
import proxyAddr from '@fastify/proxy-addr';

/**
 * The proxies whose forwarding headers (X-Forwarded-For, -Proto, -Host) tokengate believes
 * (`server.trustProxy`): a number of hops in front of it, or the proxies' addresses and CIDR
 * ranges. Whatever a client writes itself stays the client's word: X-Forwarded-For is read
 * from the right, each hop a trusted proxy appended, and the client address is the first entry
 * that no trusted proxy wrote.
 */
export type TrustProxySetting = boolean | number | readonly string[];

/** Whether the hop `hop` away (0: the peer) at `address` is a trusted proxy. */
export type ProxyTrust = (address: string, hop: number) => boolean;

/** The trust of a setting; null when no forwarding header is believed. */
export function proxyTrust(setting: TrustProxySetting): ProxyTrust | null {
  if (setting === false || setting === 0) return null;
  if (setting === true) throw new Error('server.trustProxy: true is refused when the config is loaded');
  if (typeof setting === 'number') {
    const hops = setting;
    return (_address, hop) => hop < hops;
  }
  return proxyAddr.compile([...setting]);
}

/** Why an entry of the list is not an address, a CIDR range or a named range; null when it is one. */
export function trustedProxyProblem(entry: string): string | null {
  try {
    proxyAddr.compile(entry);
    return null;
  } catch (error) {
    return (error as Error).message;
  }
}

/**
 * The addresses of a request, nearest first: the peer, each trusted proxy behind it, and last
 * the client's (the first that no trusted proxy stands for). Without trust, the peer alone.
 */
export function forwardedChain(request: IncomingMessage, trust: ProxyTrust | null): string[] {
  if (trust === null) return [request.socket.remoteAddress ?? ''];
  return proxyAddr.all(request, trust);
}

/** The last value of a forwarding header a trusted proxy may have repeated (each proxy appends): what fastify reads too. */
export function lastForwardedValue(value: string | string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  const joined = Array.isArray(value) ? value.join(',') : value;
  const last = joined.slice(joined.lastIndexOf(',') + 1).trim();
  return last === '' ? undefined : last;
}
