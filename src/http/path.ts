/**
 * Path safety. Routes match on the canonical form of the request path and the upstream receives
 * exactly that form, so the path a token was checked for is the path the upstream serves.
 *
 * The canonical form is RFC 3986 section 6.2.2 normalization, made strict where servers disagree:
 * - origin-form only (`/...`): absolute-form (`http://host/...`) and `*` are refused;
 * - raw characters are RFC 3986 path characters only (unreserved, sub-delims, `:`, `@`, `/`);
 *   anything else (backslash, quotes, braces, `|`, `^`...) must be percent-encoded;
 * - percent-escapes must be valid UTF-8 (overlong forms such as `%C0%AE` are not); escapes of
 *   unreserved characters are decoded (`%7E` -> `~`, `%2e` -> `.`), the rest are upper-cased;
 * - refused as ambiguous, because some servers decode or collapse them and others do not:
 *   encoded `/` and `\` (`%2F`, `%5C`), encoded control characters (`%00`-`%1F`, `%7F`), dot
 *   segments in any spelling (`.`, `..`, `%2e`, `.%2E`, and `..;param` which servlet containers
 *   read as `..`) and segments that start or end with `..` (Windows servers drop trailing
 *   dots), empty segments (`//`), and double-encoded dots, slashes and backslashes
 *   (`%252e`, `%252f`, `%255c`).
 * Matching on the result is case-sensitive and a trailing slash is kept as sent.
 */
export class PathRefusal {
  constructor(readonly description: string) {}
}

export const PATH_REFUSALS = {
  notOriginForm: new PathRefusal('The request target must be an absolute path starting with "/".'),
  disallowedCharacter: new PathRefusal('The path contains a character that must be percent-encoded.'),
  backslash: new PathRefusal('The path contains a backslash.'),
  invalidEscape: new PathRefusal('The path contains a percent-escape that is not valid UTF-8.'),
  encodedSeparator: new PathRefusal('The path contains an encoded slash or backslash.'),
  encodedControl: new PathRefusal('The path contains an encoded control character.'),
  dotSegment: new PathRefusal('The path contains a "." or ".." segment, or a segment that starts or ends with "..".'),
  emptySegment: new PathRefusal('The path contains an empty segment ("//").'),
  doubleEncoded: new PathRefusal('The path contains a double-encoded dot, slash or backslash.'),
  // Given by the route table, not by normalizePath: see lookalikeOfNestedRoute in route-table.ts.
  lookalike: new PathRefusal('The path differs from a more specific route only by letter case, a ";" parameter or a "." suffix.'),
} as const;

const SLASH = 0x2f;
const PERCENT = 0x25;
const BACKSLASH = 0x5c;

const UNRESERVED = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~';
const PATH_CHARACTERS = `${UNRESERVED}!$&'()*+,;=:@/`;

/** ASCII lookup tables, built once: a per-character check on the hot path. */
const isPathCharacter = asciiSet(PATH_CHARACTERS);
const isUnreserved = asciiSet(UNRESERVED);

function asciiSet(characters: string): Uint8Array {
  const table = new Uint8Array(128);
  for (const character of characters) table[character.charCodeAt(0)] = 1;
  return table;
}

const DOUBLE_ENCODED = /%25(?:2e|2f|5c)/i;

/** The canonical form of `raw` (a request path without its query), or why it is refused. */
export function normalizePath(raw: string): string | PathRefusal {
  if (raw.charCodeAt(0) !== SLASH) return PATH_REFUSALS.notOriginForm;
  let escaped = false;
  for (let index = 0; index < raw.length; index += 1) {
    const code = raw.charCodeAt(index);
    if (code < 128 && isPathCharacter[code] === 1) continue;
    if (code === PERCENT) escaped = true;
    else return code === BACKSLASH ? PATH_REFUSALS.backslash : PATH_REFUSALS.disallowedCharacter;
  }
  // Most paths have no escapes, no "//" and no "/.": they are already canonical and returned as is.
  const path = escaped ? decodeEscapes(raw) : raw;
  if (typeof path !== 'string') return path;
  if (path.includes('//')) return PATH_REFUSALS.emptySegment;
  if ((path.includes('/.') || path.includes('..')) && hasDotSegment(path)) return PATH_REFUSALS.dotSegment;
  if (escaped && DOUBLE_ENCODED.test(path)) return PATH_REFUSALS.doubleEncoded;
  return path;
}

function decodeEscapes(raw: string): string | PathRefusal {
  try {
    // Refuses malformed escapes ("%zz", a lone "%") and invalid or overlong UTF-8 in one check.
    decodeURIComponent(raw);
  } catch {
    return PATH_REFUSALS.invalidEscape;
  }
  let path = '';
  let copied = 0;
  for (let index = raw.indexOf('%'); index !== -1; index = raw.indexOf('%', copied)) {
    const hex = raw.slice(index + 1, index + 3);
    const value = Number.parseInt(hex, 16);
    if (value === SLASH || value === BACKSLASH) return PATH_REFUSALS.encodedSeparator;
    if (value < 0x20 || value === 0x7f) return PATH_REFUSALS.encodedControl;
    path += raw.slice(copied, index) + (value < 128 && isUnreserved[value] === 1 ? String.fromCharCode(value) : `%${hex.toUpperCase()}`);
    copied = index + 3;
  }
  return path + raw.slice(copied);
}

/** A "." or ".." segment, also when followed by `;params` (raw or as `%3B`), or one that starts or ends with "..". */
function hasDotSegment(path: string): boolean {
  for (const segment of path.split('/')) {
    const semicolon = segment.search(/;|%3B/);
    const name = semicolon === -1 ? segment : segment.slice(0, semicolon);
    // `x..` and `..x` are names, not dot segments, but Windows servers drop trailing dots and
    // naive traversal checks trip over both: refused as ambiguous too.
    if (name === '.' || name.startsWith('..') || name.endsWith('..')) return true;
  }
  return false;
}
