import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';
import { RedisNode, WITHOUT_PERSISTENCE, spawnRedisServer, waitFor } from './redis-cluster.js';

export interface SentinelOptions {
  /** Password of the master and replica (requirepass and masterauth). */
  password?: string;
  /** Password of the sentinels themselves. */
  sentinelPassword?: string;
  /** down-after-milliseconds: how long the master may be silent before the sentinels fail it over. */
  downAfterMs?: number;
}

/**
 * A real Sentinel set-up on free loopback ports: one master, one replica and three sentinels
 * (`redis-server --sentinel`, quorum 2), without persistence, its files in a temporary directory
 * removed by stop().
 */
export class LocalRedisSentinel {
  readonly masterName = 'tokengate-test';

  private constructor(
    readonly servers: RedisNode[],
    readonly sentinels: RedisNode[],
    private readonly directory: string,
    readonly options: SentinelOptions,
  ) {}

  static async start(options: SentinelOptions = {}): Promise<LocalRedisSentinel> {
    const directory = mkdtempSync(join(tmpdir(), 'tokengate-sentinel-'));
    const auth = options.password === undefined ? [] : ['--requirepass', options.password, '--masterauth', options.password];
    const [masterPort, replicaPort] = [await freePort(), await freePort()];
    const data = [...WITHOUT_PERSISTENCE, '--dir', directory, ...auth];
    const spawner = (_name: string, args: string[]) => spawnRedisServer(args);
    const master = new RedisNode(`master-${masterPort}`, masterPort, data, spawner, options.password);
    const replica = new RedisNode(`replica-${replicaPort}`, replicaPort, [...data, '--replicaof', '127.0.0.1', String(masterPort)], spawner, options.password);
    const sentinels: RedisNode[] = [];
    for (let index = 0; index < 3; index++) {
      const port = await freePort();
      const file = join(directory, `sentinel-${port}.conf`);
      const lines = [
        `sentinel monitor tokengate-test 127.0.0.1 ${masterPort} 2`,
        `sentinel down-after-milliseconds tokengate-test ${options.downAfterMs ?? 1_000}`,
        'sentinel failover-timeout tokengate-test 5000',
        'sentinel parallel-syncs tokengate-test 1',
        ...(options.password === undefined ? [] : [`sentinel auth-pass tokengate-test ${options.password}`]),
        ...(options.sentinelPassword === undefined ? [] : [`requirepass ${options.sentinelPassword}`]),
      ];
      writeFileSync(file, `${lines.join('\n')}\n`);
      sentinels.push(new RedisNode(`sentinel-${port}`, port, [], (_name, args) => spawnRedisServer(args, [file, '--sentinel']), options.sentinelPassword));
    }
    const setup = new LocalRedisSentinel([master, replica], sentinels, directory, options);
    try {
      await master.start();
      await replica.start();
      await Promise.all(sentinels.map((sentinel) => sentinel.start()));
      await setup.waitUntilHealthy(master);
    } catch (error) {
      await setup.stop();
      throw error;
    }
    return setup;
  }

  /** `host:port` of each sentinel (`store.sentinel.sentinels`). */
  get sentinelAddresses(): string[] {
    return this.sentinels.map((sentinel) => sentinel.address);
  }

  /** The server the sentinels name as master now. */
  async currentMaster(): Promise<RedisNode> {
    const sentinel = this.sentinels.find((each) => each.running)!;
    const [, port] = (await sentinel.command('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.masterName)) as [string, string];
    const master = this.servers.find((server) => server.port === Number(port));
    if (master === undefined) throw new Error(`the sentinels name an unknown master on port ${port}`);
    return master;
  }

  /** Every running sentinel names `master`, and `master` says it is one. */
  async waitForMaster(master: RedisNode, timeoutMs = 30_000): Promise<void> {
    await waitFor(
      `the sentinels to name the server on port ${master.port} master`,
      async () => {
        for (const sentinel of this.sentinels.filter((each) => each.running)) {
          const [, port] = (await sentinel.command('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.masterName)) as [string, string];
          if (Number(port) !== master.port) return false;
        }
        return String(await master.command('INFO', 'replication')).includes('role:master');
      },
      timeoutMs,
    );
  }

  /**
   * Every sentinel names `master`, knows the other sentinels and the running replicas, and each
   * running replica is linked to the master: a set-up a test may start from, or fail over again.
   */
  async waitUntilHealthy(master?: RedisNode, timeoutMs = 30_000): Promise<void> {
    await waitFor(
      'the local Sentinel set-up to become healthy',
      async () => {
        const expected = master ?? (await this.currentMaster());
        const replicas = this.servers.filter((server) => server !== expected && server.running);
        for (const sentinel of this.sentinels.filter((each) => each.running)) {
          const [, port] = (await sentinel.command('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.masterName)) as [string, string];
          if (Number(port) !== expected.port) return false;
          const info = (await sentinel.command('SENTINEL', 'MASTER', this.masterName)) as string[];
          const field = (name: string) => info[info.indexOf(name) + 1];
          if (Number(field('num-other-sentinels')) !== this.sentinels.filter((each) => each.running).length - 1) return false;
          if (Number(field('num-slaves')) < replicas.length) return false;
          if (field('flags') !== 'master') return false;
        }
        for (const replica of replicas) {
          const replication = String(await replica.command('INFO', 'replication'));
          if (!replication.includes(`master_port:${expected.port}`) || !replication.includes('master_link_status:up')) return false;
        }
        return true;
      },
      timeoutMs,
    );
  }

  /**
   * Asks the sentinels for a failover (SENTINEL FAILOVER: the replica promoted, the master turned
   * into its replica), again while they answer -INPROG (the last one still finishing) or
   * -NOGOODSLAVE (the replica not yet seen in sync since).
   */
  async failOver(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        await this.sentinels.find((each) => each.running)!.command('SENTINEL', 'FAILOVER', this.masterName);
        return;
      } catch (error) {
        if (Date.now() > deadline || !/INPROG|NOGOODSLAVE/.test(String(error))) throw error;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  }

  async stop(): Promise<void> {
    await Promise.all([...this.sentinels, ...this.servers].map((node) => node.kill()));
    rmSync(this.directory, { recursive: true, force: true });
  }
}
