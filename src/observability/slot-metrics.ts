import type { Registry } from 'prom-client';

/**
 * Counters and histograms for the request path. A prom-client child bound with `.labels()`
 * still builds its label key on every increment; the children here are plain slots, created
 * once (at start, for every label combination the config allows) and bumped with one addition.
 * The registry reads them when it is scraped: same exposition, same names and types, summed
 * across workers like any prom-client metric.
 */

/** A metric as prom-client's registry reads it when it is scraped (what its own metrics' get() returns). */
interface Exposition {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'histogram';
  readonly aggregator: 'sum';
  readonly values: Array<{ labels: Record<string, string | number>; value: number; metricName?: string; exemplar?: ExpositionExemplar }>;
}

/** A bucket's exemplar as prom-client writes it after the bucket line (OpenMetrics only): timestamp in seconds. */
interface ExpositionExemplar {
  readonly labelSet: { trace_id: string; span_id: string };
  readonly value: number;
  readonly timestamp: number;
}

/** What an observation's exemplar is taken from: a request's trace (src/tracing/), taken only when it is recorded. */
export interface ExemplarTrace {
  readonly recording: boolean;
  readonly traceId: string;
  readonly spanId: string;
}

export class CounterSlot {
  value = 0;

  inc(amount = 1): void {
    this.value += amount;
  }
}

export class HistogramSlot {
  /** Observations per bucket, the last one for values above every bound (+Inf only). */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  /** Per bucket, the latest recorded request that fell in it (made on the first one: none without tracing). */
  exemplars: Array<ExpositionExemplar | undefined> | null = null;

  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  /** `trace`: the request's, when it has one; a recorded one becomes the bucket's exemplar. */
  observe(value: number, trace?: ExemplarTrace | null): void {
    let index = 0;
    while (index < this.bounds.length && value > this.bounds[index]!) index += 1;
    this.counts[index]! += 1;
    this.sum += value;
    this.count += 1;
    if (trace?.recording === true) this.keepExemplar(index, value, trace);
  }

  private keepExemplar(index: number, value: number, trace: ExemplarTrace): void {
    const exemplars = (this.exemplars ??= new Array<ExpositionExemplar | undefined>(this.counts.length).fill(undefined));
    exemplars[index] = { labelSet: { trace_id: trace.traceId, span_id: trace.spanId }, value, timestamp: Date.now() / 1000 };
  }
}

interface Labelled<Slot> {
  readonly labels: Record<string, string>;
  readonly slot: Slot;
}

abstract class SlotMetric<Slot> {
  readonly aggregator = 'sum' as const;
  private readonly slots = new Map<string, Labelled<Slot>>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  /** The slot of one label combination (made on first use: call this at start, not per request). */
  labels(...values: string[]): Slot {
    const key = values.join('\u0000');
    let labelled = this.slots.get(key);
    if (labelled === undefined) {
      if (values.length !== this.labelNames.length) throw new Error(`${this.name} takes the labels ${this.labelNames.join(', ')}`);
      const labels = Object.fromEntries(this.labelNames.map((name, index) => [name, values[index]!]));
      labelled = { labels, slot: this.createSlot() };
      this.slots.set(key, labelled);
    }
    return labelled.slot;
  }

  protected abstract createSlot(): Slot;

  protected entries(): Iterable<Labelled<Slot>> {
    return this.slots.values();
  }
}

export class SlotCounter extends SlotMetric<CounterSlot> {
  readonly type = 'counter' as const;

  protected createSlot(): CounterSlot {
    return new CounterSlot();
  }

  async get(): Promise<Exposition> {
    const values = [...this.entries()].map(({ labels, slot }) => ({ labels, value: slot.value }));
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    for (const { slot } of this.entries()) slot.value = 0;
  }
}

export class SlotHistogram extends SlotMetric<HistogramSlot> {
  readonly type = 'histogram' as const;

  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly buckets: readonly number[],
    registry: Registry,
  ) {
    super(name, help, labelNames, registry);
  }

  protected createSlot(): HistogramSlot {
    return new HistogramSlot(this.buckets);
  }

  async get(): Promise<Exposition> {
    const values: Exposition['values'] = [];
    for (const { labels, slot } of this.entries()) {
      let cumulative = 0;
      const exemplars = slot.exemplars;
      this.buckets.forEach((bound, index) => {
        cumulative += slot.counts[index]!;
        const bucket: Exposition['values'][number] = { labels: { ...labels, le: bound }, value: cumulative, metricName: `${this.name}_bucket` };
        if (exemplars?.[index] !== undefined) bucket.exemplar = exemplars[index];
        values.push(bucket);
      });
      const overflow: Exposition['values'][number] = { labels: { ...labels, le: '+Inf' }, value: slot.count, metricName: `${this.name}_bucket` };
      if (exemplars?.[this.buckets.length] !== undefined) overflow.exemplar = exemplars[this.buckets.length];
      values.push(overflow);
      values.push({ labels, value: slot.sum, metricName: `${this.name}_sum` });
      values.push({ labels, value: slot.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    for (const { slot } of this.entries()) {
      slot.counts.fill(0);
      slot.exemplars = null;
      slot.sum = 0;
      slot.count = 0;
    }
  }
}
