import type { DriftProbe, RowResult, RoundFigures } from './measure.js';

/**
 * How a target is judged on a run that drifts. The rows a target compares are measured in turns
 * (one window each, round after round: `rowsInTurns`), so round k of one row and round k of the
 * other saw the same minute of the machine. A comparison is taken per round, and the target is
 * judged on the middle of those per-round figures: met when all of it is on the right side of the
 * target, NOT MET when all of it is on the wrong side, unsure when it straddles the target.
 */

/** A figure of the run: its per-round values; or why two rows cannot be compared. */
export interface Figure {
  rounds: readonly number[];
  refused?: string;
  /** The machine's drift over the run, as a share (`machineDrift`), where it bears on this figure. */
  drift?: number;
}

export type Verdict = 'met' | 'NOT MET' | 'unsure' | '-';

export interface Judged {
  measured: string;
  verdict: Verdict;
}

export const NOT_MEASURED: Judged = { measured: 'not measured', verdict: '-' };

/** Value of ascending `sorted` at quantile `q` (0..1), interpolated between neighbours. */
function quantile(sorted: readonly number[], q: number): number {
  const position = (sorted.length - 1) * q;
  const below = Math.floor(position);
  const above = Math.ceil(position);
  return sorted[below]! + (sorted[above]! - sorted[below]!) * (position - below);
}

/**
 * The median and the interquartile range of the per-round values: with 5 rounds, the 2nd to the
 * 4th of them (the best and the worst round left out); with one round, that round.
 */
export function spread(figure: Figure): { median: number; low: number; high: number; min: number; max: number } {
  const sorted = [...figure.rounds].sort((a, b) => a - b);
  return { median: quantile(sorted, 0.5), low: quantile(sorted, 0.25), high: quantile(sorted, 0.75), min: sorted[0]!, max: sorted.at(-1)! };
}

function describe(figure: Figure, digits: number, unit: string): string {
  const { median, low, high, min, max } = spread(figure);
  const show = (value: number) => value.toFixed(digits);
  if (figure.rounds.length === 1) return `${show(median)}${unit} (1 round)`;
  return `${show(median)}${unit} (IQR ${show(low)}-${show(high)}, range ${show(min)}-${show(max)}, ${figure.rounds.length} rounds)`;
}

/**
 * How far the machine itself moved over the run, as a share of its reference row's median (the
 * floor, measured again before every scenario: `probeDrift`): half the range of the probes' CPU
 * per request, or of their req/s. Null with fewer than two probes.
 */
export function machineDrift(probes: readonly DriftProbe[], pick: (probe: DriftProbe) => number): number | null {
  if (probes.length < 2) return null;
  const values = probes.map(pick);
  const { median, min, max } = spread({ rounds: values });
  return median === 0 ? null : (max - min) / median / 2;
}

/**
 * The verdict of a figure against its target, on its interquartile range widened by the
 * machine's drift: met when all of it is on the right side of the target by more than the drift,
 * NOT MET when all of it is on the wrong side by more, unsure otherwise (a quieter machine could
 * read either way).
 */
function judge(figure: Figure | null, target: number, below: boolean, digits: number, unit: string): Judged {
  if (figure?.refused !== undefined) return { measured: figure.refused, verdict: '-' };
  if (figure === null || figure.rounds.length === 0) return NOT_MEASURED;
  const { low, high } = spread(figure);
  const margin = Math.abs(target) * (figure.drift ?? 0);
  // The band's edge farthest on the wrong side, and the one nearest the right side.
  const [wrongEdge, rightEdge] = below ? [high + margin, low - margin] : [low - margin, high + margin];
  const good = (value: number) => (below ? value <= target : value >= target);
  const verdict: Verdict = good(wrongEdge) ? 'met' : !good(rightEdge) ? 'NOT MET' : 'unsure';
  return { measured: describe(figure, digits, unit), verdict };
}

export const atMost = (figure: Figure | null, maximum: number, unit = 'x', digits = 2): Judged => judge(figure, maximum, true, digits, unit);
export const atLeast = (figure: Figure | null, minimum: number, unit = 'x', digits = 2): Judged => judge(figure, minimum, false, digits, unit);

/** `figure` judged with the machine's drift as its margin (none added to a refusal or a missing figure). */
export function withDrift(figure: Figure | null, drift: number | null): Figure | null {
  return figure === null || figure.refused !== undefined || drift === null ? figure : { ...figure, drift };
}

/** A single measurement (a memory reading, a count): met or NOT MET, no rounds to spread over. */
export const single = (measured: string, met: boolean | null): Judged => ({ measured, verdict: met === null ? '-' : met ? 'met' : 'NOT MET' });

/**
 * `pick(a) / pick(b)` per round, or `combine` of the two: rows measured in turns in one scenario,
 * paired by round; null when either did not run. Rows of different scenarios never ran side by
 * side, and comparing them would judge drift: that is refused, and the report says why.
 */
export function perRound(
  a: RowResult | undefined,
  b: RowResult | undefined,
  pick: (round: RoundFigures) => number,
  combine = (x: number, y: number) => x / y,
): Figure | null {
  if (a === undefined || b === undefined) return null;
  if (a.scenario !== b.scenario)
    return { rounds: [], refused: `not judged: ${a.id} and ${b.id} were not measured in turns (scenarios ${a.scenario} and ${b.scenario})` };
  const rounds = Math.min(a.rounds.length, b.rounds.length);
  return { rounds: Array.from({ length: rounds }, (_, index) => combine(pick(a.rounds[index]!), pick(b.rounds[index]!))) };
}

/** One row's own figure per round (issuance's tokens/s). */
export const ofRow = (row: RowResult | undefined, pick: (round: RoundFigures) => number): Figure | null =>
  row === undefined ? null : { rounds: row.rounds.map(pick) };
