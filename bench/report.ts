import { readFileSync } from 'node:fs';
import { renderRun, type RecordedRun } from './lib/report.js';

/**
 * Prints the tables of a recorded run again, e.g. the one BENCHMARKS.md quotes:
 *   node --import tsx bench/report.ts bench/results/2026-11-21.json
 * The verdicts are judged anew from the figures, so they follow the current target definitions.
 */
const files = process.argv.slice(2);
if (files.length === 0) throw new Error('usage: node --import tsx bench/report.ts RESULTS.json ...');
for (const file of files) process.stdout.write(`${renderRun(JSON.parse(readFileSync(file, 'utf8')) as RecordedRun)}\n`);
