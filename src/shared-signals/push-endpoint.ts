import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { noteFailure, renderSetError, toTokengateError, TokengateError } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import { observeRequests, type RequestLog } from '../observability/requests.js';
import type { Tracing } from '../tracing/index.js';
import type { SharedSignals } from './index.js';
import { MOST_SET_BYTES } from './set-verification.js';

/** Where transmitters push: `/ssf/events/<name>` on the public listener. */
export const PUSH_PATH_PREFIX = '/ssf/events';

/** The media type of a pushed SET (RFC 8935 section 2). */
export const SET_MEDIA_TYPE = 'application/secevent+jwt';

/**
 * POST /ssf/events/<name> (RFC 8935): a transmitter pushes one SET, authenticated by the
 * `Authorization` header the operator gave it. 202 once the SET is applied (or was before);
 * 400 with `{"err","description"}` for a SET refused for good (it is never tried again); 503
 * with `Retry-After` when it could not be applied now (the store or the provider's key set did
 * not answer, another sidecar is applying it), so the transmitter sends it again. The SET is
 * never logged, whatever the answer.
 */
export async function registerPushEndpoint(
  app: FastifyInstance,
  signals: SharedSignals,
  observed: { metrics: Metrics; requestLog: RequestLog; tracing: Tracing | null },
): Promise<void> {
  await app.register(async function sharedSignalsPush(scope) {
    observeRequests(scope, 'public', observed.metrics, observed.requestLog, observed.tracing);
    // Any body is read as text, so a wrong media type is answered as RFC 8935 says, not by the parser.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'string', bodyLimit: MOST_SET_BYTES }, (_request, body, done) => done(null, body));
    scope.setErrorHandler(function answerSetError(error, request, reply) {
      const failure = setFailureOf(error);
      noteFailure(request, failure);
      const { status, headers, body } = renderSetError(failure);
      void reply.code(status).headers(headers).send(body);
    });
    scope.post<{ Params: { name: string } }>(`${PUSH_PATH_PREFIX}/:name`, async function receivePushedSet(request, reply) {
      return answer(signals, request, reply);
    });
  });
}

async function answer(signals: SharedSignals, request: FastifyRequest<{ Params: { name: string } }>, reply: FastifyReply): Promise<FastifyReply> {
  const mediaType = (request.headers['content-type'] ?? '').split(';', 1)[0]!.trim().toLowerCase();
  const set = typeof request.body === 'string' ? request.body.trim() : '';
  const receipt = await signals.receivePush(
    request.params.name,
    request.headers.authorization,
    mediaType === SET_MEDIA_TYPE ? set : null,
    request.trace ?? null,
  );
  if (receipt === undefined) throw new TokengateError('NOT_FOUND', { description: 'No shared signals receiver takes pushed events here.' });
  if (receipt.outcome === 'refused') throw receipt.refusal;
  if (receipt.outcome === 'retry') throw receipt.error;
  return reply.code(202).header('cache-control', 'no-store').send();
}

/** Fastify's own failures (a body over the limit) as the error table has them. */
function setFailureOf(error: unknown): TokengateError {
  if (error instanceof TokengateError) return error;
  const code = (error as { code?: string }).code;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return new TokengateError('SET_INVALID_REQUEST', { description: `The request body is larger than ${MOST_SET_BYTES} bytes: not a SET.` });
  return toTokengateError(error);
}
