import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './ports.js';

const REDIS_SERVER = process.env.TOKENGATE_TEST_REDIS_SERVER ?? '/usr/bin/redis-server';
const REDIS_CLI = process.env.TOKENGATE_TEST_REDIS_CLI ?? '/usr/bin/redis-cli';

/**
 * No persistence, and a replica that (re)joins is synced at once rather than after the default
 * 5 s that a master waits for more replicas before a diskless sync.
 */
export const WITHOUT_PERSISTENCE = ['--save', '', '--appendonly', 'no', '--repl-diskless-sync-delay', '0'];

/** A started redis-server, as a launcher hands it over. */
export interface RedisProcess {
  readonly pid: number | undefined;
  signal(signal: NodeJS.Signals): void;
  /** Resolves once it has exited. */
  readonly exited: Promise<void>;
}

/** How a launcher starts one redis-server (the bench starts them in its process group, pinned). */
export type RedisSpawner = (name: string, args: string[]) => RedisProcess;

/** redis-server (or `command` with `leadingArgs`) as a child of this process. */
export function spawnRedisServer(args: string[], leadingArgs: string[] = []): RedisProcess {
  const child = spawn(REDIS_SERVER, [...leadingArgs, ...args], { stdio: 'ignore' });
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : once(child, 'exit').then(() => {});
  return { pid: child.pid, signal: (signal) => child.kill(signal), exited };
}

const plainSpawn: RedisSpawner = (_name, args) => spawnRedisServer(args);

/** One redis-server of a local set-up, on a fixed port so it can be killed and started again. */
export class RedisNode {
  private process: RedisProcess | null = null;

  constructor(
    readonly name: string,
    readonly port: number,
    private readonly args: string[],
    private readonly spawner: RedisSpawner,
    private readonly password?: string,
  ) {}

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  get pid(): number | null {
    return this.process?.pid ?? null;
  }

  get running(): boolean {
    return this.process !== null;
  }

  /** Starts it (again, with `extraArgs` this time) and resolves once it answers PING. */
  async start(extraArgs: string[] = []): Promise<void> {
    if (this.process !== null) throw new Error(`${this.name} is already running`);
    const started = this.spawner(this.name, ['--port', String(this.port), '--bind', '127.0.0.1', ...this.args, ...extraArgs]);
    this.process = started;
    // A server that cannot bind its port exits at once: say so, instead of polling it for seconds.
    const exited = started.exited.then(() => {
      throw new Error(`${this.name}: redis-server exited before answering on port ${this.port} (port taken?)`);
    });
    // It exits later too, when a test kills it: that rejection is nobody's concern.
    exited.catch(() => {});
    const auth = this.password === undefined ? '' : `:${encodeURIComponent(this.password)}@`;
    await Promise.race([waitUntilAnswering(`redis://${auth}127.0.0.1:${this.port}`), exited]);
  }

  /** SIGKILL: no goodbye to clients or to the rest of the set-up. */
  async kill(): Promise<void> {
    const running = this.process;
    if (running === null) return;
    this.process = null;
    running.signal('SIGKILL');
    await running.exited;
  }

  /** Freezes it (SIGSTOP): its connections stay open, nothing is read or answered. */
  pause(): void {
    this.process?.signal('SIGSTOP');
  }

  resume(): void {
    this.process?.signal('SIGCONT');
  }

  /** A client for commands the test sends itself. */
  client(): Redis {
    const client = new Redis({ port: this.port, host: '127.0.0.1', password: this.password, maxRetriesPerRequest: 1, lazyConnect: false });
    client.on('error', () => {});
    return client;
  }

  /** One command on a short-lived connection. */
  async command(...args: Array<string | number>): Promise<unknown> {
    const client = this.client();
    try {
      return await client.call(String(args[0]), ...args.slice(1).map(String));
    } finally {
      client.disconnect();
    }
  }
}

/** Resolves once the Redis at `url` answers PING; the last connection error after `timeoutMs`. */
export async function waitUntilAnswering(url: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      probe.disconnect();
    }
  }
}

