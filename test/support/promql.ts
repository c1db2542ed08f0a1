import { parser } from '@prometheus-io/lezer-promql';

/**
 * What a PromQL expression reads, found by Prometheus's own grammar (the Lezer parser its web UI
 * uses): every series selector with its metric name and label matchers, and every label named in
 * a `by`, `without`, `on` or `ignoring` clause.
 */

export interface LabelMatcher {
  readonly label: string;
  readonly op: '=' | '!=' | '=~' | '!~';
  /** The string as written between its quotes (PromQL escapes are not used by tokengate's queries). */
  readonly value: string;
}

export interface Selector {
  /** The metric name before the braces; empty when the selector names none. */
  readonly metric: string;
  readonly matchers: readonly LabelMatcher[];
}

export interface ExpressionReads {
  readonly selectors: readonly Selector[];
  readonly groupingLabels: readonly string[];
  /** The text around each place the grammar could not read; empty for a valid expression. */
  readonly errors: readonly string[];
}

export function readsOf(expr: string): ExpressionReads {
  const tree = parser.parse(expr);
  const selectors: Selector[] = [];
  const groupingLabels: string[] = [];
  const errors: string[] = [];
  const text = (from: number, to: number) => expr.slice(from, to);
  tree.iterate({
    enter(node) {
      if (node.type.isError) errors.push(`at ${node.from}: ${JSON.stringify(text(Math.max(0, node.from - 20), node.to + 20))}`);
      if (node.name === 'GroupingLabels') {
        for (let child = node.node.firstChild; child !== null; child = child.nextSibling)
          if (child.name === 'LabelName') groupingLabels.push(text(child.from, child.to));
        return;
      }
      if (node.name !== 'VectorSelector') return;
      const metric = node.node.getChild('Identifier');
      const matchers: LabelMatcher[] = [];
      for (const matcher of node.node.getChild('LabelMatchers')?.getChildren('UnquotedLabelMatcher') ?? []) {
        const label = matcher.getChild('LabelName');
        const op = matcher.getChild('MatchOp');
        const value = matcher.getChild('StringLiteral');
        if (label === null || op === null || value === null) {
          errors.push(`an incomplete label matcher: ${JSON.stringify(text(matcher.from, matcher.to))}`);
          continue;
        }
        matchers.push({
          label: text(label.from, label.to),
          op: text(op.from, op.to) as LabelMatcher['op'],
          value: text(value.from + 1, value.to - 1),
        });
      }
      selectors.push({ metric: metric === null ? '' : text(metric.from, metric.to), matchers });
    },
  });
  return { selectors, groupingLabels, errors };
}
