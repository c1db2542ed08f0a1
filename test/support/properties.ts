import fc from 'fast-check';

/**
 * How every property test runs. By default on a fixed seed with a modest number of runs, so the
 * suite stays quick and a failure in CI replays the same counterexample anywhere. Long runs:
 *
 *   FUZZ_RUNS=200000 npx vitest run test/properties/path.test.ts
 *   FUZZ_SECONDS=300 npx vitest run test/properties/          (each property for 5 minutes)
 *
 * take a fresh seed each time (printed with any counterexample, with the path to shrink it
 * again) and print how many runs each property got; FUZZ_SEED=<n> replays a seed.
 */
const LONG_RUNS = Number(process.env.FUZZ_RUNS ?? 0);
const LONG_SECONDS = Number(process.env.FUZZ_SECONDS ?? 0);
export const LONG_MODE = LONG_RUNS > 0 || LONG_SECONDS > 0;
const CI_SEED = 20_261_126;
const SEED = process.env.FUZZ_SEED !== undefined ? Number(process.env.FUZZ_SEED) : LONG_MODE ? Date.now() % 2 ** 31 : CI_SEED;

/** A property's test timeout: the usual one in CI, none to speak of in long mode. */
export const PROPERTY_TIMEOUT = LONG_MODE ? 24 * 3_600_000 : 30_000;

/**
 * Checks `property` (`runs` times in CI; FUZZ_RUNS times or for FUZZ_SECONDS in long mode) and
 * fails with fast-check's report (seed, path, the shrunk counterexample) when it does not hold.
 */
export async function holds<Values extends [unknown, ...unknown[]]>(name: string, property: fc.IRawProperty<Values, boolean>, runs: number): Promise<void> {
  const started = Date.now();
  const parameters: fc.Parameters<Values> = {
    seed: SEED,
    numRuns: LONG_SECONDS > 0 ? Number.MAX_SAFE_INTEGER : LONG_RUNS > 0 ? LONG_RUNS : runs,
    ...(LONG_SECONDS > 0 ? { interruptAfterTimeLimit: LONG_SECONDS * 1000, markInterruptAsFailure: false } : {}),
  };
  const details = await fc.check(property, parameters);
  if (LONG_MODE) {
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    process.stdout.write(`[fuzz] ${name}: ${details.numRuns} runs in ${seconds} s, seed ${SEED}${details.failed ? ', FAILED' : ''}\n`);
  }
  if (details.failed) throw new Error(fc.defaultReportMessage(details) ?? `${name} does not hold`);
}

/** Any Unicode scalar value (no lone surrogate): what a well-formed UTF-8 text can hold. */
export const unicodeCharacter = fc
  .oneof(fc.integer({ min: 0, max: 0xd7ff }), fc.integer({ min: 0xe000, max: 0x10ffff }))
  .map((code) => String.fromCodePoint(code));

/** Any UTF-16 code unit, lone surrogates included. */
const codeUnit = fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code));

/**
 * Any string a client can put on the wire as text: ASCII, Latin-1, any Unicode, lone surrogates
 * included. (fast-check's own `binary` and `grapheme` units build tables that cost seconds in
 * every test file: these units cover the same characters.)
 */
export const anyText = (maxLength = 64) =>
  fc.oneof(
    fc.string({ maxLength }),
    fc.string({ unit: codeUnit, maxLength }),
    fc.string({ unit: unicodeCharacter, maxLength }),
    fc.string({ unit: fc.integer({ min: 0, max: 0xff }).map((code) => String.fromCharCode(code)), maxLength }),
  );

/** Strings made of pieces that matter to a grammar (separators, escapes, lookalikes), with some arbitrary text among them. */
export const piecesOf = (pieces: readonly string[], maxLength = 12) =>
  fc.array(fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...pieces) }, { weight: 1, arbitrary: anyText(4) }), { maxLength }).map((parts) => parts.join(''));
