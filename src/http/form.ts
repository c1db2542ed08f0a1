/**
 * `application/x-www-form-urlencoded`, the encoding of query strings and form bodies (WHATWG
 * URL standard): `name=value` pairs joined by `&`, `+` for a space, percent-escapes of UTF-8.
 */

/** One decoded name or value; undefined when an escape is malformed or not UTF-8. */
export function decodeFormComponent(value: string): string | undefined {
  if (!value.includes('%') && !value.includes('+')) return value;
  try {
    return decodeURIComponent(value.replace(/\+/g, ' '));
  } catch {
    return undefined;
  }
}

export interface TakenParameter {
  /** Decoded values of every pair named exactly `name`; undefined for a value that does not decode. */
  readonly values: ReadonlyArray<string | undefined>;
  /** The other pairs, joined as they were: their bytes are untouched. */
  readonly rest: string;
  /**
   * A pair some server framework reads as `name` although it is spelled otherwise: another
   * letter case (`ACCESS_TOKEN`), a bracket suffix (`access_token[]`, `access_token[x]`: PHP and
   * qs make those `name`), `.` or a space where `name` has `_` (PHP's renaming), or `name` after
   * a `;` (`a=1;access_token=x`: Rack 2, Python before 3.9.2 and Go before 1.17 split pairs at
   * `;` too, where the WHATWG rules read one pair `a` with the value `1;access_token=x`).
   */
  readonly lookalike: boolean;
}

/**
 * Takes parameter `name` out of an encoded string. Names are compared after decoding, so
 * `access%5Ftoken` is `access_token` too. Null when neither `name` nor a lookalike occurs.
 */
export type ParameterTaker = (encoded: string) => TakenParameter | null;

export function parameterTaker(name: string): ParameterTaker {
  // Without the name in some letter case, or an escape that could spell it, there is nothing to
  // take: the common case costs two scans and no allocation.
  const mentioned = new RegExp(name.replace(/[^A-Za-z0-9]/g, '.'), 'i');
  return function takeParameter(encoded) {
    if (!mentioned.test(encoded) && !encoded.includes('%')) return null;
    const values: Array<string | undefined> = [];
    const kept: string[] = [];
    let lookalike = false;
    for (const pair of encoded.split('&')) {
      if (pair.includes(';') && hidesParameter(pair, name)) lookalike = true;
      const equals = pair.indexOf('=');
      const pairName = decodeFormComponent(equals === -1 ? pair : pair.slice(0, equals));
      if (pairName === name) {
        values.push(equals === -1 ? '' : decodeFormComponent(pair.slice(equals + 1)));
        continue;
      }
      if (pairName !== undefined && readsAs(pairName, name)) lookalike = true;
      kept.push(pair);
    }
    return values.length === 0 && !lookalike ? null : { values, rest: kept.join('&'), lookalike };
  };
}

/**
 * Whether a `&`-pair holds `name` (or a lookalike) as one of its `;`-separated pairs, as servers
 * that split at `;` read it. The first of them is the pair's own name when `=` comes before the
 * first `;`: that one is the WHATWG reading, judged by the caller.
 */
function hidesParameter(pair: string, name: string): boolean {
  const segments = pair.split(';');
  const equals = pair.indexOf('=');
  const first = equals !== -1 && equals < pair.indexOf(';') ? 1 : 0;
  for (let index = first; index < segments.length; index += 1) {
    const segment = segments[index]!;
    const segmentEquals = segment.indexOf('=');
    const segmentName = decodeFormComponent(segmentEquals === -1 ? segment : segment.slice(0, segmentEquals));
    if (segmentName !== undefined && (segmentName.trimStart() === name || readsAs(segmentName, name))) return true;
  }
  return false;
}

/** How lenient frameworks read a parameter name: case folded, leading spaces dropped, `.` and space as `_`, up to a `[`. */
function readsAs(pairName: string, name: string): boolean {
  const bracket = pairName.indexOf('[');
  const base = (bracket === -1 ? pairName : pairName.slice(0, bracket)).trimStart().toLowerCase().replace(/[ .]/g, '_');
  return base === name;
}
