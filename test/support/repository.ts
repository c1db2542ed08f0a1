import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { ROOT } from './markdown.js';

/**
 * A copy of the repository as a fresh clone has it, in a new temporary directory (the caller
 * removes it): tracked files and new ones not yet committed, nothing ignored (no node_modules,
 * no dist, no keys written beside the examples).
 */
export function copyRepository(label: string): string {
  const directory = mkdtempSync(join(tmpdir(), `tokengate-${label}-`));
  const listed = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, encoding: 'utf8' });
  if (listed.status !== 0) throw new Error(`git ls-files failed: ${listed.stderr}`);
  for (const file of listed.stdout.split('\0').filter(Boolean)) {
    mkdirSync(dirname(join(directory, file)), { recursive: true });
    try {
      copyFileSync(join(ROOT, file), join(directory, file));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error; // deleted in the work tree, not yet committed
    }
  }
  return directory;
}
