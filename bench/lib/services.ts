import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { nginxDecisionCacheConf } from '../../examples/ingress/configs.mjs';
import { exampleCommand, nginxCommand, nginxVersion, PEER_IDENTITY, peerHttp, proxyHttp, TOKENGATE_IDENTITY, upstreamHttp } from './nginx.js';
import { freePort, waitForPort, withChildren, type Placement, type ProcessGroup, type Started } from './processes.js';
import { tokengateConfigYaml, type BenchConfigOptions } from './tokengate-config.js';

/** The servers of a run, each its own process(es), so that /proc accounts for each alone. */

export interface Tier {
  name: string;
  url: string;
  port: number;
  /** Every process whose CPU is this tier's (nginx: master, workers and its check service), read at each window's start. */
  pids(): number[];
  /** Processes that must still run after a window, or the window measured a crash. */
  processes: Started[];
  /** tokengate's ops listener: /metrics, the admin API. */
  opsUrl?: string;
}

/** `node --cpu-prof` flags writing `<dir>/<name>.cpuprofile` when the process exits; none without a directory. */
function profileFlags(profileDir: string | null, name: string): string[] {
  return profileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, `--cpu-prof-name=${name}.cpuprofile`];
}

/** One of bench/'s servers: plain JavaScript on plain node, like tokengate's dist/ (no loader in the measured process). */
export async function startNodeServer(
  group: ProcessGroup,
  name: string,
  placement: Placement,
  script: string,
  args: string[],
  profileDir: string | null = null,
): Promise<Tier> {
  const port = await freePort();
  const started = group.spawn(name, placement, process.execPath, [...profileFlags(profileDir, name), script, '--port', String(port), ...args]);
  await waitForPort(started, port);
  return { name, url: `http://127.0.0.1:${port}`, port, pids: () => [started.pid], processes: [started] };
}

/** nginx `return 200` when nginx is installed (it takes the shared core little), the Node upstream otherwise. */
export async function startUpstream(group: ProcessGroup): Promise<Tier> {
  if (nginxVersion() === null) return startNodeServer(group, 'upstream', 'load', 'bench/servers/upstream.mjs', []);
  const port = await freePort();
  const started = group.spawn('upstream', 'load', 'nginx', nginxCommand(group.logDir, 'upstream', 1, upstreamHttp(port)), 'SIGQUIT');
  await waitForPort(started, port);
  return { name: 'nginx upstream', url: `http://127.0.0.1:${port}`, port, pids: () => withChildren(started.pid), processes: [started] };
}

export interface PeerOptions {
  name: string;
  placement: Placement;
  workers: number;
  upstreamPort: number;
  redisUrl: string;
  keyPrefix: string;
  /** The check service's LRU cache lifetime; 0: a Redis read for every request. */
  cacheSeconds: number;
}

/** nginx `auth_request` + the token-check service (bench/peer/token-check.mjs), both in the same placement. */
export async function startNginxPeer(group: ProcessGroup, options: PeerOptions): Promise<Tier> {
  const check = await startNodeServer(group, `${options.name}-check`, options.placement, 'bench/peer/token-check.mjs', [
    '--redis',
    options.redisUrl,
    '--prefix',
    options.keyPrefix,
    '--cache-seconds',
    String(options.cacheSeconds),
  ]);
  const port = await freePort();
  const args = nginxCommand(group.logDir, options.name, options.workers, peerHttp(port, options.upstreamPort, check.port, PEER_IDENTITY));
  const nginx = group.spawn(options.name, options.placement, 'nginx', args, 'SIGQUIT');
  await waitForPort(nginx, port);
  const checkPid = check.processes[0]!.pid;
  return {
    name: options.name,
    url: `http://127.0.0.1:${port}`,
    port,
    pids: () => [...withChildren(nginx.pid), checkPid],
    processes: [nginx, ...check.processes],
  };
}

