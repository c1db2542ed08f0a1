import { maxHeaderSize } from 'node:http';
import { createRequire } from 'node:module';
import type { buildConnector, Client as UndiciClient, Dispatcher, Pool as UndiciPool } from 'undici';
import { filterInterimAnswers, InterimAnswerFilter } from './interim-answers.js';

/**
 * undici's Pool and Client, loaded alone: undici's entry point also loads fetch, WebSocket, its
 * caches and mock agents, which the gateway never uses and which cost a sidecar about 5 MB of
 * memory for nothing (measured: idle RSS 91-94 MB with the entry point, 85-87 MB without).
 */
const load = createRequire(import.meta.url);
const UndiciPoolClass = load('undici/lib/dispatcher/pool.js') as typeof UndiciPool;
const UndiciClientClass = load('undici/lib/dispatcher/client.js') as typeof UndiciClient;

/**
 * One upstream connection: undici's Client, with the unsolicited 100 Continue answers of its
 * socket dropped (src/gateway/interim-answers.ts). The pool hands a connection a request only
 * once the one before it is answered (one request at a time on each), so a dispatch is where
 * the next answer starts.
 */
class UpstreamConnection extends UndiciClientClass {
  /** The filter of the connection's current socket (a new one for each socket it opens). */
  private readonly socket: { filter: InterimAnswerFilter | null };

  constructor(origin: URL, options: UndiciClient.Options) {
    const connect = options.connect as buildConnector.connector;
    const headLimit = options.maxHeaderSize ?? maxHeaderSize;
    const socket: { filter: InterimAnswerFilter | null } = { filter: null };
    super(origin, {
      ...options,
      connect(connectOptions, callback) {
        connect(connectOptions, (...result) => {
          if (result[0] === null) {
            socket.filter = new InterimAnswerFilter(headLimit);
            filterInterimAnswers(result[1], socket.filter);
          }
          callback(...result);
        });
      },
    });
    this.socket = socket;
  }

  override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    this.socket.filter?.expectAnswer();
    return super.dispatch(options, handler);
  }
}

/** The keep-alive connections to one upstream origin: one request at a time on each, unsolicited 100s dropped. */
export class Pool extends UndiciPoolClass {
  constructor(origin: string, options: Omit<UndiciPool.Options, 'factory' | 'pipelining'>) {
    super(origin, { ...options, pipelining: 1, factory: (url, connectionOptions) => new UpstreamConnection(url, connectionOptions as UndiciClient.Options) });
  }
}
