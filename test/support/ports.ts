import { readFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';

/**
 * Ports below the range the kernel takes the local ports of outgoing connections from: a port
 * handed out there stays free until its server binds it, where one from the kernel's own range
 * can meanwhile become the local end of any connection the suite opens (a Redis client, a fetch),
 * and the server that was to listen on it fails to start. Null where the range leaves no room.
 */
const LISTENER_PORTS: { readonly low: number; readonly count: number } | null = (() => {
  try {
    const [ephemeralLow] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    // From 10000 up: clear of the well-known services' ports (Redis, PostgreSQL, the Quick start's).
    if (ephemeralLow === undefined || ephemeralLow < 15_000) return null;
    return ownShare({ low: 10_000, count: ephemeralLow - 10_000 });
  } catch {
    return null;
  }
})();

/**
 * This vitest worker's own slice of `range`: files run side by side, each in a worker numbered
 * VITEST_POOL_ID (1 to maxWorkers), so two files never draw the same port between its check and
 * its server's bind (a Cluster node of one file once answered on the port another file had just
 * been handed). The whole range outside vitest.
 */
function ownShare(range: { low: number; count: number }): { low: number; count: number } {
  const worker = Number(process.env.VITEST_POOL_ID);
  const workers = 8;
  if (!Number.isInteger(worker) || worker < 1) return range;
  const count = Math.floor(range.count / workers);
  return { low: range.low + ((worker - 1) % workers) * count, count };
}

/** Listens on `port` (0: one the kernel picks) and closes again: the port, or null when it was taken. */
function tryPort(port: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', (error: NodeJS.ErrnoException) => (error.code === 'EADDRINUSE' || error.code === 'EACCES' ? resolve(null) : reject(error)));
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** A loopback port nothing listens on right now (for a server that must name its port before it starts, or a refused connection). */
export async function freePort(): Promise<number> {
  for (let attempt = 0; LISTENER_PORTS !== null && attempt < 50; attempt++) {
    const port = await tryPort(LISTENER_PORTS.low + Math.floor(Math.random() * LISTENER_PORTS.count));
    if (port !== null) return port;
  }
  const port = await tryPort(0);
  if (port === null) throw new Error('no free loopback port');
  return port;
}

/** Whether something accepts connections on a loopback port right now. */
export function acceptsConnections(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