/** nginx proxying to the upstream alone, one worker. */
export async function startNginxProxy(group: ProcessGroup, options: { name: string; placement: Placement; upstreamPort: number }): Promise<Tier> {
  const port = await freePort();
  const nginx = group.spawn(
    options.name,
    options.placement,
    'nginx',
    nginxCommand(group.logDir, options.name, 1, proxyHttp(port, options.upstreamPort)),
    'SIGQUIT',
  );
  await waitForPort(nginx, port);
  return { name: options.name, url: `http://127.0.0.1:${port}`, port, pids: () => withChildren(nginx.pid), processes: [nginx] };
}

export interface NginxDecisionsOptions {
  name: string;
  placement: Placement;
  upstreamPort: number;
  tokengate: Tier & { decisionsPort: number };
  /** examples/ingress/nginx-decision-cache.conf (one worker, both of its APIs the upstream) instead of `auth_request`. */
  decisionCache?: boolean;
}

/** nginx asking tokengate's decision listener (a tokengate started with `decisionsPort`), in the same placement. */
export async function startNginxDecisions(group: ProcessGroup, options: NginxDecisionsOptions): Promise<Tier> {
  const port = await freePort();
  const upstream = `127.0.0.1:${options.upstreamPort}`;
  const args =
    options.decisionCache === true
      ? exampleCommand(
          group.logDir,
          options.name,
          nginxDecisionCacheConf(
            { ingress: `127.0.0.1:${port}`, decisions: `127.0.0.1:${options.tokengate.decisionsPort}`, userApi: upstream, organizerApi: upstream },
            { workerProcesses: 1 },
          ),
        )
      : nginxCommand(group.logDir, options.name, 1, peerHttp(port, options.upstreamPort, options.tokengate.decisionsPort, TOKENGATE_IDENTITY, '/auth-request'));
  const nginx = group.spawn(options.name, options.placement, 'nginx', args, 'SIGQUIT');
  await waitForPort(nginx, port);
  return {
    name: options.name,
    url: `http://127.0.0.1:${port}`,
    port,
    pids: () => [...withChildren(nginx.pid), ...options.tokengate.pids()],
    processes: [nginx, ...options.tokengate.processes],
    // tokengate's metrics: the row's cache-hit share.
    opsUrl: options.tokengate.opsUrl,
  };
}

export interface TokengateOptions {
  name: string;
  placement: Placement;
  config: Omit<BenchConfigOptions, 'port' | 'opsPort'>;
  nodeFlags: string[];
  profileDir: string | null;
}

/** Asks `tokengate check` about a config file: null when valid, else what it said, on one line. */
function configRefusal(file: string): string | null {
  const result = spawnSync(process.execPath, ['dist/main.js', 'check', '--config', file], { encoding: 'utf8' });
  return result.status === 0 ? null : (result.stderr || result.stdout).trim().replace(/\s*\n\s*/g, ' ');
}

/** tokengate built from this tree (dist/) serving a generated config; a string when `tokengate check` refuses that config. */
export async function startTokengate(group: ProcessGroup, options: TokengateOptions): Promise<Tier | string> {
  const [port, opsPort] = [await freePort(), await freePort()];
  const configFile = join(group.logDir, `${options.name}.yaml`);
  writeFileSync(configFile, tokengateConfigYaml({ ...options.config, port, opsPort }));
  const refused = configRefusal(configFile);
  if (refused !== null) return `tokengate check refuses ${configFile}: ${refused}`;
  const args = [...options.nodeFlags, ...profileFlags(options.profileDir, options.name), 'dist/main.js', 'serve', '--config', configFile];
  const started = group.spawn(options.name, options.placement, process.execPath, args);
  await waitForPort(started, port);
  await waitForPort(started, opsPort);
  return {
    name: options.name,
    url: `http://127.0.0.1:${port}`,
    opsUrl: `http://127.0.0.1:${opsPort}`,
    port,
    pids: () => withChildren(started.pid),
    processes: [started],
  };
}
