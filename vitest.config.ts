import { defineConfig } from 'vitest/config';

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
  'test/token.test.ts',
  'test/properties/config.test.ts',
  'test/properties/dpop.test.ts',
  'test/properties/interim-answers.test.ts',
  'test/properties/scope-and-resource.test.ts',
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
  'test/metrics-exemplars-prometheus.test.ts',
  'test/monitoring.test.ts',
  'test/quick-start.test.ts',
  'test/rate-limits.test.ts',
  'test/rate-limits-sidecars.test.ts',
  'test/resharding.test.ts',
  'test/store-contract.test.ts',
  'test/store-door.test.ts',
  'test/topologies.test.ts',
  'test/tracing-ingress.test.ts',
];

export default defineConfig({
  test: {
    // Tests share one Redis and some start servers and a browser: files run in parallel
    // across workers, but each test file keys its data under its own prefix.
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: 'forks',
    projects: [
      { extends: true, test: { name: 'unit', include: UNIT } },
      { extends: true, test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: [...UNIT, ...SYSTEM] } },
      { extends: true, test: { name: 'system', include: SYSTEM } },
    ],
  },
});
