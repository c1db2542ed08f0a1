import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { nginxConf } from '../peer/nginx-conf.js';
import { childPids } from './proc.js';
import { freePort, waitForPort, type ProcessGroup, type Started } from './processes.js';
import { tokengateConfigYaml, type BenchConfigOptions } from './tokengate-config.js';

/** The servers a run starts, each a separate process so /proc can account for it alone. */

export interface Service {
  url: string;
  port: number;
  /** The processes whose CPU counts as this service's (nginx: master, worker and the check service). */
  pids(): number[];
  process: Started;
  /** The ops listener (tokengate only): /metrics, the admin API. */
  opsUrl?: string;
}

/** `node --cpu-prof` flags writing `<dir>/<name>.cpuprofile` when the process exits; none without a directory. */
function profileFlags(profileDir: string | null, name: string): string[] {
  return profileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, `--cpu-prof-name=${name}.cpuprofile`];
}

/** Runs one of bench/'s servers (plain JavaScript, plain node, like tokengate's dist/). */
async function startBenchServer(group: ProcessGroup, name: string, script: string, args: string[], profileDir: string | null = null): Promise<Service> {
  const port = await freePort();
  const started = group.spawn(name, process.execPath, [...profileFlags(profileDir, name), script, '--port', String(port), ...args]);
  await waitForPort(started, port);
  return { url: `http://127.0.0.1:${port}`, port, pids: () => [started.pid], process: started };
}

export function startUpstream(group: ProcessGroup): Promise<Service> {
  return startBenchServer(group, 'upstream', 'bench/servers/upstream.mjs', []);
}

export function startBareProxy(group: ProcessGroup, upstreamUrl: string, profileDir: string | null): Promise<Service> {
  return startBenchServer(group, 'bare-proxy', 'bench/servers/bare-proxy.mjs', ['--upstream', upstreamUrl], profileDir);
}

export function nginxVersion(): string | null {
  const result = spawnSync('nginx', ['-v'], { encoding: 'utf8' });
  return result.status === 0 ? result.stderr.trim().replace(/^nginx version: nginx\//, '') : null;
}

/** nginx (one worker) + the token-check service, both reading the run's Redis. */
export async function startNginxPeer(group: ProcessGroup, dir: string, upstreamPort: number, redisUrl: string, keyPrefix: string): Promise<Service> {
  const check = await startBenchServer(group, 'token-check', 'bench/peer/token-check.mjs', ['--redis', redisUrl, '--prefix', keyPrefix]);
  const nginxDir = join(dir, 'nginx');
  mkdirSync(nginxDir, { recursive: true });
  const port = await freePort();
  const confFile = join(nginxDir, 'nginx.conf');
  writeFileSync(confFile, nginxConf({ dir: nginxDir, listenPort: port, upstreamPort, tokenCheckPort: check.port }));
  const master = group.spawn('nginx', 'nginx', ['-p', nginxDir, '-c', confFile, '-e', join(nginxDir, 'nginx-error.log'), '-g', 'daemon off;'], {
    stopSignal: 'SIGQUIT',
  });
  await waitForPort(master, port);
  return { url: `http://127.0.0.1:${port}`, port, pids: () => [master.pid, ...childPids(master.pid), check.process.pid], process: master };
}

export type TokengateOptions = Omit<BenchConfigOptions, 'port' | 'opsPort'> & {
  /** Extra node flags (BENCH_GATEWAY_NODE_FLAGS). */
  nodeFlags: string[];
};

export interface TokengateService extends Service {
  opsUrl: string;
}

/** tokengate built from this tree (dist/), serving a generated config. */
export async function startTokengate(
  group: ProcessGroup,
  dir: string,
  name: string,
  options: TokengateOptions,
  profileDir: string | null = null,
): Promise<TokengateService> {
  const [port, opsPort] = [await freePort(), await freePort()];
  const configFile = join(dir, `${name}.yaml`);
  const { nodeFlags, ...configOptions } = options;
  writeFileSync(configFile, tokengateConfigYaml({ ...configOptions, port, opsPort }));
  const started = group.spawn(name, process.execPath, [...nodeFlags, ...profileFlags(profileDir, name), 'dist/main.js', 'serve', '--config', configFile]);
  await waitForPort(started, port);
  await waitForPort(started, opsPort);
  return { url: `http://127.0.0.1:${port}`, opsUrl: `http://127.0.0.1:${opsPort}`, port, pids: () => [started.pid], process: started };
}
