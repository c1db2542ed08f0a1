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
 * Files of the integration tier that mostly wait on purpose (outages, windows of paced traffic),
 * longest first: they start first among the side-by-side files, so the rest runs beside their
 * waits instead of after them. `.ci/run` prints the ten slowest files of each run: keep this list
 * their order.
 */
export const WAITING_FIRST = ['test/tracing-outage.test.ts', 'test/rate-limits-cost.test.ts', 'test/rate-limits-quotas.test.ts'];

/** WAITING_FIRST in its order, then the system tier, the integration tier and the unit tier, each in vitest's own order (the tiers' groups run one after the other). */
class WaitingFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const tiers = ['system', 'integration', 'unit'];
    const rank = (file: TestSpecification) => {
      const waiting = WAITING_FIRST.findIndex((path) => file.moduleId.endsWith(path));
      return waiting !== -1 ? waiting : WAITING_FIRST.length + tiers.indexOf(file.project.name);
    };
    const ordered = (await super.sort(files)).map((file, order) => ({ file, order, rank: rank(file) }));
    return ordered.sort((a, b) => a.rank - b.rank || a.order - b.order).map(({ file }) => file);
  }
}

export default defineConfig({
  test: {
    // Tests share one Redis: each test file keys its data under its own prefix and listens on
    // ports of its worker's own, so files run side by side. The system tier runs first, one file
    // at a time: its failovers, reshards, soak and sidecars judge throughput and timing, which a
    // machine busy with other files bends (seen: a rate limit window at 0.81x with four files
    // beside it). Then the integration and unit tiers, three files at a time on two cores: most
    // of them wait on sockets, timers and child processes more than they compute.
    // A bound for a test that hangs, not a schedule: a test waits for the event it needs, and
    // on a loaded machine the work before it (a sign-in's scrypt, spawning the CLI) takes longer.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    sequence: { sequencer: WaitingFirst },
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT, maxWorkers: 3, sequence: { groupOrder: 2 } } },
      {
        extends: true,
        test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: [...UNIT, ...SYSTEM], maxWorkers: 3, sequence: { groupOrder: 2 } },
      },
      { extends: true, test: { name: 'system', include: SYSTEM, maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});
