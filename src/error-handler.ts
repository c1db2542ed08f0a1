import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { authenticateChallenge, isTokengateError, TokengateError } from './errors.js';
import { StoreUnavailableError } from './store/store.js';

/**
 * The error handler of the issuer and the admin API: it adds the headers the RFCs require around
 * the body (the challenge of a 401) and turns a store outage into a 503 (Retry-After comes with it),
 * never a 500 or a 401, then hands the error to the root renderer, which writes the one error
 * body format.
 */
export function challengingErrorHandler(realm: string) {
  return function renderWithHeaders(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): never {
    const failure = withStoreOutage(error);
    if (isTokengateError(failure)) {
      const challenge = authenticateChallenge(failure, realm);
      if (challenge !== undefined) reply.header('www-authenticate', challenge);
    }
    throw failure;
  };
}

function withStoreOutage(error: Error): Error {
  if (error instanceof StoreUnavailableError) return new TokengateError('STORE_UNAVAILABLE', { detail: error.message, cause: error });
  return error;
}

/** The `error` string the response to `error` carries (the label of the token error metric). */
export function wireErrorOf(error: Error & { statusCode?: number }): string {
  const failure = withStoreOutage(error);
  if (isTokengateError(failure)) return failure.error;
  // The root renderer answers every other client error (bad JSON, body too large...) as invalid_request.
  const status = error.statusCode ?? 500;
  return status >= 400 && status < 500 ? 'invalid_request' : 'server_error';
}
