import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The tiers of the suite (docs/design.md#test-tiers). `npm test` runs all three; each runs
 * alone with `npm run test:<tier>`. A file not listed in unit or system is integration.
 */
/** No Redis, no server, no other process of the machine: pure functions, the config loader, the docs and the lint rules. */
export const UNIT = [
  'test/config.test.ts',
  'test/config-watch.test.ts',
  'test/consent-rule.test.ts',
  'test/docs.test.ts',
  'test/error-tables.test.ts',
  'test/layers.test.ts',
  'test/readme.test.ts',
  'test/request-id.test.ts',
  'test/signed-identity-config.test.ts',
  'test/token.test.ts',
  'test/properties/config.test.ts',
  'test/properties/dpop.test.ts',
  'test/properties/interim-answers.test.ts',
  'test/properties/scope-and-resource.test.ts',
  'test/properties/token-cache.test.ts',
  'test/rate-limits-model.test.ts',
];

/** Set-ups of their own: Redis Clusters and Sentinels, nginx and Caddy, a browser, Prometheus, a fresh copy of the repository. */
export const SYSTEM = [
  'test/account-browser.test.ts',
  'test/alert-rules.test.ts',
  'test/chaos-soak.test.ts',
  'test/deployment-examples.test.ts',
  'test/dpop.test.ts',
  'test/e2e-browser.test.ts',
  'test/failover-cluster.test.ts',
  'test/failover-sentinel.test.ts',
  'test/identity-assertions-cluster.test.ts',
  'test/ingress.test.ts',
  'test/ingress-revocations.test.ts',
  'test/logout-browser.test.ts',
  'test/metrics-exemplars-prometheus.test.ts',
  'test/monitoring.test.ts',
  'test/quick-start.test.ts',
  'test/rate-limits.test.ts',
  'test/rate-limits-sidecars.test.ts',
  'test/resharding.test.ts',
  'test/shared-signals-revocation.test.ts',
  'test/store-contract.test.ts',
  'test/store-door.test.ts',
  'test/topologies.test.ts',
  'test/tracing-ingress.test.ts',
];

/**
 * The slowest files of a run, longest first (`.ci/run` prints the ten slowest of each run: keep
 * this list their order). Every file runs side by side with the others, so the longest start
 * first and the short ones fill the workers around them: the run then lasts about as long as its
 * files' work shared by the workers, not the longest file plus everything queued behind it.
 */
export const LONGEST_FIRST = [
  'test/openid-key-rotation.test.ts',
  'test/rate-limits-sidecars.test.ts',
  'test/tracing-outage.test.ts',
  'test/chaos-soak.test.ts',
  'test/authorize-bounded.test.ts',
  'test/cli-admin.test.ts',
  'test/store-contract.test.ts',
  'test/quick-start.test.ts',
  'test/rate-limits-cost.test.ts',
  'test/typecheck.test.ts',
  'test/serve-workers.test.ts',
  'test/cli.test.ts',
  'test/rate-limits-quotas.test.ts',
  'test/failover-sentinel.test.ts',
  'test/account-browser.test.ts',
  'test/logout-browser.test.ts',
  'test/resharding.test.ts',
  'test/failover-cluster.test.ts',
  'test/serve-worker-death.test.ts',
  'test/signed-identity.test.ts',
  'test/shared-signals-revocation.test.ts',
  'test/topologies.test.ts',
  'test/shared-signals-poll.test.ts',
];

/** LONGEST_FIRST in its order, then the system tier, the integration tier and the unit tier, each in vitest's own order. */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const tiers = ['system', 'integration', 'unit'];
    const rank = (file: TestSpecification) => {
      const longest = LONGEST_FIRST.findIndex((path) => file.moduleId.endsWith(path));
      return longest !== -1 ? longest : LONGEST_FIRST.length + tiers.indexOf(file.project.name);
    };
    const ordered = (await super.sort(files)).map((file, order) => ({ file, order, rank: rank(file) }));
    return ordered.sort((a, b) => a.rank - b.rank || a.order - b.order).map(({ file }) => file);
  }
}

/** Files at once: on two cores most of them wait on sockets, timers and child processes more than they compute. */
const FILES_AT_ONCE = 3;

export default defineConfig({
  test: {
    // Tests share one Redis: each test file keys its data under its own prefix and listens on
    // ports of its worker's own, so files of every tier run side by side. A file that judges
    // throughput or timing judges it against a reference measured in the same file at the same
    // moment (docs/design.md#running-side-by-side), so it needs no machine of its own.
    // A bound for a test that hangs, not a schedule: a test waits for the event it needs, and
    // on a loaded machine the work before it (a sign-in's scrypt, spawning the CLI) takes longer.
    testTimeout: 60_000,
    // The test mode's cheaper password hash (scrypt N=2^10 instead of 2^17: a sign-in costs about
    // 8 ms of CPU instead of 1 s), inherited by every tokengate a test spawns. The product refuses
    // the setting outside the test mode; test/passwords.test.ts leaves the mode to prove the
    // production cost and the refusal.
    env: { TOKENGATE_TEST_MODE: '1', TOKENGATE_TEST_SCRYPT_N: '1024' },
    hookTimeout: 60_000,
    pool: 'forks',
    sequence: { sequencer: LongestFirst },
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT, maxWorkers: FILES_AT_ONCE, sequence: { groupOrder: 1 } } },
      {
        extends: true,
        test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: [...UNIT, ...SYSTEM], maxWorkers: FILES_AT_ONCE, sequence: { groupOrder: 1 } },
      },
      { extends: true, test: { name: 'system', include: SYSTEM, maxWorkers: FILES_AT_ONCE, sequence: { groupOrder: 1 } } },
    ],
  },
});
