import Fastify from 'fastify';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

/**
 * The floor of this runtime: fastify with one catch-all route, and undici's dispatch API
 * forwarding to the upstream after reply.hijack(), as tokengate forwards, but with no checks at
 * all: the client's headers go as they came (minus the hop-by-hop ones), and the upstream's
 * answer streams back with backpressure. tokengate is this plus everything it checks.
 * Plain JavaScript on plain node, like every server of the benchmark.
 */
const { values } = parseArgs({ options: { port: { type: 'string' }, upstream: { type: 'string' } } });
const pool = new Pool(String(values.upstream), { connections: 128, pipelining: 1 });
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'transfer-encoding', 'trailer', 'upgrade', 'host']);

function withoutHopByHop(raw) {
  const headers = [];
  for (let index = 0; index < raw.length; index += 2) {
    const name = typeof raw[index] === 'string' ? raw[index] : raw[index].toString('latin1');
    if (!HOP_BY_HOP.has(name.toLowerCase())) headers.push(name, typeof raw[index + 1] === 'string' ? raw[index + 1] : raw[index + 1].toString('latin1'));
  }
  return headers;
}

const app = Fastify({ logger: false });
app.removeAllContentTypeParsers();
app.addContentTypeParser('*', (_request, body, done) => done(null, body));
app.route({
  method: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
  url: '/*',
  handler(request, reply) {
    reply.hijack();
    const response = reply.raw;
    const hasBody = request.method !== 'GET' && request.method !== 'HEAD';
    let resume = null;
    let abort = null;
    // A client gone mid-answer cancels the upstream request, as tokengate does: a paused
    // dispatch waiting for a 'drain' that never comes would hold its upstream connection forever.
    response.on('close', () => {
      if (!response.writableFinished) abort?.(new Error('the client closed the connection'));
    });
    pool.dispatch(
      { path: request.raw.url, method: request.method, headers: withoutHopByHop(request.raw.rawHeaders), body: hasBody ? request.raw : null },
      {
        onConnect(abortRequest) {
          if (response.destroyed) abortRequest(new Error('the client closed the connection'));
          else abort = abortRequest;
        },
        onHeaders(statusCode, rawHeaders, resumeReading) {
          resume = resumeReading;
          response.writeHead(statusCode, withoutHopByHop(rawHeaders));
          return true;
        },
        onData(chunk) {
          if (response.write(chunk)) return true;
          response.once('drain', resume);
          return false;
        },
        onComplete() {
          response.end();
        },
        onError() {
          if (response.destroyed) return;
          if (response.headersSent) response.destroy();
          else response.writeHead(502).end();
        },
      },
    );
  },
});
await app.listen({ host: '127.0.0.1', port: Number(values.port) });
process.once('SIGTERM', () => app.close().then(() => pool.close().then(() => process.exit(0))));
