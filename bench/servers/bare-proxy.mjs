import proxy from '@fastify/http-proxy';
import Fastify from 'fastify';
import { parseArgs } from 'node:util';

/**
 * The stack's ceiling: fastify + @fastify/http-proxy forwarding everything to the upstream,
 * with no authentication, no logging, no hooks. tokengate is this plus its token checks.
 * Plain JavaScript on plain node, as tokengate runs from dist/.
 */
const { values } = parseArgs({ options: { port: { type: 'string' }, upstream: { type: 'string' } } });

const app = Fastify({ logger: false });
await app.register(proxy, { upstream: String(values.upstream), prefix: '/' });
await app.listen({ host: '127.0.0.1', port: Number(values.port) });
process.once('SIGTERM', () => app.close().then(() => process.exit(0)));
