import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { WorkerReadiness, WorkerReports } from '../observability/health.js';
import { latestExemplars, openMetricsOf } from '../observability/openmetrics.js';
import { isWorkerMessage, type PrimaryMessage, type WorkerMessage } from './messages.js';
import { reloadOnChange } from './reload.js';
import { runInstance } from './instance.js';

/** A worker that lived this long before it died was not crashing in a loop: its backoff starts over. */
const STABLE_AFTER_MS = 60_000;
const FIRST_RESTART_DELAY_MS = 100;
const LONGEST_RESTART_DELAY_MS = 30_000;
/** How long a worker has to answer a question (readiness, metrics) before it counts as not ready, or is left out. */
const QUESTION_TIMEOUT_MS = 1_000;

/**
 * The primary of `server.workers` processes. It forks the workers (they share the public
 * listener's port through node:cluster), restarts one that dies, with a backoff that doubles
 * while it keeps dying (100 ms up to 30 s), and serves the ops listener for the whole group:
 * /readyz is ready when every worker is and /metrics sums the metrics of the workers that serve; the admin API
 * works on the shared store like any sidecar's. A config change (SIGHUP, or the file) is passed
 * on: every worker reloads it. SIGTERM and SIGINT are passed on: every worker
 * drains, then the primary stops. A worker that fails before the group was first ready stops
 * the start: the same error would only repeat.
 */
export async function superviseWorkers(config: Readonly<Config>, log: Logger, count: number, file: string, adminToken?: string): Promise<number> {
  // The workers accept from the shared socket themselves. With node's default on Linux
  // (round-robin), the primary accepts each connection and hands it to a worker, keeping its
  // own copy until the worker says it took it: a worker killed in between never says so, and
  // the client waits on a connection nobody serves until its own timeout. Accepting in the
  // workers, a connection is a dead worker's only once accepted, and the kernel closes it with
  // the worker, at once; those still in the listen queue go to the others.
  cluster.schedulingPolicy = cluster.SCHED_NONE;
  const fleet = new WorkerFleet(log, count);
  const started = await fleet.start();
  if (!started) {
    log.error('a worker failed while starting (its own log line above says why); stopping');
    await fleet.stop(config.server.shutdownGraceMs);
    return 1;
  }
  log.info({ workers: count }, 'every worker is listening');
  return runInstance(
    config,
    log,
    { serves: 'ops', workers: fleet, adminToken },
    {
      // A change of the config reloads the primary's own instance (the ops listener, logging) and every worker's.
      attach: (tokengate) => reloadOnChange(file, log, tokengate, () => fleet.tell({ tokengate: 'reload' })),
      // The workers drain first (each within server.shutdownGraceMs), then the ops listener closes.
      beforeClose: () => fleet.stop(config.server.shutdownGraceMs),
      graceMs: config.server.shutdownGraceMs * 2,
    },
  );
}

interface Slot {
  worker: Worker | null;
  listening: boolean;
  startedAt: number;
  /** Deaths in a row that came before STABLE_AFTER_MS of life. */
  quickDeaths: number;
  restartTimer: NodeJS.Timeout | null;
}

class WorkerFleet implements WorkerReports {
  private readonly slots: Slot[];
  /** Questions asked of workers and not answered yet, by id. */
  private readonly answers = new Map<number, (message: WorkerMessage) => void>();
  private nextQuestion = 0;
  private stopping = false;
  private firstReady = false;
  private failedToStart: (() => void) | null = null;

  constructor(
    private readonly log: Logger,
    count: number,
  ) {
    this.slots = Array.from({ length: count }, () => ({ worker: null, listening: false, startedAt: 0, quickDeaths: 0, restartTimer: null }));
  }

  /** Forks every worker; resolves true once all listen, false as soon as one dies first. */
  start(): Promise<boolean> {
    return new Promise((resolve) => {
      this.failedToStart = () => resolve(false);
      const listening = () => {
        if (this.firstReady || !this.slots.every((slot) => slot.listening)) return;
        this.firstReady = true;
        resolve(true);
      };
      for (const slot of this.slots) this.fork(slot, listening);
    });
  }

