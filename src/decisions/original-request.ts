import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { compileDecisionListenerDenial, type Denial } from '../gateway/denials.js';
import type { CredentialSource } from '../gateway/extract-credential.js';
import type { Metrics } from '../observability/metrics.js';
import type { RouteRequests } from '../observability/requests.js';

/**
 * Where each ingress puts the request it asks about. Each endpoint reads one convention and
 * nothing else: a header the ingress does not set itself is one the client can, so a listener
 * that took the original request from whichever header is present would let the client choose
 * the route its token is checked for. Which convention applies is chosen in the ingress's own
 * config, by the path it sends the check to.
 */
export const ENDPOINTS = {
  /** nginx auth_request: the subrequest is a GET to this path whatever the client sent; nginx.conf names the original in X-Original-Method and X-Original-URI. */
  authRequest: '/auth-request',
  /** Traefik ForwardAuth and Caddy forward_auth: a GET to this path, the original in X-Forwarded-Method and X-Forwarded-Uri. */
  forwardAuth: '/forward-auth',
  /** Envoy ext_authz (HTTP service): the original method, the original path and query after this path_prefix. */
  extAuthz: '/ext-authz',
} as const;

export type Endpoint = keyof typeof ENDPOINTS;

/**
 * The request the ingress asks about, with the check request's headers (the ingress passes the
 * client's on). Scheme and host, which only a DPoP proof's `htu` is compared with, are read
 * from the ingress's headers when asked for: nginx sends X-Original-Proto and X-Original-Host
 * (examples/ingress/nginx.conf), Traefik and Caddy X-Forwarded-Proto and X-Forwarded-Host, and
 * Envoy the original Host with X-Forwarded-Proto.
 */
export class OriginalRequest implements CredentialSource {
  constructor(
    /** Where the ingress asked: the nginx endpoint answers with its body in a header too (nginx drops the body of an auth answer). */
    readonly endpoint: Endpoint,
    readonly method: string,
    /** Origin-form path and query, as the client sent them. */
    readonly target: string,
    readonly headers: IncomingHttpHeaders,
    readonly rawHeaders: string[],
  ) {}

  /** The request target, under the name the DPoP step reads. */
  get url(): string {
    return this.target;
  }

  get protocol(): string | undefined {
    const name = this.endpoint === 'authRequest' ? 'x-original-proto' : 'x-forwarded-proto';
    const value = this.headers[name];
    return typeof value === 'string' ? value : undefined;
  }

  get host(): string | undefined {
    const value =
      this.endpoint === 'authRequest'
        ? this.headers['x-original-host']
        : this.endpoint === 'forwardAuth'
          ? this.headers['x-forwarded-host']
          : this.headers.host;
    return typeof value === 'string' ? value : undefined;
  }
}

/** Reads the original request of a check request, or the answer for a check request that names none. */
export type OriginalRequestReader = (request: IncomingMessage) => OriginalRequest | Denial;

/** `requests`: the decision listener's counters and access log of check requests that name no route. */
export function originalRequestReader(metrics: Metrics, requests: RouteRequests): OriginalRequestReader {
  const missing = {
    authRequest: compileDecisionListenerDenial(
      'missing_original_request',
      'The check request names no original request: nginx must send X-Original-Method and X-Original-URI.',
      metrics,
      requests,
    ),
    forwardAuth: compileDecisionListenerDenial(
      'missing_original_request',
      'The check request names no original request: the ingress must send X-Forwarded-Method and X-Forwarded-Uri.',
      metrics,
      requests,
    ),
  };
  const unknownEndpoint = compileDecisionListenerDenial(
    'unknown_endpoint',
    `The decision listener answers on ${ENDPOINTS.authRequest} (nginx), ${ENDPOINTS.forwardAuth} (Traefik, Caddy) and ${ENDPOINTS.extAuthz}/... (Envoy).`,
    metrics,
    requests,
  );
  const envoyPrefix = `${ENDPOINTS.extAuthz}/`;

  function fromHeaders(request: IncomingMessage, endpoint: 'authRequest' | 'forwardAuth', methodHeader: string, uriHeader: string): OriginalRequest | Denial {
    const method = request.headers[methodHeader];
    const target = request.headers[uriHeader];
    if (typeof method !== 'string' || method === '' || typeof target !== 'string' || target === '') return missing[endpoint];
    return new OriginalRequest(endpoint, method, target, request.headers, request.rawHeaders);
  }

  return function readOriginalRequest(request) {
    const url = request.url!;
    if (isEndpoint(url, ENDPOINTS.authRequest)) return fromHeaders(request, 'authRequest', 'x-original-method', 'x-original-uri');
    if (isEndpoint(url, ENDPOINTS.forwardAuth)) return fromHeaders(request, 'forwardAuth', 'x-forwarded-method', 'x-forwarded-uri');
    if (url.startsWith(envoyPrefix)) {
      return new OriginalRequest('extAuthz', request.method!, url.slice(ENDPOINTS.extAuthz.length), request.headers, request.rawHeaders);
    }
    return unknownEndpoint;
  };
}

/** The path is the endpoint's, with or without a query (which the endpoint ignores). */
function isEndpoint(url: string, path: string): boolean {
  return url.startsWith(path) && (url.length === path.length || url.charCodeAt(path.length) === 0x3f);
}
