import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { jsonErrorHandler, TokengateError } from '../errors.js';
import { RouteRequests, UNROUTED } from '../observability/requests.js';

/** A fastify listener's errors as error bodies, and what no route takes: methods (PROPFIND), and paths of the ops listener it does not serve. */
export function answerUnrouted(server: FastifyInstance, listener: 'public' | 'ops', context: TokengateContext): void {
  server.setErrorHandler(jsonErrorHandler());
  const unrouted = new RouteRequests(context.metrics.requests, context.requestLog, listener, UNROUTED);
  server.setNotFoundHandler((request, reply) => {
    unrouted.completed(request, reply, 404, 'not_found');
    void reply.send(new TokengateError('NOT_FOUND'));
  });
}
