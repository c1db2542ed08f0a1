import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { nextRequestId } from '../src/observability/request-id.js';

const SHAPE = /^([A-Za-z0-9_-]{16})-([0-9a-z]+)$/;

/** The prefix another process draws (another sidecar, worker, or the same sidecar restarted). */
function prefixOfAnotherProcess(): string {
  const result = spawnSync(
    process.execPath,
    ['--import', 'tsx', '-e', "import('./src/observability/request-id.ts').then((m) => console.log(m.nextRequestId()))"],
    {
      encoding: 'utf8',
    },
  );
  expect(result.status, result.stderr).toBe(0);
  return SHAPE.exec(result.stdout.trim())![1]!;
}

describe('generated request ids', () => {
  it('never repeat within a process', () => {
    const ids = new Set<string>();
    for (let index = 0; index < 100_000; index++) ids.add(nextRequestId());
    expect(ids.size).toBe(100_000);
    for (const id of [...ids].slice(0, 3)) expect(id).toMatch(SHAPE);
  });

  it('carry a prefix of their own in every process, so no two sidecars or restarts share one', () => {
    const own = SHAPE.exec(nextRequestId())![1];
    const others = [prefixOfAnotherProcess(), prefixOfAnotherProcess()];
    expect(new Set([own, ...others]).size).toBe(3);
  });
});
