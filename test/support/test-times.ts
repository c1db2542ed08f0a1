/**
 * Prints where a test run's time went, from vitest's JSON report (argument 1): how long each tier
 * took (its first file's start to its last file's end; tiers overlap, files run side by side)
 * and the ten slowest files. `.ci/run` runs it with tsx after the suite.
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { SYSTEM, UNIT, LONGEST_FIRST } from '../../vitest.config.js';

interface FileResult {
  name: string;
  startTime: number;
  endTime: number;
}

const report = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as { testResults: FileResult[] };
const files = report.testResults.map((result) => {
  const path = relative(process.cwd(), result.name);
  const tier = UNIT.includes(path) ? 'unit' : SYSTEM.includes(path) ? 'system' : 'integration';
  return { path, tier, start: result.startTime, end: result.endTime, seconds: (result.endTime - result.startTime) / 1000 };
});
const print = (line: string) => process.stdout.write(`${line}\n`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(0)} s`;
const runStart = Math.min(...files.map((file) => file.start));

print('Tiers (wall time from the run start; files of all tiers run side by side):');
for (const tier of ['system', 'integration', 'unit']) {
  const ofTier = files.filter((file) => file.tier === tier);
  if (ofTier.length === 0) continue;
  const start = Math.min(...ofTier.map((file) => file.start));
  const end = Math.max(...ofTier.map((file) => file.end));
  const busy = ofTier.reduce((sum, file) => sum + file.seconds, 0);
  print(
    `  ${tier.padEnd(12)} ${String(ofTier.length).padStart(3)} files  ${seconds(start - runStart)} -> ${seconds(end - runStart)}  (files' own durations add up to ${busy.toFixed(0)} s)`,
  );
}
print(`  whole run    ${seconds(Math.max(...files.map((file) => file.end)) - runStart)}`);
print('Ten slowest files:');
for (const file of [...files].sort((a, b) => b.seconds - a.seconds).slice(0, 10)) {
  const mark = LONGEST_FIRST.includes(file.path) ? '  (LONGEST_FIRST)' : '';
  print(`  ${file.seconds.toFixed(1).padStart(6)} s  ${file.path}${mark}`);
}
