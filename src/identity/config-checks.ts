import { listenerUrl } from '../config/load.js';
import type { ConfigProblem } from '../config/problem.js';
import type { Config, RouteConfig, SignedIdentityConfig } from '../config/schema.js';
import { MAX_CLIENT_ID_URL_LENGTH } from '../client-metadata/client-id.js';
import { activationDelayMs, retentionMs, type KeyTimeline } from './key-ring.js';
import { ASSERTION_TYPE } from './assertions.js';

/**
 * The longest user id an assertion is sized for. Users of the store have short ids; a user
 * service (`issuer.users.source: http`) names its own, and an assertion that would outgrow
 * `maxBytes` for a longer one is refused at the request (500), never sent.
 */
export const ASSUMED_USER_ID_LENGTH = 255;
/** Registered applications' client ids: 32 random bytes in base64url. */
const REGISTERED_CLIENT_ID_LENGTH = 43;
/** A JWK thumbprint (the `kid`, and `cnf.jkt`): a SHA-256 in base64url. */
const THUMBPRINT_LENGTH = 43;
/** An ES256 signature and an Ed25519 one are both 64 bytes. */
const SIGNATURE_LENGTH = 86;
/** Header names are HTTP tokens (RFC 9110 section 5.6.2). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** The issuer an assertion names (`iss`): the issuer's URL, or the listener's when it is derived. */
export function assertionIssuer(config: Pick<Config, 'issuer' | 'server'>): string {
  return config.issuer.issuerUrl !== '' ? config.issuer.issuerUrl : listenerUrl(config.server);
}

/** The audience of a route's assertion, or null when it has none to name. */
export function routeAudience(route: Pick<RouteConfig, 'signedIdentityAudience' | 'resource'>, settings: SignedIdentityConfig): string | null {
  return route.signedIdentityAudience ?? route.resource ?? (settings.audience === '' ? null : settings.audience);
}

export function keyTimeline(settings: SignedIdentityConfig): KeyTimeline {
  return {
    algorithm: settings.algorithm,
    lifetimeMs: settings.lifetimeSeconds * 1000,
    refreshMs: settings.keyRefreshSeconds * 1000,
    jwksMaxAgeMs: settings.jwksMaxAgeSeconds * 1000,
    rotationIntervalMs: settings.rotationIntervalSeconds * 1000,
  };
}

/** The key encryption key as bytes, or why it cannot be one. */
export function decodeKeyEncryptionKey(value: string): Uint8Array | string {
  if (!/^[A-Za-z0-9_-]+$/.test(value)) return 'expected base64url (A-Z a-z 0-9 - _, no padding)';
  const bytes = Buffer.from(value, 'base64url');
  return bytes.length === 32 ? new Uint8Array(bytes) : `expected 32 bytes, got ${bytes.length}`;
}

/**
 * Load-time checks of `signedIdentity` and the routes that ask for it: the feature on, an
 * audience for each, an issuer URL to name, a header that is a header name and none of the
 * identity headers, a key encryption key of 32 bytes, a rotation interval the timeline fits in,
 * and no route whose assertion could outgrow `maxBytes`.
 */
export function checkSignedIdentity(config: Config): ConfigProblem[] {
  const settings = config.signedIdentity;
  const problems: ConfigProblem[] = [];
  const signed = config.routes.map((route, index) => ({ route, index })).filter(({ route }) => route.signedIdentity !== undefined);
  if (!settings.enabled) {
    for (const { index } of signed)
      problems.push({ path: `routes[${index}].signedIdentity`, message: 'needs signedIdentity.enabled: true (the signing keys)' });
    return problems;
  }
  if (config.issuer.issuerUrl === '' && config.server.port === 0)
    problems.push({ path: 'issuer.issuerUrl', message: 'signed identities name their issuer: set issuer.issuerUrl, or a fixed server.port to derive it from' });
  const header = settings.header.toLowerCase();
  const identityHeaders = Object.values(config.gateway.identityHeaders).map((name) => name.toLowerCase());
  if (!HEADER_NAME.test(header)) problems.push({ path: 'signedIdentity.header', message: `"${settings.header}" is not a header name` });
  else if ([...identityHeaders, 'authorization', 'dpop', config.gateway.requestIdHeader.toLowerCase()].includes(header))
    problems.push({ path: 'signedIdentity.header', message: `"${settings.header}" is already a header tokengate sets or reads` });
  if (settings.keyEncryptionKey !== '') {
    const key = decodeKeyEncryptionKey(settings.keyEncryptionKey);
    if (typeof key === 'string') problems.push({ path: 'signedIdentity.keyEncryptionKey', message: key });
  }
  const timeline = keyTimeline(settings);
  const shortest = Math.ceil((activationDelayMs(timeline) + retentionMs(timeline)) / 1000);
  if (settings.rotationIntervalSeconds !== 0 && settings.rotationIntervalSeconds < shortest)
    problems.push({
      path: 'signedIdentity.rotationIntervalSeconds',
      message: `must be 0 or at least ${shortest} s: a key is published jwksMaxAgeSeconds + keyRefreshSeconds + ${Math.round(activationDelayMs(timeline) / 1000) - settings.jwksMaxAgeSeconds - settings.keyRefreshSeconds} s before it signs and stays published lifetimeSeconds + keyRefreshSeconds + a margin after`,
    });
  const issuer = assertionIssuer(config);
  for (const { route, index } of signed) {
    const audience = routeAudience(route, settings);
    if (audience === null) {
      problems.push({
        path: `routes[${index}].signedIdentity`,
        message: 'needs an audience: set routes[].signedIdentityAudience, routes[].resource or signedIdentity.audience',
      });
      continue;
    }
    const longest = longestAssertion(config, issuer, audience);
    if (longest > settings.maxBytes)
      problems.push({
        path: 'signedIdentity.maxBytes',
        message: `the signed identity of routes[${index}] (${route.path}) could be ${longest} bytes, more than ${settings.maxBytes}: raise signedIdentity.maxBytes, or shorten its audience or the issuer's scopes`,
      });
  }
  return problems;
}

/** The largest assertion a route could carry: the longest subject and client id, every scope of the issuer, a DPoP binding. */
export function longestAssertion(config: Pick<Config, 'clientMetadataDocuments' | 'issuer'>, issuer: string, audience: string): number {
  const clientId = 'c'.repeat(config.clientMetadataDocuments.enabled ? MAX_CLIENT_ID_URL_LENGTH : REGISTERED_CLIENT_ID_LENGTH);
  const header = { alg: 'ES256', kid: 'k'.repeat(THUMBPRINT_LENGTH), typ: ASSERTION_TYPE };
  const payload = {
    iss: issuer,
    aud: audience,
    sub: 's'.repeat(Math.max(ASSUMED_USER_ID_LENGTH, clientId.length)),
    client_id: clientId,
    token_kind: 'application',
    scope: config.issuer.scopes.join(' '),
    iat: 9_999_999_999,
    exp: 9_999_999_999,
    cnf: { jkt: 'j'.repeat(THUMBPRINT_LENGTH) },
  };
  const encoded = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url').length;
  return encoded(header) + 1 + encoded(payload) + 1 + SIGNATURE_LENGTH;
}
