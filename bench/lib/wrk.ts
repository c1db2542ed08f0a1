import type { AutocannonRequest } from 'autocannon';
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { LatencyRecorder, type LoadWindow } from './load.js';

/**
 * wrk, the C load generator, for the rows that send one fixed request as fast as it is answered
 * (BENCH_LOAD=wrk). One thread: the load side has one core, shared with the upstream and Redis,
 * and a C event loop needs a fraction of what autocannon's takes to keep 50 connections busy.
 */

/** The installed wrk's version, or null when there is none (`wrk --version` exits 1 after printing it). */
export function wrkVersion(): string | null {
  const result = spawnSync('wrk', ['--version'], { encoding: 'utf8' });
  if (result.error !== undefined) return null;
  return /^wrk (\S+)/m.exec(`${result.stdout}${result.stderr}`)?.[1] ?? null;
}

export interface WrkOptions {
  url: string;
  connections: number;
  durationSeconds: number;
  request: AutocannonRequest;
  /** Where the run's Lua script is written. */
  scriptDir: string;
}

/** Quantiles of each window's latencies the script prints: the row pools them as it pools autocannon's latencies. */
const QUANTILES = 1_000;
const RESULT_LINE = 'BENCH-RESULT ';

/** One wrk run. Every answer of 400 or more is unexpected (wrk counts those alone); the rows that expect a refusal use autocannon. */
export async function runWrkWindow(options: WrkOptions): Promise<LoadWindow> {
  const script = join(options.scriptDir, 'wrk-request.lua');
  writeFileSync(script, wrkScript(options.request));
  const started = performance.now();
  const output = await run('wrk', [
    '--threads',
    '1',
    '--connections',
    String(options.connections),
    '--duration',
    `${options.durationSeconds}s`,
    '--timeout',
    '10s',
    '--script',
    script,
    options.url,
  ]);
  const seconds = (performance.now() - started) / 1000;
  const line = output.split('\n').find((each) => each.startsWith(RESULT_LINE));
  if (line === undefined) throw new Error(`wrk printed no result:\n${output}`);
  const result = JSON.parse(line.slice(RESULT_LINE.length)) as {
    requests: number;
    errors: { connect: number; read: number; write: number; status: number; timeout: number };
    quantilesUs: number[];
  };
  const latencies = new LatencyRecorder();
  for (const microseconds of result.quantilesUs) latencies.record(microseconds / 1000);
  const { connect, read, write, status, timeout } = result.errors;
  return {
    requests: result.requests,
    seconds,
    statuses: { 'below 400': result.requests - status, '400 or more': status },
    errors: connect + read + write + timeout,
    unexpected: status,
    latencies,
  };
}

/** The request as wrk's Lua API sets it, and a done() that prints the figures as one JSON line. */
function wrkScript(request: AutocannonRequest): string {
  const text = (value: string) => {
    if (!/^[\x20-\x7e]*$/.test(value)) throw new Error(`wrk's script takes printable ASCII only: ${JSON.stringify(value)}`);
    return JSON.stringify(value);
  };
  const body = request.body === undefined ? [] : [`wrk.body = ${text(String(request.body))}`];
  return [
    `wrk.method = ${text(request.method ?? 'GET')}`,
    `wrk.path = ${text(request.path ?? '/')}`,
    ...Object.entries(request.headers ?? {}).map(([name, value]) => `wrk.headers[${text(name)}] = ${text(value)}`),
    ...body,
    'done = function(summary, latency, requests)',
    '  local quantiles = {}',
    `  for i = 0, ${QUANTILES - 1} do quantiles[#quantiles + 1] = latency:percentile((i + 0.5) * 100 / ${QUANTILES}) end`,
    '  local e = summary.errors',
    `  io.write(string.format('\\n${RESULT_LINE}{"requests":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},"quantilesUs":[%s]}\\n',`,
    '    summary.requests, e.connect, e.read, e.write, e.status, e.timeout, table.concat(quantiles, ",")))',
    'end',
    '',
  ].join('\n');
}

function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(output) : reject(new Error(`wrk exited with ${code}:\n${output}`))));
  });
}
