import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { watchConfig, type ConfigTrigger } from '../src/config/watch.js';
import { eventually, sleep } from './support/wait.js';

/**
 * watchConfig: what calls for a reload (SIGHUP, a changed file, however it was changed) and what
 * does not (other files, the same content written again). `tokengate serve` reloading on each:
 * cli-reload.test.ts.
 */

const DEBOUNCE_MS = 40;
/** Longer than a debounce and the events before it: what would have triggered has by then. */
const SETTLE_MS = 400;

let directory: string;
let calls: ConfigTrigger[];
let stop: (() => void) | undefined;

beforeEach(() => {
  directory = mkdtempSync(join(tmpdir(), 'tokengate-watch-'));
  calls = [];
});
afterEach(() => {
  stop?.();
  stop = undefined;
  rmSync(directory, { recursive: true, force: true });
});

function watch(file: string): void {
  stop = watchConfig(file, (trigger) => calls.push(trigger), { debounceMs: DEBOUNCE_MS });
}

describe('watchConfig', () => {
  it('calls back once for a file written in place, and not for the same content written again', async () => {
    const file = join(directory, 'tokengate.yaml');
    writeFileSync(file, 'routes: []\n');
    watch(file);
    writeFileSync(file, 'routes: []\n');
    await sleep(SETTLE_MS);
    expect(calls).toEqual([]);
    writeFileSync(file, 'logging:\n');
    writeFileSync(file, 'logging:\n  level: debug\n');
    await eventually(() => calls.length > 0);
    await sleep(SETTLE_MS);
    expect(calls).toEqual(['file']);
  });

  it('calls back for a file replaced by a rename (an editor saving), and again for the next one', async () => {
    const file = join(directory, 'tokengate.yaml');
    writeFileSync(file, 'routes: []\n');
    watch(file);
    for (const [index, content] of ['logging: {}\n', 'cache: {}\n'].entries()) {
      writeFileSync(join(directory, '.tokengate.yaml.swp'), content);
      renameSync(join(directory, '.tokengate.yaml.swp'), file);
      await eventually(() => calls.length === index + 1);
    }
    expect(calls).toEqual(['file', 'file']);
  });

  it('calls back for a Kubernetes ConfigMap update (the ..data symlink swapped), not for other files of the directory', async () => {
    // The layout the kubelet writes: tokengate.yaml -> ..data/tokengate.yaml, ..data -> a timestamped directory.
    const version = (name: string, content: string) => {
      mkdirSync(join(directory, name));
      writeFileSync(join(directory, name, 'tokengate.yaml'), content);
    };
    version('..2026_01_01_00_00_00.1', 'routes: []\n');
    symlinkSync('..2026_01_01_00_00_00.1', join(directory, '..data'));
    symlinkSync('..data/tokengate.yaml', join(directory, 'tokengate.yaml'));
    watch(join(directory, 'tokengate.yaml'));

    writeFileSync(join(directory, 'unrelated.txt'), 'x');
    await sleep(SETTLE_MS);
    expect(calls).toEqual([]);

    version('..2026_01_01_00_05_00.2', 'logging:\n  level: debug\n');
    symlinkSync('..2026_01_01_00_05_00.2', join(directory, '..data_tmp'));
    renameSync(join(directory, '..data_tmp'), join(directory, '..data'));
    rmSync(join(directory, '..2026_01_01_00_00_00.1'), { recursive: true });
    await eventually(() => calls.length > 0);
    await sleep(SETTLE_MS);
    expect(calls).toEqual(['file']);
  });

  it('calls back on SIGHUP whatever the file holds, and stops listening for it when stopped', async () => {
    const file = join(directory, 'tokengate.yaml');
    writeFileSync(file, 'routes: []\n');
    const before = process.listenerCount('SIGHUP');
    watch(file);
    expect(process.listenerCount('SIGHUP')).toBe(before + 1);
    process.emit('SIGHUP', 'SIGHUP');
    expect(calls).toEqual(['SIGHUP']);
    stop!();
    stop = undefined;
    expect(process.listenerCount('SIGHUP')).toBe(before);
    writeFileSync(file, 'logging: {}\n');
    await sleep(SETTLE_MS);
    expect(calls).toEqual(['SIGHUP']);
  });

  it('waits for a file that is gone for a while, and calls back when it is back with new content', async () => {
    const file = join(directory, 'tokengate.yaml');
    writeFileSync(file, 'routes: []\n');
    watch(file);
    rmSync(file);
    await sleep(SETTLE_MS);
    expect(calls).toEqual([]);
    writeFileSync(file, 'logging: {}\n');
    await eventually(() => calls.length > 0);
    expect(calls).toEqual(['file']);
  });
});
