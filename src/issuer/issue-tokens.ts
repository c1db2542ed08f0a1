import type { RequestTrace } from '../tracing/index.js';
import type { TokengateContext } from '../context.js';
import {
  StoreUnavailableError,
  type AccessTokenRecord,
  type ActingParty,
  type IdentityOrigin,
  type OpenIdSignIn,
  type RefreshTokenRecord,
} from '../store/store.js';
import { formatScope } from '../token/scope.js';
import { tokenDigest } from '../token/token-value.js';

/** The token endpoint's 200 body; keys in this order, as the ticketing service sends them. */
export interface TokenResponse {
  access_token: string;
  /** `DPoP` for a token bound to the key of the request's proof (RFC 9449 section 5). */
  token_type: 'Bearer' | 'DPoP';
  expires_in: number;
  refresh_token?: string;
  scope: string;
  created_at: number;
  /** A token exchange's answer (RFC 8693 section 2.2.1): what kind of token access_token is. */
  issued_token_type?: string;
  /** An OpenID Connect grant's ID token (OpenID Connect Core 1.0 section 3.1.3.3). */
  id_token?: string;
}

/** What a grant decided to issue. */
export type Issuance =
  | { kind: 'application'; clientId: string; scopes: string[]; audience: string[]; jkt: string | null }
  | {
      kind: 'user';
      clientId: string;
      userId: string;
      familyId: string;
      /** Scopes of the access token. */
      scopes: string[];
      /** Scopes of the refresh token: those of the whole grant, even when this access token is narrowed (RFC 6749 section 6). */
      grantScopes: string[];
      /** The DPoP key the access token is bound to; null: a Bearer token. */
      jkt: string | null;
      /** Bind the refresh token to `jkt` too (public clients, RFC 9449 section 5). */
      bindRefreshToken: boolean;
      /** Resources the access token is for (RFC 8707). */
      audience: string[];
      /** Resources of the refresh token: the whole grant's, even when this access token is narrowed. */
      grantAudience: string[];
      /** False: an access token alone (an identity assertion's client asks its provider again). Absent: with a refresh token. */
      withRefreshToken?: false;
      /** The identity provider's subject, for a token issued from its assertion. */
      identity?: IdentityOrigin;
      /** A token exchange's (RFC 8693): who acts for the user, and the tokens it descends from, by digest. */
      exchange?: { act: ActingParty; exchangedFrom: string[] };
      /** Epoch ms the access token may not outlive (a token exchange's subject token's expiry). */
      notAfter?: number;
      /** The user's grant to the application the tokens are issued under (a code's or a refresh token's), kept with the refresh token. */
      grantId?: string;
      /** An OpenID Connect grant's sign-in, kept with the refresh token for the ID tokens of its refreshes. */
      openid?: OpenIdSignIn;
    };

/**
 * Mints and stores the tokens of one issuance. Only digests reach the store; the values exist
 * in this response alone. User tokens come with a refresh token of the same token family
 * (unless the grant says otherwise), application tokens never do (the ticketing service's client_credentials behaviour).
 */
export async function issueTokens(context: TokengateContext, issuance: Issuance, trace: RequestTrace | null = null): Promise<TokenResponse> {
  const { accessTokenTtl, refreshTokenTtl } = context.config.issuer;
  const issuedAt = Date.now();
  const accessToken = context.minter.mint();
  const access: AccessTokenRecord = {
    kind: issuance.kind,
    clientId: issuance.clientId,
    userId: issuance.kind === 'user' ? issuance.userId : null,
    scopes: issuance.scopes,
    familyId: issuance.kind === 'user' ? issuance.familyId : null,
    ...audienceOf(issuance.audience),
    issuedAt,
    expiresAt: Math.min(issuedAt + accessTokenTtl * 1000, (issuance.kind === 'user' ? issuance.notAfter : undefined) ?? Infinity),
    ...(issuance.jkt === null ? {} : { jkt: issuance.jkt }),
    ...(issuance.kind === 'user' && issuance.identity !== undefined ? { identity: issuance.identity } : {}),
    ...(issuance.kind === 'user' && issuance.exchange !== undefined ? issuance.exchange : {}),
  };
  const saves = [context.store.tokens.saveAccessToken(tokenDigest(accessToken), access)];

  let refreshToken: string | undefined;
  if (issuance.kind === 'user' && issuance.withRefreshToken !== false) {
    refreshToken = context.minter.mint();
    const refresh: RefreshTokenRecord = {
      clientId: issuance.clientId,
      userId: issuance.userId,
      scopes: issuance.grantScopes,
      familyId: issuance.familyId,
      ...audienceOf(issuance.grantAudience),
      issuedAt,
      expiresAt: issuedAt + refreshTokenTtl * 1000,
      ...(issuance.jkt !== null && issuance.bindRefreshToken ? { jkt: issuance.jkt } : {}),
      ...(issuance.grantId === undefined ? {} : { grantId: issuance.grantId }),
      ...(issuance.openid === undefined ? {} : { openid: withoutNonce(issuance.openid) }),
    };
    saves.push(context.store.tokens.saveRefreshToken(tokenDigest(refreshToken), refresh));
  }
  const saved = trace?.child('tokengate.store.save_tokens') ?? null;
  try {
    await Promise.all(saves);
  } catch (error) {
    saved?.end(error instanceof StoreUnavailableError ? 'store_unavailable' : 'error');
    throw error;
  }
  saved?.end();

  return {
    access_token: accessToken,
    token_type: issuance.jkt === null ? 'Bearer' : 'DPoP',
    expires_in: Math.floor((access.expiresAt - issuedAt) / 1000),
    ...(refreshToken === undefined ? {} : { refresh_token: refreshToken }),
    scope: formatScope(issuance.scopes),
    created_at: Math.floor(issuedAt / 1000),
  };
}

/** A sign-in as a refresh token keeps it: the nonce belongs to the code's ID token alone. */
function withoutNonce({ nonce: _nonce, ...signIn }: OpenIdSignIn): Omit<OpenIdSignIn, 'nonce'> {
  return signIn;
}

/** Records carry an audience only when there is one, as records issued without resources configured do not. */
export function audienceOf(audience: string[]): { audience?: string[] } {
  return audience.length > 0 ? { audience } : {};
}
