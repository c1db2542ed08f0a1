import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { ConfigProblem } from './problem.js';
import { withoutPassword } from './redact.js';
import type { Config } from './schema.js';

/**
 * What a running instance takes from a reloaded config, and what it cannot. Resources, routes
 * (and with them the upstreams), rate limit policies, cache and logging settings, and the trusted
 * identity providers are applied;
 * every other section is bound at start (listeners, the store connection, the issuer's
 * endpoints, the gateway's header names) and changes only on restart.
 */
export const RELOADED_SECTIONS = ['resources', 'routes', 'rateLimits', 'cache', 'logging', 'identityProviders'] as const satisfies ReadonlyArray<keyof Config>;
export type ReloadedSection = (typeof RELOADED_SECTIONS)[number];

export interface ReloadOutcome {
  readonly result: 'success' | 'failure';
  /** Why the new config was refused (failure); the running config stays whole. */
  readonly problems: readonly ConfigProblem[];
  /** The reloaded sections that changed and were applied (success). */
  readonly applied: readonly ReloadedSection[];
  /** Keys whose new value needs a restart (success): they keep their running value until then. */
  readonly restartRequired: readonly string[];
  /** configHash of the config in effect after the reload. */
  readonly hash: string;
}

/** The config to run with: the reloaded sections of `next`, everything else as `running` has it. */
export function effectiveConfig(running: Readonly<Config>, next: Readonly<Config>): Readonly<Config> {
  return Object.freeze({
    ...running,
    resources: next.resources,
    routes: next.routes,
    rateLimits: next.rateLimits,
    cache: next.cache,
    logging: next.logging,
    identityProviders: next.identityProviders,
  });
}

export function changedSections(running: Readonly<Config>, next: Readonly<Config>): ReloadedSection[] {
  return RELOADED_SECTIONS.filter((section) => !isDeepStrictEqual(running[section], next[section]));
}

/** The key paths (`server.port`, `issuer.scopes`) outside the reloaded sections whose value differs. */
export function restartKeys(running: Readonly<Config>, next: Readonly<Config>): string[] {
  const keys: string[] = [];
  const compare = (a: unknown, b: unknown, path: string) => {
    if (isPlainObject(a) && isPlainObject(b)) {
      for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) compare(a[key], b[key], path === '' ? key : `${path}.${key}`);
    } else if (!isDeepStrictEqual(a, b)) {
      keys.push(path);
    }
  };
  const reloaded = new Set<string>(RELOADED_SECTIONS);
  for (const section of new Set([...Object.keys(running), ...Object.keys(next)])) {
    if (!reloaded.has(section)) compare((running as Record<string, unknown>)[section], (next as Record<string, unknown>)[section], section);
  }
  return keys;
}

/**
 * A short hash of a config's settings, the same for the same settings whatever their order in
 * the file, so replicas running the same config show the same value. Secret values (the admin
 * token, the token tag key, a Redis password) are left out: a hash published on /metrics must
 * not let anyone test guesses of them.
 */
export function configHash(config: Readonly<Config>): string {
  const published = {
    ...config,
    admin: { ...config.admin, token: secretSet(config.admin.token) },
    issuer: { ...config.issuer, tokenTagKey: secretSet(config.issuer.tokenTagKey) },
    signedIdentity: { ...config.signedIdentity, keyEncryptionKey: secretSet(config.signedIdentity.keyEncryptionKey) },
    openidConnect: { ...config.openidConnect, keyEncryptionKey: secretSet(config.openidConnect.keyEncryptionKey) },
    identityProviders: config.identityProviders.map((provider) =>
      provider.sharedSignals === undefined
        ? provider
        : {
            ...provider,
            sharedSignals: {
              ...provider.sharedSignals,
              pushAuthorization: secretSet(provider.sharedSignals.pushAuthorization),
              transmitterAuthorization: secretSet(provider.sharedSignals.transmitterAuthorization),
            },
          },
    ),
    store: {
      ...config.store,
      url: withoutPassword(config.store.url),
      password: secretSet(config.store.password),
      sentinel: { ...config.store.sentinel, password: secretSet(config.store.sentinel.password) },
    },
  };
  return createHash('sha256').update(canonicalJson(published)).digest('hex').slice(0, 16);
}

/** Whether a secret is set, never its value. */
function secretSet(value: string): string {
  return value === '' ? '' : '(set)';
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    const keys = Object.keys(value)
      .filter((key) => value[key] !== undefined)
      .sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
