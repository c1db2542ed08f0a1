import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';
import { FLOORS } from '../eslint.config.js';
import { readDocument, ROOT, tableUnder } from './support/markdown.js';

/** The rooms of src/ as docs/design.md's table lists them: its floor, and each room a row names. */
function documentedRooms(): Array<{ floor: number; room: string }> {
  return tableUnder(readDocument('docs/design.md'), '## The rooms of src/').flatMap((row) => {
    const [, floor, rooms] = /^\| (\d+) \| ([^|]+) \|/.exec(row) ?? [];
    return [...(rooms ?? '').matchAll(/`([^`]+)`/g)].map((match) => ({ floor: Number(floor), room: match[1]! }));
  });
}

/**
 * The repository's own lint config, as `npm run lint` runs it, with its floor rule alone: that
 * rule reads import paths, not types, so the TypeScript program the type-aware rules need (most
 * of this file's time) is not built.
 */
const FLOOR_RULE = '@typescript-eslint/no-restricted-imports';
const eslint = new ESLint({
  cwd: ROOT,
  ruleFilter: ({ ruleId }) => ruleId === FLOOR_RULE,
  overrideConfig: { languageOptions: { parserOptions: { projectService: false } } },
});

/** What the real lint config says of `text` put in place of `file`: the floor rule's messages. */
async function climbs(file: string, text: string): Promise<string[]> {
  const [result] = await eslint.lintText(text, { filePath: join(ROOT, file) });
  return result!.messages.filter((message) => message.ruleId === FLOOR_RULE).map((message) => message.message);
}

const source = (file: string) => readFileSync(join(ROOT, file), 'utf8');

describe('the floors of src/', () => {
  it('hold every folder and file at the top of src/, each on one floor, as docs/design.md lists them', () => {
    const inSrc = readdirSync(join(ROOT, 'src'), { withFileTypes: true }).map((entry) => (entry.isDirectory() ? `${entry.name}/` : entry.name));
    const onFloors = FLOORS.flat();
    expect(new Set(onFloors).size).toBe(onFloors.length);
    expect([...onFloors].sort()).toEqual([...inSrc].sort());
    const documented = documentedRooms();
    expect(documented.map(({ room }) => room).sort()).toEqual([...inSrc].sort());
    expect(documented.every(({ floor, room }) => FLOORS[floor - 1]?.includes(room))).toBe(true);
  });

  it('make the lint fail on an import that climbs, from a folder, a nested folder or a file at the top, type imports included', async () => {
    const cases = [
      { file: 'src/config/load.ts', line: "export { check } from '../gateway/check.js';" },
      { file: 'src/store/memory.ts', line: "import type { TokengateContext } from '../context.js';\nexport type Climbing = TokengateContext;" },
      { file: 'src/issuer/authorize/index.ts', line: "export { createListenerGuard } from '../../listeners/guard.js';" },
      { file: 'src/context.ts', line: "export { registerGateway } from './gateway/index.js';" },
      { file: 'src/http/path.ts', line: "export { parseConfig } from '../load-config.js';" },
      { file: 'src/ratelimit/limiter.ts', line: "export { deny } from '../gateway/denials.js';" },
    ];
    for (const { file, line } of cases) {
      const messages = await climbs(file, `${source(file)}\n${line}\n`);
      expect(messages, `${file}: ${line}`).toHaveLength(1);
      expect(messages[0]).toMatch(/climbs a floor/);
    }
  }, 120_000);

  it('let a file import from its own floor and those below', async () => {
    // The gateway (floor 7) may use a room of its own floor, of floor 5 and the http grammar of floor 1.
    const file = 'src/gateway/check.ts';
    const below = [
      "export { registerAdmin } from '../admin/index.js';",
      "export { resourceRegistry } from '../resource/registry.js';",
      "export { normalizePath } from '../http/path.js';",
    ];
    expect(await climbs(file, `${source(file)}\n${below.join('\n')}\n`)).toEqual([]);
  }, 120_000);
});
