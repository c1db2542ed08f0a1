import type { Socket } from 'node:net';
import { rawErrorResponse, TokengateError } from '../errors.js';
import { addressKey } from '../http/client-address.js';
import type { Metrics } from '../observability/metrics.js';
import { ignore, type Closing } from './closing.js';
import type { ListenerLimits, ListenerName } from './limits.js';

/**
 * `maxConnections` open at once, `maxConnectionsPerAddress` from one client address: one more is
 * answered (503, 429) and closed without being read as HTTP.
 */
export interface ConnectionLimits {
  /** Counts the connection in, or answers and closes it: whether it may reach the HTTP parser. */
  admit(socket: Socket): boolean;
}

export function createConnectionLimits(listener: ListenerName, limits: ListenerLimits, metrics: Metrics, closing: Closing): ConnectionLimits {
  const openGauge = metrics.openConnections.labels(listener);
  const refusals = {
    max_connections: {
      count: metrics.refusedConnections.labels(listener, 'max_connections'),
      answer: rawErrorResponse(new TokengateError('TOO_MANY_CONNECTIONS')),
    },
    max_connections_per_address: {
      count: metrics.refusedConnections.labels(listener, 'max_connections_per_address'),
      answer: rawErrorResponse(new TokengateError('TOO_MANY_CONNECTIONS_FROM_ADDRESS')),
    },
  };
  let open = 0;
  const perAddress = new Map<string, number>();

  function count(socket: Socket): keyof typeof refusals | undefined {
    if (open >= limits.maxConnections) return 'max_connections';
    let key: string | undefined;
    if (limits.maxConnectionsPerAddress > 0) {
      key = addressKey(socket.remoteAddress ?? '');
      const count = perAddress.get(key) ?? 0;
      if (count >= limits.maxConnectionsPerAddress) return 'max_connections_per_address';
      perAddress.set(key, count + 1);
    }
    open += 1;
    openGauge.inc();
    socket.once('close', () => {
      open -= 1;
      openGauge.dec();
      if (key === undefined) return;
      const count = perAddress.get(key)! - 1;
      if (count === 0) perAddress.delete(key);
      else perAddress.set(key, count);
    });
    return undefined;
  }

  function refuse(socket: Socket, reason: keyof typeof refusals): void {
    refusals[reason].count.inc();
    socket.on('error', ignore);
    // A flood of refusals must not hold sockets of its own: past the limit's worth, no answer.
    if (closing.size >= limits.maxConnections) {
      socket.destroy();
      return;
    }
    closing.closeAfter(socket, refusals[reason].answer, false);
  }

  return {
    admit(socket) {
      const refusal = count(socket);
      if (refusal === undefined) return true;
      refuse(socket, refusal);
      return false;
    },
  };
}
