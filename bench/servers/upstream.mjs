import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

/**
 * The resource service every scenario ends at: one fixed small JSON reply, keep-alive, no
 * work of its own, so the differences between scenarios are what sits in front of it.
 * It drains request bodies so POSTs behave like a real service. Plain JavaScript on plain
 * node, like every server of the benchmark: no loader between the measured process and its code.
 */
const { values } = parseArgs({ options: { port: { type: 'string' } } });
const reply = Buffer.from('{"id":"42","name":"ticket holder"}');

const server = createServer((request, response) => {
  request.resume();
  request.once('end', () => {
    response.writeHead(200, { 'content-type': 'application/json', 'content-length': reply.length });
    response.end(reply);
  });
});
// The proxies in front keep their upstream connections open for the whole run.
server.keepAliveTimeout = 120_000;
server.headersTimeout = 125_000;
server.listen(Number(values.port), '127.0.0.1');
process.once('SIGTERM', () => server.close(() => process.exit(0)));
