import { isIPv4, isIPv6 } from 'node:net';

/**
 * The key under which a client address is counted (connections per address, failed sign-ins
 * per address): an IPv4 address as is (IPv4-mapped IPv6 included), an IPv6 address by its /64
 * network, which one host or home usually holds whole: counted address by address, one client
 * would have 2^64 fresh counts to spend.
 */
export function addressKey(address: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped !== null) return mapped[1]!;
  const withoutZone = address.split('%', 1)[0]!;
  if (isIPv4(address) || !isIPv6(withoutZone)) return address;
  const [left, right] = withoutZone.split('::') as [string, string | undefined];
  const head = ipv6Groups(left);
  const tail = right === undefined ? [] : ipv6Groups(right);
  const groups = right === undefined ? head : [...head, ...Array<string>(8 - head.length - tail.length).fill('0'), ...tail];
  return `${groups
    .slice(0, 4)
    .map((group) => parseInt(group, 16).toString(16))
    .join(':')}::/64`;
}

/** The 16-bit groups of one side of an IPv6 address; a trailing dotted IPv4 part counts as two. */
function ipv6Groups(part: string): string[] {
  if (part === '') return [];
  return part.split(':').flatMap((group) => (group.includes('.') ? ['0', '0'] : [group]));
}
