import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { summarize, type CpuProfile } from './lib/cpu-profile.js';
import { markdownTable } from './lib/report.js';

/**
 * Where the gateway's time goes, from a profile of a run, e.g.
 *   BENCH_ONLY=cache-hit BENCH_CPU_PROF=tmp/prof npm run bench
 *   node --import tsx bench/profile.ts tmp/prof/tokengate.cpuprofile [--top 25] [--match dist/] [--skip-seconds 3]
 * --skip-seconds leaves out the start (module loading) so the shares are those of serving.
 */

/** The largest entries, as shares of the busy (non-idle) time. */
function top(map: Map<string, number>, busyMs: number, count: number, match?: string): string[][] {
  return [...map.entries()]
    .filter(([key]) => key !== '(idle)' && (match === undefined || key.includes(match)))
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([key, ms]) => [key, ms.toFixed(0), `${((ms / busyMs) * 100).toFixed(1)}%`]);
}

function main(): void {
  const { values, positionals } = parseArgs({
    options: { top: { type: 'string', default: '25' }, match: { type: 'string' }, 'skip-seconds': { type: 'string', default: '0' } },
    allowPositionals: true,
  });
  if (positionals.length === 0) throw new Error('usage: node --import tsx bench/profile.ts FILE.cpuprofile [--top N] [--match TEXT] [--skip-seconds S]');
  const count = Number(values.top);
  for (const file of positionals) {
    const summary = summarize(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile, Number(values['skip-seconds']) * 1000);
    const busyMs = summary.totalMs - (summary.selfByFunction.get('(idle)') ?? 0);
    process.stdout.write(`\n${file}: ${(summary.totalMs / 1000).toFixed(1)} s sampled, ${(busyMs / 1000).toFixed(1)} s busy; shares are of the busy time\n\n`);
    process.stdout.write(`Self time by source\n${markdownTable(['source', 'ms', 'share'], top(summary.selfBySource, busyMs, count))}\n\n`);
    process.stdout.write(`Self time by function\n${markdownTable(['function', 'ms', 'share'], top(summary.selfByFunction, busyMs, count))}\n\n`);
    process.stdout.write(
      `Inclusive time by function${values.match === undefined ? '' : ` (matching "${values.match}")`}\n` +
        `${markdownTable(['function', 'ms', 'share'], top(summary.inclusiveByFunction, busyMs, count, values.match))}\n`,
    );
  }
}

main();
