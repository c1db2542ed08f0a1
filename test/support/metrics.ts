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
