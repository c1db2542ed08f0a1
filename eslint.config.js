// @ts-check
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/**
 * The floors of src/, bottom first (docs/design.md#the-rooms-of-src says what each holds and why): a file
 * may import from its own floor and the floors below it, never from one above. A folder is
 * named with its slash, a file at the top of src/ by its name.
 */
export const FLOORS = [
  ['errors.ts', 'token/', 'http/'],
  ['config/'],
  ['tracing/'],
  ['observability/'],
  ['store/'],
  ['client-metadata/', 'dpop/', 'identity/', 'identity-providers/', 'openid/', 'ratelimit/', 'resource/', 'shared-signals/'],
  ['context.ts'],
  ['gateway/', 'issuer/', 'logout/', 'admin/', 'decisions/'],
  ['listeners/', 'app.ts', 'load-config.ts', 'serve/', 'cli/', 'main.ts'],
];

/** @param {string} text */
const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * The no-restricted-imports patterns of one floor: every room above it, by a relative path from anywhere in src/.
 * @param {number} floor
 * @returns {Array<{ regex: string; message: string }>}
 */
function climbingPatterns(floor) {
  const above = FLOORS.slice(floor + 1).flat();
  const folders = above.filter((room) => room.endsWith('/')).map((room) => escape(room.slice(0, -1)));
  const files = above.filter((room) => !room.endsWith('/')).map((room) => escape(room.replace(/\.ts$/, '')));
  const message = `climbs a floor: ${(FLOORS[floor] ?? []).join(', ')} may import only from its own floor and those below (docs/design.md#the-rooms-of-src)`;
  return [
    { regex: `^(\\.{1,2}/)+(${folders.join('|')})/`, message },
    { regex: `^(\\.{1,2}/)+(${files.join('|')})\\.js$`, message },
  ];
}

/** @type {import('typescript-eslint').ConfigArray} */
const floorRules = FLOORS.slice(0, -1).map((rooms, floor) => ({
  files: rooms.map((room) => (room.endsWith('/') ? `src/${room}**/*.ts` : `src/${room}`)),
  rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: climbingPatterns(floor) }] },
}));
export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'bench/results/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: { ...globals.node },
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // A promise nobody awaits loses its rejection: on a server that is a crash or a silent failure.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      eqeqeq: ['error', 'always'],
      'no-console': 'error',
      // Validation and the path rules match control characters on purpose.
      'no-control-regex': 'off',
    },
  },
  {
    // Scripts run by hand or by npm (the bench, the demo, the example services) print to the terminal.
    files: ['bench/**', 'examples/**'],
    rules: { 'no-console': 'off' },
  },
  ...floorRules,
);