  private fork(slot: Slot, onListening: () => void = () => {}): void {
    const worker = cluster.fork();
    slot.worker = worker;
    slot.listening = false;
    slot.startedAt = Date.now();
    worker.on('listening', () => {
      slot.listening = true;
      onListening();
    });
    worker.on('message', (message: unknown) => {
      if (isWorkerMessage(message)) this.answers.get(message.id)?.(message);
    });
    worker.on('exit', (code, signal) => this.onExit(slot, worker, code, signal));
    // A message sent as the worker dies fails on its closed channel; its exit is handled above.
    worker.on('error', (error) => this.log.warn({ workerPid: worker.process.pid, err: error.message }, 'a message to a worker failed'));
  }

  private onExit(slot: Slot, worker: Worker, code: number | null, signal: string | null): void {
    if (slot.worker !== worker) return;
    slot.worker = null;
    slot.listening = false;
    if (this.stopping) return;
    if (!this.firstReady) {
      this.failedToStart?.();
      return;
    }
    slot.quickDeaths = Date.now() - slot.startedAt < STABLE_AFTER_MS ? slot.quickDeaths + 1 : 1;
    const delayMs = Math.min(FIRST_RESTART_DELAY_MS * 2 ** (slot.quickDeaths - 1), LONGEST_RESTART_DELAY_MS);
    this.log.warn({ workerPid: worker.process.pid, code, signal, restartInMs: delayMs }, 'a worker exited; starting another');
    slot.restartTimer = setTimeout(() => {
      slot.restartTimer = null;
      if (!this.stopping) this.fork(slot);
    }, delayMs);
  }

  /** Asks every worker to drain (SIGTERM) and resolves once all have exited, or after `graceMs` by killing the rest. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    const running: Worker[] = [];
    for (const slot of this.slots) {
      if (slot.restartTimer !== null) clearTimeout(slot.restartTimer);
      if (slot.worker !== null && !slot.worker.isDead()) running.push(slot.worker);
    }
    const exited = running.map((worker) => new Promise<void>((resolve) => (worker.isDead() ? resolve() : worker.once('exit', () => resolve()))));
    for (const worker of running) worker.process.kill('SIGTERM');
    const deadline = setTimeout(() => {
      for (const worker of running) if (!worker.isDead()) worker.process.kill('SIGKILL');
    }, graceMs);
    await Promise.all(exited);
    clearTimeout(deadline);
  }

  async readiness(): Promise<WorkerReadiness[]> {
    return Promise.all(
      this.slots.map((slot, index) =>
        this.ask(slot, 'readiness?').then((answer) => ({ worker: index + 1, ready: answer?.tokengate === 'readiness' && answer.ready })),
      ),
    );
  }

  /** Asks a listening worker; null when it is not listening, dies meanwhile or does not answer in time. */
  private ask(slot: Slot, question: 'readiness?' | 'metrics?'): Promise<WorkerMessage | null> {
    const worker = slot.worker;
    if (worker === null || !slot.listening || !worker.isConnected()) return Promise.resolve(null);
    const id = (this.nextQuestion += 1);
    return new Promise((resolve) => {
      const timer = setTimeout(() => answer(null), QUESTION_TIMEOUT_MS);
      const answer = (message: WorkerMessage | null) => {
        clearTimeout(timer);
        this.answers.delete(id);
        resolve(message);
      };
      this.answers.set(id, answer);
      worker.send({ tokengate: question, id } satisfies PrimaryMessage, (error) => {
        if (error !== null) answer(null);
      });
    });
  }

  /**
   * The metrics of every worker that serves (listening), summed. A worker starting or dying is
   * left out rather than waited for: prom-client's own cluster aggregation asks every forked
   * worker and, when one cannot answer (a replacement still loading), fails the whole scrape
   * after 5 s. In OpenMetrics, a bucket's exemplar is the latest any worker has for it.
   */
  async metrics(openMetrics: boolean): Promise<string> {
    const answers = await Promise.all(this.slots.map((slot) => this.ask(slot, 'metrics?')));
    const registries = answers.flatMap((answer) => (answer?.tokengate === 'metrics' ? [answer.metrics as MetricObjectWithValues<MetricValue<string>>[]] : []));
    const summed = AggregatorRegistry.aggregate(registries);
    return openMetrics ? openMetricsOf(summed, latestExemplars(registries)) : summed.metrics();
  }

  /** Sends `message` to every running worker. */
  tell(message: PrimaryMessage): void {
    for (const slot of this.slots) if (slot.worker !== null && slot.worker.isConnected()) slot.worker.send(message, ignoreClosedChannel);
  }
}

/** A worker that died after isConnected() said otherwise: its exit restarts it, nothing to tell. */
function ignoreClosedChannel(): void {}
