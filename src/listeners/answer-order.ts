import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { rawErrorResponse, TokengateError } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import { ignore, type Closing } from './closing.js';
import type { ListenerLimits, ListenerName } from './limits.js';

/**
 * An answer the HTTP layer writes itself (a malformed or timed-out request, CONNECT) waits for
 * the answers to the whole requests before it on the connection (pipelining), however they are
 * written, then the connection closes. A pipelined upgrade waits for them too before its
 * listeners see it.
 */
export interface AnswerOrder {
  /** The server's first `request` listener: keeps the connection's open answers. */
  trackAnswer(request: IncomingMessage, response: ServerResponse): void;
  /** The server's `clientError`: node's parser refused the request (counted and answered in turn). */
  onClientError(error: Error & { code?: string }, socket: Duplex): void;
  /** The server's `connect`: CONNECT is refused with the listener's methods, in turn. */
  onConnect(request: IncomingMessage, socket: Duplex): void;
  /** Runs `then` once the answers to the requests before on this connection are out. */
  whenAnswered(socket: Duplex, then: () => void): void;
}

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
interface ClosingAfterError {
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
  [kClosing]?: ClosingAfterError;
  /** What to do once every open answer is out: a CONNECT or an upgrade that came pipelined behind requests. */
  [kWhenAnswered]?: () => void;
}

export function createAnswerOrder(listener: ListenerName, limits: ListenerLimits, metrics: Metrics, closing: Closing): AnswerOrder {
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
    closing.closeAfter(socket, unanswered ? state.answer : undefined, true);
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

  return {
    trackAnswer(request, response) {
      const socket = request.socket as GuardedSocket;
      (socket[kOpenAnswers] ??= new Set()).add(response);
      socket[kLastAnswer] = response;
      // Kept on the response: node clears the request's reference when the connection ends.
      (response as GuardedResponse)[kSocket] = socket;
      const state = socket[kClosing];
      if (state !== undefined) state.dispatchedSince = true;
      // One listener function for every response, not a closure per request.
      response.on('close', answerClosed);
    },
    onClientError(error, socket) {
      const guarded = socket as GuardedSocket;
      // The parser repeats its error for every chunk that follows: the first one decides.
      if (error.code === 'ECONNRESET' || socket.destroyed || guarded[kClosing] !== undefined) return;
      const known = CLIENT_ERRORS[error.code as keyof typeof CLIENT_ERRORS] ?? MALFORMED;
      const { count, answer } = clientErrors.get(known.reason)!;
      count.inc();
      const last = guarded[kLastAnswer];
      guarded[kClosing] = { answer, subject: last !== undefined && !last.req.complete ? last : undefined, dispatchedSince: false, settled: false };
      settle(guarded);
    },
    onConnect(_request, socket) {
      socket.on('error', ignore);
      connectMethod.count.inc();
      whenAnswered(socket as GuardedSocket, () => closing.closeAfter(socket, connectMethod.answer, false));
    },
    whenAnswered: (socket, then) => whenAnswered(socket as GuardedSocket, then),
  };
}

/**
 * Node detaches its parser before a CONNECT or an upgrade, so no request can follow, and with it
 * what aborts the requests in progress when the connection drops: that is done here instead,
 * as node would.
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
