import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { ROOT } from './support/markdown.js';

/**
 * The type check of the whole tree (sources, tests, bench, examples: tsconfig.json), as one file
 * of the suite: it runs beside the files that wait on sockets and timers instead of before all of
 * them (a minute of CI on two cores).
 */

const TSC = createRequire(import.meta.url).resolve('typescript/bin/tsc');

describe('the tree', () => {
  it('type-checks (tsc -p tsconfig.json --noEmit)', async () => {
    const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [TSC, '-p', 'tsconfig.json', '--noEmit'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.on('error', reject);
      child.on('close', (exitCode) => resolve({ code: exitCode, output }));
    });
    expect(output).toBe('');
    expect(code).toBe(0);
  }, 180_000);
});
