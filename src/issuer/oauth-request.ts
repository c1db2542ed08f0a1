import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/schema.js';
import { TokengateError } from '../errors.js';

/**
 * The steps every back-channel OAuth endpoint (token, revocation, introspection) shares to turn
 * a request into its parameters.
 */

/** Parameters of one request: each present at most once, as a non-empty string. */
export type OAuthParameters = Readonly<Partial<Record<string, string>>>;

/**
 * Largest body a back-channel request may have. Its parameters are a handful of short strings
 * (the longest, a code_verifier, is 128 characters), so anything bigger is refused before it is
 * parsed.
 */
const OAUTH_BODY_LIMIT = 16_384;

/** Route options every back-channel endpoint shares: its body limit and no caching. */
export function backChannelRouteOptions(config: Readonly<Config>) {
  return { bodyLimit: Math.min(OAUTH_BODY_LIMIT, config.server.bodyLimit), onRequest: noCache };
}

/** Token responses carry credentials: no cache may keep them (RFC 6749 section 5.1). */
export async function noCache(_request: FastifyRequest, reply: FastifyReply): Promise<void> {
  reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
}

/**
 * The body as a map of raw values. Parameters come from the body only: RFC 6749 section 2.3.1
 * forbids credentials in the URI, where proxies and logs keep them. A form body parses to
 * strings (an array for a repeated name), a JSON body to whatever it holds.
 */
export function parseBody(request: FastifyRequest): Record<string, unknown> {
  if (Object.keys(request.query as object).length > 0) {
    throw new TokengateError('INVALID_REQUEST', { description: 'Send the parameters in the request body, not in the URL.' });
  }
  const body = request.body;
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body)) {
    throw new TokengateError('INVALID_REQUEST', { description: 'The request body must be a form or a JSON object.' });
  }
  return body as Record<string, unknown>;
}

/**
 * RFC 6749 section 3.2: parameters MUST NOT be included more than once; section 3.1: a
 * parameter sent without a value is treated as omitted. Unknown parameters are kept and ignored
 * by the steps that follow.
 */
export function rejectRepeatedParameters(raw: Record<string, unknown>): OAuthParameters {
  const parameters: Record<string, string> = Object.create(null);
  for (const [name, value] of Object.entries(raw)) {
    if (typeof value !== 'string') {
      throw new TokengateError('INVALID_REQUEST', { description: `${describeParameter(name)} must appear once, with a string value.` });
    }
    if (value !== '') parameters[name] = value;
  }
  return parameters;
}

export function requireParameter(parameters: OAuthParameters, name: string): string {
  const value = parameters[name];
  if (value === undefined) throw new TokengateError('INVALID_REQUEST', { description: `Missing required parameter: ${name}.` });
  return value;
}

/** A parameter name is echoed in an error only when it is a plausible one, never arbitrary client input. */
function describeParameter(name: string): string {
  return /^[a-z_]{1,40}$/.test(name) ? `The ${name} parameter` : 'A parameter';
}
