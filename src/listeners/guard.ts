import type { IncomingMessage, Server, ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import { createAnswerOrder, type AnswerOrder } from './answer-order.js';
import { createClosing, ignore, type Closing } from './closing.js';
import { createConnectionLimits, type ConnectionLimits } from './connection-limits.js';
import type { ListenerLimits, ListenerName } from './limits.js';

export type { ListenerLimits, ListenerName };

/**
 * What one client can hold on a listener, and how the answers the HTTP layer gives on its own
 * reach the client. Every listener gets the same rules; docs/operations.md says what each limit
 * is and what a client sees when it hits it.
 *
 * - Time: a whole request, head and body, within `requestTimeoutMs`, then 408 and close.
 * - Sockets: ./connection-limits.ts.
 * - Order: ./answer-order.ts.
 */

export interface ListenerGuard {
  /** Fastify options of the listener: its timeouts and the answer to requests node's parser refuses. `http` is the listener's own server options. */
  serverOptions(http?: ServerOptions): {
    requestTimeout: number;
    keepAliveTimeout: number;
    http: ServerOptions;
    clientErrorHandler: (error: Error, socket: Duplex) => void;
  };
  /** Puts the connection limits, the CONNECT answer and the ordering of answers on the listener's server; call it before anything else listens for connections. */
  attach(instance: FastifyInstance): void;
  /** The same on a plain node:http server, whose `clientError` is the guard's too (a listener without fastify: no upgrades to order). */
  attachServer(server: Server): void;
}

/**
 * Node checks the deadlines of the requests in progress on an interval, 30 s by default: a
 * tenth of the timeout, at most a second, bounds a request by `requestTimeoutMs` plus that.
 */
export function timeoutCheckIntervalMs(requestTimeoutMs: number): number {
  return Math.min(1_000, Math.ceil(requestTimeoutMs / 10));
}

/**
 * A kept-alive connection with no request in progress is closed after this long: longer than
 * the 60 s idle timeout of the usual load balancers, so that they close first and never send a
 * request on a connection tokengate is closing.
 */
const IDLE_TIMEOUT_MS = 72_000;

export function createListenerGuard(listener: ListenerName, limits: ListenerLimits, metrics: Metrics): ListenerGuard {
  const closing = createClosing(limits.requestTimeoutMs);
  const connections = createConnectionLimits(listener, limits, metrics, closing);
  const order = createAnswerOrder(listener, limits, metrics, closing);
  return {
    attachServer(server) {
      server.on('clientError', order.onClientError);
      guardServer(server, connections, order);
    },
    serverOptions(http = {}) {
      const requestTimeout = limits.requestTimeoutMs;
      return {
        requestTimeout,
        keepAliveTimeout: IDLE_TIMEOUT_MS,
        // The head is part of the request, so its deadline is the same. Node takes the shorter of
        // the two for the head and the longer for the body: left at its 60 s default, the head
        // timeout would have become the body's whenever requestTimeout was shorter.
        http: { ...http, requestTimeout, headersTimeout: requestTimeout, connectionsCheckingInterval: timeoutCheckIntervalMs(requestTimeout) },
        clientErrorHandler: order.onClientError,
      };
    },
    attach(instance) {
      guardServer(instance.server as Server, connections, order);
      orderUpgrades(instance, order, closing);
    },
  };
}

function guardServer(server: Server, connections: ConnectionLimits, order: AnswerOrder): void {
  // Connections over a limit are answered here and never reach node's HTTP parser, so the
  // parser's own connection listener runs only for the admitted ones.
  const parserListeners = server.listeners('connection') as Array<(socket: Socket) => void>;
  server.removeAllListeners('connection');
  server.on('connection', (socket: Socket) => {
    if (!connections.admit(socket)) return;
    for (const listener of parserListeners) listener.call(server, socket);
  });
  // First, so that an answer a handler gives at once is counted too.
  server.prependListener('request', order.trackAnswer);
  // Without a listener node closes a CONNECT's connection without a word.
  server.on('connect', order.onConnect);
}

/**
 * Node hands a pipelined upgrade to its listeners at once, while the answers before it are still
 * being written on the same socket (a response assigned to that socket then throws). The
 * listeners, all registered once the instance is ready, run once those answers are out. Without
 * any, node treats an Upgrade header as an ordinary request: nothing to wrap then.
 */
function orderUpgrades(instance: FastifyInstance, order: AnswerOrder, closing: Closing): void {
  const server = instance.server as Server;
  instance.addHook('onReady', (done) => {
    type UpgradeListener = (request: IncomingMessage, socket: Duplex, head: Buffer) => void;
    const upgradeListeners = server.listeners('upgrade') as UpgradeListener[];
    if (upgradeListeners.length > 0) {
      server.removeAllListeners('upgrade');
      server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
        // Node took its own error listener off with the parser: a reset while waiting must not throw.
        socket.on('error', ignore);
        order.whenAnswered(socket, () => {
          for (const listener of upgradeListeners) listener.call(server, request, socket, head);
        });
      });
    }
    done();
  });
  instance.addHook('preClose', (done) => {
    closing.destroyAll();
    done();
  });
}
