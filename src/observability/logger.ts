import type { FastifyRequest } from 'fastify';
import { pino, type Logger, type LoggerOptions } from 'pino';

/**
 * Query parameters whose values are secrets. The gateway accepts `access_token` in the query
 * (RFC 6750 2.3), so request URLs are logged with these values replaced.
 */
const SECRET_PARAMETERS = ['access_token', 'refresh_token', 'code', 'client_secret', 'code_verifier', 'password', 'token', 'state'];
const SECRET_IN_QUERY = new RegExp(`([?&](?:${SECRET_PARAMETERS.join('|')})=)[^&#]*`, 'gi');

export function redactUrl(url: string): string {
  return url.includes('?') ? url.replace(SECRET_IN_QUERY, '$1[REDACTED]') : url;
}

/** Paths that pino redacts wherever a log line carries them (headers and parsed bodies). */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["proxy-authorization"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers.cookie',
  '*.access_token',
  '*.refresh_token',
  '*.client_secret',
  '*.password',
  // `code` only where it can be an authorization code: `err.code` must stay readable.
  'body.code',
  'query.code',
  '*.code_verifier',
  '*.token',
  'access_token',
  'refresh_token',
  'client_secret',
  'password',
];

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
    serializers: {
      req(request: FastifyRequest) {
        return {
          id: request.id,
          method: request.method,
          url: redactUrl(request.url),
          remoteAddress: request.ip,
        };
      },
    },
  };
}

export function createLogger(level: string): Logger {
  return pino(loggerOptions(level));
}
