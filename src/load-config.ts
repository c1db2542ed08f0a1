import { checkClientMetadata } from './client-metadata/config-checks.js';
import { configLoader } from './config/load.js';
import { checkIdentityProviders } from './identity-providers/config-checks.js';
import { checkPasswordHashing } from './issuer/passwords.js';
import { checkRateLimits } from './ratelimit/config-checks.js';
import { checkResources } from './resource/config-checks.js';
import { checkSharedSignals } from './shared-signals/config-checks.js';
import { checkSignedIdentity } from './identity/config-checks.js';
import { checkOpenIdConnect } from './openid/config-checks.js';
import { checkTracing } from './tracing/settings.js';

export { ConfigError, type Environment } from './config/load.js';

/**
 * The config loader with the checks of every room that keeps some: config/ reads and checks the
 * shape and its own sections, and a room above it (resources, rate limit policies, client
 * metadata documents, tracing, signed identity, OpenID Connect, identity providers, shared signals, the password hash's test setting) checks what only it understands. A new room with checks joins this list.
 */
export const { loadConfigFile, parseConfig } = configLoader([
  checkResources,
  checkRateLimits,
  checkClientMetadata,
  checkTracing,
  checkSignedIdentity,
  checkOpenIdConnect,
  checkIdentityProviders,
  checkSharedSignals,
  checkPasswordHashing,
]);
