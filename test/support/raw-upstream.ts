import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** One request as a raw upstream read it off its socket. */
export interface RawRequest {
  readonly method: string;
  readonly target: string;
  readonly head: string;
  readonly body: Buffer;
  /** Which connection it came on (0, 1...): requests on one kept-alive connection share it. */
  readonly connection: number;
}

/** What a raw upstream writes back: bytes exactly as given, a pause between writes, or closing the connection. */
export type RawStep = string | Buffer | { readonly pauseMs: number } | 'close';

export interface RawUpstream {
  readonly url: string;
  readonly requests: RawRequest[];
  readonly connections: number;
  close(): Promise<void>;
}

/**
 * An upstream that writes its answers byte for byte, as `answer` scripts them: status lines and
 * interim answers no HTTP server library would send, split where a test wants them split.
 * Request bodies are read by Content-Length or chunked framing.
 */
export async function startRawUpstream(answer: (request: RawRequest) => RawStep[]): Promise<RawUpstream> {
  const requests: RawRequest[] = [];
  const sockets = new Set<Socket>();
  let connections = 0;
  const server: Server = createServer((socket) => {
    const connection = connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    let buffered = Buffer.alloc(0);
    let answering = Promise.resolve();
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (let request = takeRequest(buffered, connection); request !== null; request = takeRequest(buffered, connection)) {
        buffered = buffered.subarray(request.length);
        const taken = request.request;
        requests.push(taken);
        answering = answering.then(() => play(socket, answer(taken)));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    get connections() {
      return connections;
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

async function play(socket: Socket, steps: RawStep[]): Promise<void> {
  for (const step of steps) {
    if (socket.destroyed) return;
    if (step === 'close') socket.end();
    else if (typeof step === 'object' && !Buffer.isBuffer(step)) await new Promise((resolve) => setTimeout(resolve, step.pauseMs));
    else socket.write(step);
  }
}

/** The first whole request in `bytes` and how many bytes it took; null until it has all arrived. */
function takeRequest(bytes: Buffer, connection: number): { request: RawRequest; length: number } | null {
  const headEnd = bytes.indexOf('\r\n\r\n');
  if (headEnd === -1) return null;
  const head = bytes.subarray(0, headEnd).toString('latin1');
  const [method = '', target = ''] = head.split('\r\n', 1)[0]!.split(' ');
  const bodyStart = headEnd + 4;
  const length = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (length !== null) {
    const end = bodyStart + Number(length[1]);
    if (bytes.length < end) return null;
    return { request: { method, target, head, body: bytes.subarray(bodyStart, end), connection }, length: end };
  }
  if (!/\r\ntransfer-encoding: *chunked/i.test(head)) return { request: { method, target, head, body: Buffer.alloc(0), connection }, length: bodyStart };
  const chunks: Buffer[] = [];
  let index = bodyStart;
  for (;;) {
    const lineEnd = bytes.indexOf('\r\n', index);
    if (lineEnd === -1) return null;
    const size = Number.parseInt(bytes.subarray(index, lineEnd).toString('latin1'), 16);
    if (size === 0) {
      const end = bytes.indexOf('\r\n\r\n', lineEnd);
      if (end === -1) return null;
      return { request: { method, target, head, body: Buffer.concat(chunks), connection }, length: end + 4 };
    }
    if (bytes.length < lineEnd + 2 + size + 2) return null;
    chunks.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
    index = lineEnd + 2 + size + 2;
  }
}
