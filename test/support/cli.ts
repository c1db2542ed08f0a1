import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');
/** The CLI from source (tsx), so tests need no build step and run what the tree says. */
const CLI = ['--import', 'tsx', join(ROOT, 'src/main.ts')];

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], options: { stdin?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [...CLI, ...args], { cwd: ROOT, env: { ...process.env, ...options.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolvePromise({ code, stdout, stderr }));
    child.stdin.end(options.stdin ?? '');
  });
}

export interface TempConfigs {
  /** Writes a config file and returns its path. */
  write(text: string): string;
  /** Removes every file written. */
  remove(): void;
}

/** Config files for one test file, in a temporary directory it removes when done. */
export function tempConfigs(): TempConfigs {
  const directory = mkdtempSync(join(tmpdir(), 'tokengate-cli-'));
  let written = 0;
  return {
    write(text) {
      written += 1;
      const file = join(directory, `tokengate-${written}.yaml`);
      writeFileSync(file, text);
      return file;
    },
    remove: () => rmSync(directory, { recursive: true, force: true }),
  };
}

export interface ServeProcess {
  child: ChildProcess;
  publicUrl: string;
  opsUrl: string;
  /** Every log line printed so far (JSON lines). */
  output(): string;
  /** Resolves with the exit code. */
  exited: Promise<number | null>;
}

/** Starts `tokengate serve` and resolves once it logs that it listens. */
export function startServe(configFile: string, env: Record<string, string> = {}): Promise<ServeProcess> {
  return spawnServe(configFile, env).listening;
}

export interface SpawnedServe {
  child: ChildProcess;
  /** Everything printed so far, stdout and stderr. */
  output(): string;
  /** Resolves once it logs that it listens; rejects if it exits first. */
  listening: Promise<ServeProcess>;
  exited: Promise<number | null>;
}

/** Starts `tokengate serve` and hands it over at once, for a test that watches it start. */
export function spawnServe(configFile: string, env: Record<string, string> = {}): SpawnedServe {
  const child = spawn(process.execPath, [...CLI, 'serve', '--config', configFile], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolveExit) => child.on('close', resolveExit));
  const listening = new Promise<ServeProcess>((resolvePromise, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const line = output.split('\n').find((each) => each.includes('"tokengate listening"'));
      if (line !== undefined) {
        const { publicUrl, opsUrl } = JSON.parse(line) as { publicUrl: string; opsUrl: string };
        resolvePromise({ child, publicUrl, opsUrl, output: () => output, exited });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    void exited.then((code) => reject(new Error(`tokengate serve exited with ${code} before listening:\n${output}`)));
  });
  // A test that expects the exit handles it through `exited`.
  listening.catch(() => {});
  return { child, output: () => output, listening, exited };
}
