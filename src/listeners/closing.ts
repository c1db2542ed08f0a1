import type { Duplex } from 'node:stream';

/**
 * How long a refused connection (a limit, or CONNECT) keeps reading and dropping what the client
 * sends after its answer: closing at once, with the request still arriving, would reset the
 * connection and could destroy the answer before the client reads it.
 */
const REFUSAL_LINGER_MS = 1_000;

/** The connections of one listener that are being closed after an answer. */
export interface Closing {
  /** How many: a flood of refusals must not hold more sockets than the listener admits. */
  readonly size: number;
  /**
   * Writes `answer` (if any) and closes. While node's parser still reads the connection, it is
   * destroyed as soon as the answer is out (or after requestTimeoutMs, for a client that does not
   * read), so nothing more is parsed as a request. Otherwise it reads and drops what the client
   * still sends, and closes when the client does, or after a short linger.
   */
  closeAfter(socket: Duplex, answer: string | undefined, parsing: boolean): void;
  /** A shutdown does not wait for them. */
  destroyAll(): void;
}

export function createClosing(requestTimeoutMs: number): Closing {
  const closing = new Set<Duplex>();
  return {
    get size() {
      return closing.size;
    },
    closeAfter(socket, answer, parsing) {
      if (socket.destroyed) return;
      closing.add(socket);
      const timer = setTimeout(() => socket.destroy(), parsing ? requestTimeoutMs : REFUSAL_LINGER_MS).unref();
      socket.once('close', () => {
        clearTimeout(timer);
        closing.delete(socket);
      });
      if (!parsing) socket.resume();
      if (socket.writable) socket.end(answer);
      if (!parsing) return;
      if (socket.writableFinished) socket.destroy();
      else socket.once('finish', () => socket.destroy());
    },
    destroyAll() {
      for (const socket of closing) socket.destroy();
    },
  };
}

export function ignore(): void {}
