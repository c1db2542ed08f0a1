import { performance } from 'node:perf_hooks';

const started = performance.now();

/** A line on stderr, stamped with the seconds since the run began. */
export function progress(message: string): void {
  process.stderr.write(`[bench ${((performance.now() - started) / 1000).toFixed(0).padStart(3)} s] ${message}\n`);
}

/** Seconds since the run began. */
export function elapsedSeconds(): number {
  return (performance.now() - started) / 1000;
}
