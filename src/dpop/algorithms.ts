/**
 * The JWS algorithms a DPoP proof may be signed with (RFC 9449 section 4.2: asymmetric only,
 * never `none` nor an HMAC): what the issuer's metadata advertises, what every refusal's `algs`
 * names, and the allow-list each proof is checked against. `Ed25519` is the fully-specified
 * name (RFC 9864) of EdDSA with an Ed25519 key, which current clients (oauth4webapi) sign with.
 */
export const DPOP_SIGNING_ALGORITHMS = ['ES256', 'EdDSA', 'Ed25519', 'RS256', 'PS256'] as const;

/**
 * The DPoP members of RFC 9728 protected-resource metadata for a set of routes:
 * `dpop_bound_access_tokens_required` is true when every route requires DPoP.
 */
export function protectedResourceDpopMetadata(routes: ReadonlyArray<{ readonly dpop: 'required' | 'allowed' }>) {
  return {
    dpop_signing_alg_values_supported: [...DPOP_SIGNING_ALGORITHMS],
    dpop_bound_access_tokens_required: routes.length > 0 && routes.every((route) => route.dpop === 'required'),
  };
}
