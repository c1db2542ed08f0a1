// The few parts of `ws` (installed with @fastify/http-proxy, which ships no types for it) that
// the tests use to run a real WebSocket upstream.
declare module 'ws' {
  import type { EventEmitter } from 'node:events';
  import type { IncomingMessage, Server } from 'node:http';

  export class WebSocket extends EventEmitter {
    send(data: string): void;
    close(): void;
  }

  export class WebSocketServer extends EventEmitter {
    constructor(options: { server: Server });
    on(event: 'connection', listener: (socket: WebSocket, request: IncomingMessage) => void): this;
    close(callback?: () => void): void;
  }
}
