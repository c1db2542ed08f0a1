import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

/**
 * An OTLP/HTTP receiver for the tracing rows: takes every export, reads it whole and answers
 * success (an empty ExportTraceServiceResponse), doing nothing else, so a traced row's cost is
 * tokengate's own. Plain JavaScript on plain node, like every server of the benchmark.
 */
const { values } = parseArgs({ options: { port: { type: 'string' } } });

const server = createServer((request, response) => {
  request.resume();
  request.once('end', () => {
    response.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 });
    response.end();
  });
});
server.keepAliveTimeout = 120_000;
server.listen(Number(values.port), '127.0.0.1');
process.once('SIGTERM', () => server.close(() => process.exit(0)));
