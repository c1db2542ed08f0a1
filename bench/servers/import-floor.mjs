import { createServer } from 'node:net';
import { parseArgs } from 'node:util';
import 'fastify';
import 'ioredis';
import 'pino';
import 'prom-client';
import 'undici';

/**
 * The import floor of tokengate's stack: fastify, undici, ioredis, pino and prom-client
 * imported, nothing made of them and nothing served. Its RSS is what any sidecar on this stack
 * holds before it does anything; tokengate's idle RSS is judged against it. It listens on
 * --port (node:net, which those packages load anyway) only so the harness knows it has started.
 */
const { values } = parseArgs({ options: { port: { type: 'string' } } });
createServer((socket) => socket.destroy()).listen(Number(values.port), '127.0.0.1');
