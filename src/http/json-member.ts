/**
 * Takes one top-level member out of a JSON object body without re-encoding the rest: every other
 * member is forwarded byte for byte, so numbers beyond 2^53, key order, escapes and nesting of
 * any depth reach the upstream exactly as the client sent them.
 */

export interface TakenMember {
  /** The values of every top-level member named `name`; undefined for a value that is not a string. */
  readonly values: ReadonlyArray<string | undefined>;
  /** The object without those members. */
  readonly rest: Buffer;
}

/** Null when the body is valid JSON but not an object with a member `name`; 'invalid' when it is not JSON. */
export function takeJsonMember(body: Buffer, name: string): TakenMember | null | 'invalid' {
  let parsed: unknown;
  try {
    // JSON.parse is iterative: a deeply nested body parses without exhausting the stack.
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return 'invalid';
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !Object.hasOwn(parsed, name)) return null;

  // The scan runs over the bytes (as latin1, one character per byte): a UTF-8 sequence never
  // contains an ASCII byte, so JSON's structural characters are found where they are.
  const text = body.toString('latin1');
  const values: Array<string | undefined> = [];
  const kept: string[] = [];
  let index = skipWhitespace(text, 0) + 1; // past the "{" JSON.parse has vouched for
  for (;;) {
    index = skipWhitespace(text, index);
    if (text.charCodeAt(index) === CLOSE_BRACE) break;
    const memberStart = index;
    const keyEnd = skipString(text, index);
    const key = JSON.parse(Buffer.from(text.slice(memberStart, keyEnd), 'latin1').toString('utf8')) as string;
    const valueStart = skipWhitespace(text, skipWhitespace(text, keyEnd) + 1); // past the ":"
    const valueEnd = skipValue(text, valueStart);
    if (key === name) {
      const value: unknown = JSON.parse(Buffer.from(text.slice(valueStart, valueEnd), 'latin1').toString('utf8'));
      values.push(typeof value === 'string' ? value : undefined);
    } else {
      kept.push(text.slice(memberStart, valueEnd));
    }
    index = skipWhitespace(text, valueEnd);
    if (text.charCodeAt(index) !== COMMA) break;
    index += 1;
  }
  return { values, rest: Buffer.from(`{${kept.join(',')}}`, 'latin1') };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

function skipWhitespace(text: string, index: number): number {
  for (;;) {
    const code = text.charCodeAt(index);
    if (code !== 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) return index;
    index += 1;
  }
}

/** From the opening quote of a string to just past its closing quote. */
function skipString(text: string, index: number): number {
  for (index += 1; ; index += 1) {
    const code = text.charCodeAt(index);
    if (code === BACKSLASH) index += 1;
    else if (code === QUOTE) return index + 1;
  }
}

/** From the first character of a value to just past its last; nesting is counted, never recursed into. */
function skipValue(text: string, index: number): number {
  const first = text.charCodeAt(index);
  if (first === QUOTE) return skipString(text, index);
  if (first !== OPEN_BRACE && first !== OPEN_BRACKET) {
    // A number, true, false or null: up to the next separator or whitespace.
    while (index < text.length && !isValueEnd(text.charCodeAt(index))) index += 1;
    return index;
  }
  let depth = 0;
  for (;;) {
    const code = text.charCodeAt(index);
    if (code === QUOTE) {
      index = skipString(text, index);
      continue;
    }
    if (code === OPEN_BRACE || code === OPEN_BRACKET) depth += 1;
    else if ((code === CLOSE_BRACE || code === CLOSE_BRACKET) && --depth === 0) return index + 1;
    index += 1;
  }
}

function isValueEnd(code: number): boolean {
  return code === COMMA || code === CLOSE_BRACE || code === CLOSE_BRACKET || code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0d;
}
