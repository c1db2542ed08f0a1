import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import { isIPv4, isIPv6, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { rawErrorResponse, TokengateError } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';

/**
 * What one client can hold on a listener, and how the answers the HTTP layer gives on its own
 * reach the client. Both listeners (public and ops) get the same rules; docs/operations.md says
 * what each limit is and what a client sees when it hits it.
 *
 * - Time: a whole request, head and body, within `requestTimeoutMs`, then 408 and close.
 * - Sockets: `maxConnections` open at once, `maxConnectionsPerAddress` from one client address;
 *   one more is answered (503, 429) and closed without being read as HTTP.
 * - Order: an answer the HTTP layer writes itself (a malformed or timed-out request, CONNECT)
 *   waits for the answers to the whole requests before it on the connection (pipelining),
 *   however they are written, then the connection closes. A pipelined upgrade waits for them
 *   too before its listeners see it.
 */

export type ListenerName = 'public' | 'ops' | 'decisions';

export interface ListenerLimits {
  /** Time a client has to send a whole request, head and body. */
  readonly requestTimeoutMs: number;
  readonly maxConnections: number;
  /** 0: no limit per address. */
  readonly maxConnectionsPerAddress: number;
  /** Methods the listener serves: the Allow header of its answer to CONNECT. */
  readonly methods: readonly string[];
}

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

/**
 * How long a refused connection (a limit, or CONNECT) keeps reading and dropping what the client
 * sends after its answer: closing at once, with the request still arriving, would reset the
 * connection and could destroy the answer before the client reads it.
 */
const REFUSAL_LINGER_MS = 1_000;

/** What the parser's failures are counted and answered as. */
const CLIENT_ERRORS = {
  ERR_HTTP_REQUEST_TIMEOUT: { reason: 'request_timeout', failure: 'REQUEST_TIMEOUT' },
  HPE_HEADER_OVERFLOW: { reason: 'headers_too_large', failure: 'HEADERS_TOO_LARGE' },
} as const;
const MALFORMED = { reason: 'malformed', failure: 'INVALID_REQUEST' } as const;

const kOpenAnswers = Symbol('tokengate.openAnswers');
const kLastAnswer = Symbol('tokengate.lastAnswer');
const kClosing = Symbol('tokengate.closing');
const kWhenAnswered = Symbol('tokengate.whenAnswered');
const kSocket = Symbol('tokengate.socket');

/** A connection that is to close after an error answer, once the answers before it are out. */
interface Closing {
  /** The raw answer to write, if the request it answers still has none when its turn comes. */
  readonly answer: string;
  /** The response of the request the error is about, when node had dispatched it (its body failed); undefined when its head failed. */
  readonly subject: ServerResponse | undefined;
  /** A request was dispatched after the error (a slow head that completed after its timeout): it gets its own answer. */
  dispatchedSince: boolean;
  settled: boolean;
}

/** A response on a guarded connection, with the socket it answers on. */
interface GuardedResponse extends ServerResponse {
  [kSocket]: GuardedSocket;
}

interface GuardedSocket extends Socket {
  /** Responses of this connection's requests that have not closed yet. */
  [kOpenAnswers]?: Set<ServerResponse>;
  /** The response of the latest request dispatched on this connection. */
  [kLastAnswer]?: ServerResponse;
  [kClosing]?: Closing;
  /** What to do once every open answer is out: a CONNECT or an upgrade that came pipelined behind requests. */
  [kWhenAnswered]?: () => void;
}

export function createListenerGuard(listener: ListenerName, limits: ListenerLimits, metrics: Metrics): ListenerGuard {
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
  const clientErrors = new Map(
    [...Object.values(CLIENT_ERRORS), MALFORMED].map(({ reason, failure }) => [
      reason,
      { count: metrics.clientErrors.labels(listener, reason), answer: rawErrorResponse(new TokengateError(failure)) },
    ]),
  );
  const connectMethod = {
    count: metrics.clientErrors.labels(listener, 'connect'),
    answer: rawErrorResponse(
      new TokengateError('METHOD_NOT_ALLOWED', { description: 'This server does not accept CONNECT.', headers: { allow: limits.methods.join(', ') } }),
    ),
  };

  let open = 0;
  const perAddress = new Map<string, number>();
  /** Connections being closed after an answer: a shutdown does not wait for them. */
  const closing = new Set<Duplex>();

  function admit(socket: Socket): keyof typeof refusals | undefined {
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
    closeAfter(socket, refusals[reason].answer, false);
  }

  /**
   * Writes `answer` (if any) and closes. While node's parser still reads the connection, it is
   * destroyed as soon as the answer is out (or after requestTimeoutMs, for a client that does not
   * read), so nothing more is parsed as a request. Otherwise it reads and drops what the client
   * still sends, and closes when the client does, or after a short linger.
   */
  function closeAfter(socket: Duplex, answer: string | undefined, parsing: boolean): void {
    if (socket.destroyed) return;
    closing.add(socket);
    const timer = setTimeout(() => socket.destroy(), parsing ? limits.requestTimeoutMs : REFUSAL_LINGER_MS).unref();
    socket.once('close', () => {
      clearTimeout(timer);
      closing.delete(socket);
    });
    if (!parsing) socket.resume();
    if (socket.writable) socket.end(answer);
    if (!parsing) return;
    if (socket.writableFinished) socket.destroy();
    else socket.once('finish', () => socket.destroy());
  }

  /**
   * Runs `then` once the answers to the requests before on this connection are out. Node detaches
   * its parser before a CONNECT or an upgrade, so none can follow, and with it what aborts the
   * requests in progress when the connection drops: that is done here instead, as node would.
   */
  function whenAnswered(socket: GuardedSocket, then: () => void): void {
    const open = socket[kOpenAnswers];
    if (open === undefined || open.size === 0) return then();
    socket[kWhenAnswered] = then;
    const inProgress = [...open];
    socket.once('close', () => {
      for (const response of inProgress) {
        if (!response.writableFinished) response.req.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
      }
    });
  }

  /** Closes the connection once no whole request on it is still being answered. */
  function settle(socket: GuardedSocket): void {
    const state = socket[kClosing]!;
    if (state.settled) return;
    const openAnswers = socket[kOpenAnswers]?.size ?? 0;
    const subjectIncomplete = state.subject !== undefined && !state.subject.req.complete;
    // Node sends answers in the order of their requests, and an incomplete subject is the last
    // request: when it is open, it is the last open answer.
    if (openAnswers - (subjectIncomplete && openAnswers > 0 ? 1 : 0) > 0) return;
    state.settled = true;
    const unanswered = state.subject !== undefined ? subjectIncomplete && !state.subject.headersSent : !state.dispatchedSince;
    closeAfter(socket, unanswered ? state.answer : undefined, true);
  }

  function trackAnswer(request: IncomingMessage, response: ServerResponse): void {
    const socket = request.socket as GuardedSocket;
    (socket[kOpenAnswers] ??= new Set()).add(response);
    socket[kLastAnswer] = response;
    // Kept on the response: node clears the request's reference when the connection ends.
    (response as GuardedResponse)[kSocket] = socket;
    const state = socket[kClosing];
    if (state !== undefined) state.dispatchedSince = true;
    // One listener function for every response, not a closure per request.
    response.on('close', answerClosed);
  }

  function answerClosed(this: GuardedResponse): void {
    const socket = this[kSocket];
    const open = socket[kOpenAnswers]!;
    open.delete(this);
    // An idle keep-alive connection need not hold on to its last exchange; one answered before
    // its body arrived stays, as the subject of a timeout to come.
    if (socket[kLastAnswer] === this && this.req.complete) socket[kLastAnswer] = undefined;
    if (socket[kClosing] !== undefined) settle(socket);
    const then = socket[kWhenAnswered];
    if (then !== undefined && open.size === 0) {
      socket[kWhenAnswered] = undefined;
      if (!socket.destroyed) then();
    }
  }

  function onClientError(error: Error & { code?: string }, socket: Duplex): void {
    const guarded = socket as GuardedSocket;
    // The parser repeats its error for every chunk that follows: the first one decides.
    if (error.code === 'ECONNRESET' || socket.destroyed || guarded[kClosing] !== undefined) return;
    const known = CLIENT_ERRORS[error.code as keyof typeof CLIENT_ERRORS] ?? MALFORMED;
    const { count, answer } = clientErrors.get(known.reason)!;
    count.inc();
    const last = guarded[kLastAnswer];
    guarded[kClosing] = { answer, subject: last !== undefined && !last.req.complete ? last : undefined, dispatchedSince: false, settled: false };
    settle(guarded);
  }

  function guardServer(server: Server): void {
    // Connections over a limit are answered here and never reach node's HTTP parser, so the
    // parser's own connection listener runs only for the admitted ones.
    const parserListeners = server.listeners('connection') as Array<(socket: Socket) => void>;
    server.removeAllListeners('connection');
    server.on('connection', (socket: Socket) => {
      const refusal = admit(socket);
      if (refusal !== undefined) return refuse(socket, refusal);
      for (const listener of parserListeners) listener.call(server, socket);
    });
    // First, so that an answer a handler gives at once is counted too.
    server.prependListener('request', trackAnswer);
    // Without a listener node closes a CONNECT's connection without a word.
    server.on('connect', (_request: IncomingMessage, socket: Duplex) => {
      socket.on('error', ignore);
      connectMethod.count.inc();
      whenAnswered(socket as GuardedSocket, () => closeAfter(socket, connectMethod.answer, false));
    });
  }

  return {
    attachServer(server) {
      server.on('clientError', onClientError);
      guardServer(server);
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
        clientErrorHandler: onClientError,
      };
    },

    attach(instance) {
      const server = instance.server as Server;
      guardServer(server);
      // Node hands a pipelined upgrade to its listeners at once, while the answers before it are
      // still being written on the same socket (a response assigned to that socket then throws).
      // The listeners, all registered by now, run once those answers are out. Without any,
      // node treats an Upgrade header as an ordinary request: nothing to wrap then.
      instance.addHook('onReady', (done) => {
        type UpgradeListener = (request: IncomingMessage, socket: Duplex, head: Buffer) => void;
        const upgradeListeners = server.listeners('upgrade') as UpgradeListener[];
        if (upgradeListeners.length > 0) {
          server.removeAllListeners('upgrade');
          server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
            // Node took its own error listener off with the parser: a reset while waiting must not throw.
            socket.on('error', ignore);
            whenAnswered(socket as GuardedSocket, () => {
              for (const listener of upgradeListeners) listener.call(server, request, socket, head);
            });
          });
        }
        done();
      });
      instance.addHook('preClose', (done) => {
        for (const socket of closing) socket.destroy();
        done();
      });
    },
  };
}

/**
 * The address a per-address limit counts under: an IPv4 address as is (IPv4-mapped IPv6
 * included), an IPv6 address by its /64 network, which one host or home usually holds whole.
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

function ignore(): void {}
