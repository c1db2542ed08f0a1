import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Tests share one Redis and some start servers and a browser: files run in parallel
    // across workers, but each test file keys its data under its own prefix.
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
