import type { ConfigProblem } from '../config/problem.js';
import type { Config, OpenIdConnectConfig } from '../config/schema.js';
import { decodeKeyEncryptionKey } from '../identity/config-checks.js';
import { activationDelayMs, CLOCK_MARGIN_SECONDS, retentionMs, type KeyTimeline } from '../identity/key-ring.js';
import type { OpenIdAlgorithm } from '../identity/signing-keys.js';

/**
 * openid-client (through oauth4webapi) fetches a JWKS again for a `kid` it does not hold only once
 * its copy is this old: a new key must be published at least this long before it signs, or such a
 * client meets an ID token it cannot verify.
 */
export const CLIENT_REFETCH_SECONDS = 60;

export function openIdKeyTimeline(settings: OpenIdConnectConfig, algorithm: OpenIdAlgorithm): KeyTimeline {
  return {
    algorithm,
    lifetimeMs: settings.idTokenLifetimeSeconds * 1000,
    refreshMs: settings.keyRefreshSeconds * 1000,
    jwksMaxAgeMs: settings.jwksMaxAgeSeconds * 1000,
    rotationIntervalMs: settings.rotationIntervalSeconds * 1000,
  };
}

/**
 * Load-time checks of `openidConnect`: the issuer it is part of, RS256 among the algorithms, a
 * key encryption key of 32 bytes, a new key published long enough before it signs for
 * openid-client to fetch it, and a rotation interval the timeline fits in.
 */
export function checkOpenIdConnect(config: Config): ConfigProblem[] {
  const settings = config.openidConnect;
  if (!settings.enabled) return [];
  const problems: ConfigProblem[] = [];
  if (!config.issuer.enabled) problems.push({ path: 'openidConnect.enabled', message: 'needs issuer.enabled: true (ID tokens are issued by the issuer)' });
  if (!settings.algorithms.includes('RS256'))
    problems.push({ path: 'openidConnect.algorithms', message: "must include RS256, OpenID Connect's mandatory algorithm and every application's default" });
  if (settings.keyEncryptionKey !== '') {
    const key = decodeKeyEncryptionKey(settings.keyEncryptionKey);
    if (typeof key === 'string') problems.push({ path: 'openidConnect.keyEncryptionKey', message: key });
  }
  const publishedBefore = settings.jwksMaxAgeSeconds + settings.keyRefreshSeconds + CLOCK_MARGIN_SECONDS;
  if (publishedBefore < CLIENT_REFETCH_SECONDS)
    problems.push({
      path: 'openidConnect.jwksMaxAgeSeconds',
      message: `a new key is published jwksMaxAgeSeconds + keyRefreshSeconds + ${CLOCK_MARGIN_SECONDS} s (${publishedBefore} s) before it signs, which must be at least ${CLIENT_REFETCH_SECONDS} s: openid-client fetches the key set again for an unknown key only once its copy is that old`,
    });
  const timeline = openIdKeyTimeline(settings, 'RS256');
  const shortest = Math.ceil((activationDelayMs(timeline) + retentionMs(timeline)) / 1000);
  if (settings.rotationIntervalSeconds !== 0 && settings.rotationIntervalSeconds < shortest)
    problems.push({
      path: 'openidConnect.rotationIntervalSeconds',
      message: `must be 0 or at least ${shortest} s: a key is published jwksMaxAgeSeconds + keyRefreshSeconds + ${CLOCK_MARGIN_SECONDS} s before it signs and stays published idTokenLifetimeSeconds + keyRefreshSeconds + ${CLOCK_MARGIN_SECONDS} s after`,
    });
  return problems;
}
