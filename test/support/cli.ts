import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');
/**
 * The NODE_OPTIONS the image gives each process (the Dockerfile's): memory is judged as it ships.
 * Under node's default limit (a quarter of this machine's memory) V8 grows a busy heap lazily.
 */
export const IMAGE_NODE_OPTIONS = /^\s*(?:ENV\s+)?NODE_OPTIONS="([^"]*)"/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))![1]!;

/** The CLI from source (tsx), so tests need no build step and run what the tree says. */
const CLI = ['--import', 'tsx', join(ROOT, 'src/main.ts')];

let stateHome: string | undefined;
/**
 * The XDG_STATE_HOME of every process these helpers start: a serve without admin.token keeps
 * its admin token there, and the CLI reads it there, never in the home of whoever runs the tests.
 * One directory per test file, removed when it ends.
 */
export function testStateHome(): string {
  if (stateHome === undefined) {
    const made = mkdtempSync(join(tmpdir(), 'tokengate-state-'));
    stateHome = made;
    process.once('exit', () => rmSync(made, { recursive: true, force: true }));
  }
  return stateHome;
}

/**
 * The warnings a serve logged (pino's level 40), but the one every serve of the suite logs at
 * start for its test mode's password cost (docs/issuer.md#password-hashes).
 */
export function warningLines(output: string): string[] {
  return output.split('\n').filter((line) => line.includes('"level":40') && !line.includes('TOKENGATE_TEST_MODE'));
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], options: { stdin?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [...CLI, ...args], {
      cwd: ROOT,
      env: { ...process.env, XDG_STATE_HOME: testStateHome(), ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
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

/** Starts `tokengate serve` and resolves once it logs that both listeners listen. */
export function startServe(configFile: string, env: Record<string, string> = {}): Promise<ServeProcess> {
  return spawnServe(configFile, env).listening;
}

export interface SpawnedServe {
  child: ChildProcess;
  /** Everything printed so far, stdout and stderr. */
  output(): string;
  /** Resolves once it logs that both listeners listen; rejects if it exits first. */
  listening: Promise<ServeProcess>;
  exited: Promise<number | null>;
}

/** Starts `tokengate serve` and hands it over at once, for a test that watches it start. */
export function spawnServe(configFile: string, env: Record<string, string> = {}): SpawnedServe {
  const child = spawn(process.execPath, [...CLI, 'serve', '--config', configFile], {
    cwd: ROOT,
    env: { ...process.env, XDG_STATE_HOME: testStateHome(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolveExit) => child.on('close', resolveExit));
  const listening = new Promise<ServeProcess>((resolvePromise, reject) => {
    // One process logs both URLs; with server.workers, the workers log the public one and their primary the ops one.
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const listening = output
        .split('\n')
        .filter((line) => line.includes('"tokengate listening"'))
        .map((line) => JSON.parse(line) as { publicUrl?: string; opsUrl?: string });
      const publicUrl = listening.find((line) => line.publicUrl !== undefined)?.publicUrl;
      const opsUrl = listening.find((line) => line.opsUrl !== undefined)?.opsUrl;
      if (publicUrl !== undefined && opsUrl !== undefined) resolvePromise({ child, publicUrl, opsUrl, output: () => output, exited });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    void exited.then((code) => reject(new Error(`tokengate serve exited with ${code} before listening:\n${output}`)));
  });
  // A test that expects the exit handles it through `exited`.
  listening.catch(() => {});
  return { child, output: () => output, listening, exited };
}

/**
 * Runs `tokengate serve` with a terminal as its stdout (util-linux `script` gives it a
 * pseudo-terminal) until it says it listens; resolves with everything it printed, then stops it.
 */
export function serveInTerminal(configFile: string): Promise<string> {
  const command = [process.execPath, ...CLI, 'serve', '--config', configFile].map((part) => `'${part.replace(/'/g, `'\\''`)}'`).join(' ');
  return new Promise((resolvePromise, reject) => {
    const child = spawn('script', ['-qfec', command, '/dev/null'], {
      cwd: ROOT,
      env: { ...process.env, XDG_STATE_HOME: testStateHome() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const timer = setTimeout(() => finish(new Error(`tokengate serve did not start in a terminal:\n${output}`)), 30_000);
    const finish = (error?: Error) => {
      clearTimeout(timer);
      // tokengate runs in the terminal's own session, where the hangup of the terminal is a
      // SIGHUP, which reloads it: it is stopped by its pid.
      for (const pid of [...descendants(child.pid!), child.pid!]) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      if (error === undefined) resolvePromise(output);
      else reject(error);
    };
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('tokengate listening')) finish();
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', finish);
    child.on('close', () => finish(new Error(`tokengate serve exited in a terminal before listening:\n${output}`)));
  });
}

/** The processes below `pid`, deepest last (Linux /proc). */
function descendants(pid: number): number[] {
  let children: number[];
  try {
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
  } catch {
    return [];
  }
  return children.flatMap((child) => [child, ...descendants(child)]);
}
