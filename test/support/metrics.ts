interface MetricLike {
  get(): Promise<{ values: Array<{ value: number; labels: Partial<Record<string, string | number>>; metricName?: string }> }>;
}

/** The value of a counter or gauge (with these labels) as a scrape would show it. */
export async function valueOf(metric: MetricLike, labels: Record<string, string> = {}): Promise<number> {
  const { values } = await metric.get();
  const sample = values.find((each) => Object.entries(labels).every(([name, value]) => each.labels[name] === value));
  return sample?.value ?? 0;
}

/** How many observations a histogram holds. */
export async function observationsOf(histogram: MetricLike): Promise<number> {
  const { values } = await histogram.get();
  return values.find((each) => each.metricName?.endsWith('_count'))?.value ?? 0;
}

/** One sample of a Prometheus text exposition. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Every sample of an exposition, with its labels unescaped. */
export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const label of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[label[1]!] = label[2]!.replace(/\\(.)/g, (_all, escaped: string) => (escaped === 'n' ? '\n' : escaped));
    }
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}
