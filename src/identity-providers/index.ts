import type { Logger } from 'pino';
import type { IdentityProviderConfig } from '../config/schema.js';
import type { Backend } from '../store/backend.js';
import { checkAssertion, CLOCK_LEEWAY_SECONDS, refused, type AssertionExpectation, type IdentityAssertion, type TrustedProvider } from './assertion.js';
import { assertionMarksFor, type AssertionMarks } from './assertion-marks.js';
import { ProviderKeySet } from './key-set.js';

export { ID_JAG_TYPE, refused, type IdentityAssertion } from './assertion.js';

/** The authorization grant profile of ID-JAG, for the metadata's `authorization_grant_profiles_supported`. */
export const ID_JAG_PROFILE = 'urn:ietf:params:oauth:grant-profile:id-jag';

/** One trusted provider as the admin API lists it. */
export interface ProviderListing {
  readonly issuer: string;
  readonly jwksUrl: string;
  readonly algorithms: readonly string[];
  readonly userClaim: string;
  readonly jitUsers: boolean;
  readonly maxAssertionLifetimeSeconds: number;
  /** Successful fetches of its key set by this process. */
  readonly keySetFetches: number;
}

/**
 * The identity providers the operator trusts (`identityProviders`), each with its key set, and
 * the single-use marks of their assertions in the shared store. A reload replaces the list:
 * a provider that stays keeps its keys, one whose settings changed starts afresh.
 */
export class IdentityProviders {
  private providers = new Map<string, TrustedProvider>();
  private readonly marks: AssertionMarks;

  constructor(
    configs: readonly IdentityProviderConfig[],
    backend: Backend,
    private readonly log: Logger,
  ) {
    this.marks = assertionMarksFor(backend);
    this.replace(configs);
  }

  get enabled(): boolean {
    return this.providers.size > 0;
  }

  /** Takes a reloaded list; returns the issuers no longer trusted, whose tokens the caller revokes. */
  replace(configs: readonly IdentityProviderConfig[]): string[] {
    const next = new Map<string, TrustedProvider>();
    for (const config of configs) {
      const current = this.providers.get(config.issuer);
      const same = current !== undefined && JSON.stringify(current.config) === JSON.stringify(config);
      next.set(config.issuer, same ? current : { config, keys: new ProviderKeySet(config.jwksUrl, config.caFile, config.keyRefreshCooldownSeconds * 1000) });
    }
    const removed = [...this.providers.keys()].filter((issuer) => !next.has(issuer));
    for (const [issuer, provider] of this.providers) if (next.get(issuer) !== provider) void provider.keys.close();
    this.providers = next;
    return removed;
  }

  list(): ProviderListing[] {
    return [...this.providers.values()].map(({ config, keys }) => ({
      issuer: config.issuer,
      jwksUrl: config.jwksUrl,
      algorithms: [...config.algorithms],
      userClaim: config.userClaim,
      jitUsers: config.jitUsers,
      maxAssertionLifetimeSeconds: config.maxAssertionLifetimeSeconds,
      keySetFetches: keys.fetches,
    }));
  }

  /** A trusted issuer's settings and key set (its Security Event Tokens are checked with the keys of its assertions); undefined when it is not one. */
  trusted(issuer: string): TrustedProvider | undefined {
    return this.providers.get(issuer);
  }

  /** The settings of a trusted issuer; undefined when it is not one. */
  provider(issuer: string): IdentityProviderConfig | undefined {
    return this.providers.get(issuer)?.config;
  }

  /** Checks an ID-JAG's signature and claims (not yet its single use: see `spend`). Throws invalid_grant naming the claim. */
  check(assertion: string, expected: AssertionExpectation): Promise<IdentityAssertion> {
    return checkAssertion(assertion, (issuer) => this.providers.get(issuer), expected);
  }

  /**
   * Marks the assertion used, on every sidecar, until it expires (with the clock leeway it was
   * accepted under); refuses it if it was used before. The last step of the grant, so a request
   * refused for another reason does not spend it.
   */
  async spend(assertion: IdentityAssertion): Promise<void> {
    const ttlMs = Math.max(1_000, (assertion.expiresAt + CLOCK_LEEWAY_SECONDS) * 1000 - Date.now());
    if (!(await this.marks.markFirstUse(assertion.issuer, assertion.jti, ttlMs))) {
      this.log.warn({ issuer: assertion.issuer }, 'identity assertion replayed: refused');
      throw refused('jti', 'was used before');
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.providers.values()].map((provider) => provider.keys.close()));
  }
}
