import { existsSync } from 'node:fs';
import type { ConfigProblem } from '../config/problem.js';
import { IDENTITY_ASSERTION_ALGORITHMS, type Config } from '../config/schema.js';

/**
 * Load-time checks of `identityProviders`: each issuer once, asymmetric algorithms jose knows, https URLs (a key set fetched in
 * the clear could be swapped by anyone on the path), a CA file that exists, and users kept in
 * the store, where a subject is matched to a user by e-mail address.
 */
export function checkIdentityProviders(config: Pick<Config, 'identityProviders' | 'issuer'>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const seen = new Set<string>();
  config.identityProviders.forEach((provider, index) => {
    const at = (key: string) => `identityProviders[${index}].${key}`;
    if (seen.has(provider.issuer)) problems.push({ path: at('issuer'), message: `"${provider.issuer}" is listed more than once` });
    seen.add(provider.issuer);
    if (!isHttpsUrl(provider.issuer)) problems.push({ path: at('issuer'), message: `expected an https URL, got "${provider.issuer}"` });
    if (!isHttpsUrl(provider.jwksUrl)) problems.push({ path: at('jwksUrl'), message: `expected an https URL, got "${provider.jwksUrl}"` });
    provider.algorithms.forEach((algorithm, position) => {
      if (!(IDENTITY_ASSERTION_ALGORITHMS as readonly string[]).includes(algorithm))
        problems.push({ path: at(`algorithms[${position}]`), message: `expected one of ${IDENTITY_ASSERTION_ALGORITHMS.join(', ')}, got "${algorithm}"` });
    });
    if (provider.caFile !== '' && !existsSync(provider.caFile)) problems.push({ path: at('caFile'), message: `no such file: ${provider.caFile}` });
  });
  if (config.identityProviders.length > 0 && config.issuer.users.source !== 'store')
    problems.push({
      path: 'identityProviders',
      message: 'needs issuer.users.source "store": an assertion names its user by e-mail address, which only users kept in the store can be found by',
    });
  return problems;
}

export function isHttpsUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return url.protocol === 'https:' && url.username === '' && url.password === '' && url.hash === '';
  } catch {
    return false;
  }
}
