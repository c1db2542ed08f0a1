import type { RequestTrace } from '../../tracing/index.js';
import type { FastifyBaseLogger } from 'fastify';
import type { TokengateContext } from '../../context.js';
import type { AuthenticatedClient } from '../client-auth.js';
import type { TokenResponse } from '../issue-tokens.js';
import type { OAuthParameters } from '../oauth-request.js';

export interface GrantTypeRequest {
  readonly parameters: OAuthParameters;
  /** The scope parameter as the endpoint's scope step parsed it; undefined when absent. */
  readonly requestedScopes: readonly string[] | undefined;
  /** The `resource` parameters (RFC 8707), each once; undefined when absent. */
  readonly requestedResources: readonly string[] | undefined;
  readonly client: AuthenticatedClient;
  readonly context: TokengateContext;
  readonly log: FastifyBaseLogger;
  /** The thumbprint of the key of the request's DPoP proof (RFC 9449 section 5), checked; null without one. */
  readonly dpopJkt: string | null;
  /** The request's trace, for the store writes' span; null when tracing is off. */
  readonly trace: RequestTrace | null;
}

/** One grant type of the token endpoint; the endpoint authenticates the client, then dispatches here. */
export interface GrantType {
  readonly type: string;
  /** Whether a public client (no secret) may use this grant. */
  readonly allowsPublicClients: boolean;
  /** Issues tokens or throws the TokengateError the request deserves. */
  issue(request: GrantTypeRequest): Promise<TokenResponse>;
}