/** Waits until `check` holds, polling; fails naming `what`. */
export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export interface ClusterOptions {
  masters?: number;
  replicasPerMaster?: number;
  /** cluster-node-timeout: how long a master may be silent before its replica takes over. */
  nodeTimeoutMs?: number;
  spawner?: RedisSpawner;
}

interface ClusterNodeInfo {
  id: string;
  port: number;
  role: 'master' | 'replica';
  failed: boolean;
  masterId: string | null;
  slots: number;
}

/**
 * A real Redis Cluster on free loopback ports: `redis-server --cluster-enabled yes` per node,
 * joined by `redis-cli --cluster create`, without persistence, its files in a temporary
 * directory removed by stop(). Three masters with one replica each by default.
 */
export class LocalRedisCluster {
  private constructor(
    readonly nodes: RedisNode[],
    private readonly directory: string,
  ) {}

  static async start(options: ClusterOptions = {}): Promise<LocalRedisCluster> {
    const masters = options.masters ?? 3;
    const replicas = options.replicasPerMaster ?? 1;
    const directory = mkdtempSync(join(tmpdir(), 'tokengate-cluster-'));
    const nodes: RedisNode[] = [];
    // Each node's cluster bus port from freePort too (by default it is port + 10000, which may be
    // taken meanwhile, or not a port at all).
    const taken = new Set<number>();
    while (nodes.length < masters * (1 + replicas)) {
      const [port, busPort] = [await freePort(), await freePort()];
      if (port === busPort || taken.has(port) || taken.has(busPort)) continue;
      taken.add(port).add(busPort);
      const args = [
        '--cluster-enabled',
        'yes',
        '--cluster-port',
        String(busPort),
        '--cluster-config-file',
        join(directory, `nodes-${port}.conf`),
        '--cluster-node-timeout',
        String(options.nodeTimeoutMs ?? 1_000),
        // As docs/store.md advises: the other masters keep serving while one fails over.
        '--cluster-require-full-coverage',
        'no',
        '--dir',
        directory,
        ...WITHOUT_PERSISTENCE,
      ];
      nodes.push(new RedisNode(`cluster-${port}`, port, args, options.spawner ?? plainSpawn));
    }
    const cluster = new LocalRedisCluster(nodes, directory);
    try {
      await Promise.all(nodes.map((node) => node.start()));
      const created = spawnSync(
        REDIS_CLI,
        ['--cluster', 'create', ...nodes.map((node) => node.address), '--cluster-replicas', String(replicas), '--cluster-yes'],
        {
          encoding: 'utf8',
          timeout: 60_000,
        },
      );
      if (created.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${created.stdout}\n${created.stderr}`);
      await cluster.waitUntilHealthy();
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** Addresses a client starts from (`store.cluster.nodes`). */
  get startupNodes(): string[] {
    return this.nodes.map((node) => node.address);
  }

  node(port: number): RedisNode {
    const node = this.nodes.find((each) => each.port === port);
    if (node === undefined) throw new Error(`no node on port ${port}`);
    return node;
  }

  /** CLUSTER NODES as one running node sees it. */
  async topology(): Promise<ClusterNodeInfo[]> {
    const observer = this.nodes.find((node) => node.running);
    if (observer === undefined) throw new Error('no node runs');
    const text = String(await observer.command('CLUSTER', 'NODES'));
    return text
      .trim()
      .split('\n')
      .map((line) => {
        const [id, address, flags, masterId, , , , , ...slots] = line.split(' ');
        const flagList = flags!.split(',');
        const slotCount = slots.reduce((sum, range) => {
          if (range.startsWith('[')) return sum;
          const [from, to] = range.split('-').map(Number);
          return sum + (to === undefined ? 1 : to - from! + 1);
        }, 0);
        return {
          id: id!,
          port: Number(address!.split('@')[0]!.split(':')[1]),
          role: flagList.includes('master') ? 'master' : 'replica',
          failed: flagList.includes('fail') || flagList.includes('fail?'),
          masterId: masterId === '-' ? null : masterId!,
          slots: slotCount,
        } satisfies ClusterNodeInfo;
      });
  }

  /** The running masters that own slots, as the cluster sees them now. */
  async masters(): Promise<RedisNode[]> {
    const topology = await this.topology();
    return topology.filter((info) => info.role === 'master' && !info.failed && info.slots > 0).map((info) => this.node(info.port));
  }

  /** The running replica of `master`. */
  async replicaOf(master: RedisNode): Promise<RedisNode> {
    const topology = await this.topology();
    const masterId = topology.find((info) => info.port === master.port)!.id;
    const replica = topology.find((info) => info.masterId === masterId && !info.failed);
    if (replica === undefined) throw new Error(`the master on port ${master.port} has no running replica`);
    return this.node(replica.port);
  }

  /** The node that serves `slot` as master now. */
  async masterOfSlot(slot: number): Promise<RedisNode> {
    const observer = this.nodes.find((node) => node.running)!;
    const ranges = (await observer.command('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number]]>;
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    if (range === undefined) throw new Error(`slot ${slot} has no master`);
    return this.node(Number(range[2][1]));
  }

  /**
   * Ends a slot's migration from `source` to `target` as `redis-cli --cluster reshard` does:
   * moves every key still left in the slot, then assigns the slot to `target` on the target and
   * the source, and waits until every running node names `target` as its master. A master refuses
   * to give away a slot while it holds keys of it unless gossip already told it of the new owner,
   * so handing it over with keys left behind passes or fails by gossip's timing.
   */
  async handOverSlot(slot: number, source: RedisNode, target: RedisNode): Promise<void> {
    for (;;) {
      const keys = (await source.command('CLUSTER', 'GETKEYSINSLOT', slot, 100)) as string[];
      if (keys.length === 0) break;
      await source.command('MIGRATE', '127.0.0.1', target.port, '', 0, 5_000, 'KEYS', ...keys);
    }
    const targetId = String(await target.command('CLUSTER', 'MYID'));
    for (const node of [target, source]) await node.command('CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
    await waitFor(`every node to see slot ${slot} served by port ${target.port}`, async () => {
      for (const node of this.nodes.filter((each) => each.running)) {
        const ranges = (await node.command('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number]]>;
        const range = ranges.find(([from, to]) => slot >= from && slot <= to);
        if (range === undefined || Number(range[2][1]) !== target.port) return false;
      }
      return true;
    });
  }

  /**
   * Every running node says cluster_state:ok, every slot is served by a running master, and
   * every running replica's link to its master is up: a cluster a test may start from.
   */
  async waitUntilHealthy(timeoutMs = 30_000): Promise<void> {
    await waitFor(
      'the local Redis Cluster to become healthy',
      async () => {
        for (const node of this.nodes.filter((each) => each.running)) {
          const info = String(await node.command('CLUSTER', 'INFO'));
          if (!info.includes('cluster_state:ok') || !info.includes('cluster_slots_ok:16384')) return false;
          const replication = String(await node.command('INFO', 'replication'));
          if (replication.includes('role:slave') && !replication.includes('master_link_status:up')) return false;
        }
        const topology = await this.topology();
        const servedSlots = topology.filter((info) => info.role === 'master' && !info.failed).reduce((sum, info) => sum + info.slots, 0);
        const runningPorts = new Set(this.nodes.filter((node) => node.running).map((node) => node.port));
        return servedSlots === 16_384 && topology.every((info) => info.failed === !runningPorts.has(info.port));
      },
      timeoutMs,
    );
  }

  /** Keys each running master holds (DBSIZE), by port. */
  async keysPerMaster(): Promise<Map<number, number>> {
    const counts = new Map<number, number>();
    for (const master of await this.masters()) counts.set(master.port, Number(await master.command('DBSIZE')));
    return counts;
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.kill()));
    rmSync(this.directory, { recursive: true, force: true });
  }
}
