/**
 * Connection-specific header fields (RFC 9110 section 7.6.1): they describe one hop, so a proxy
 * removes them both ways, together with every field the `Connection` header names.
 * `proxy-connection` and `http2-settings` are the same kind of field in practice.
 */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'transfer-encoding',
  'trailer',
  'upgrade',
  'http2-settings',
]);

/** What nearly every Connection header says, and names no field. */
const KEEP_ALIVE_OR_CLOSE = /^(?:keep-alive|close)$/i;

/** Field names a `Connection` header lists besides `close` and `keep-alive`, lower-cased; null when none. */
export function namedByConnection(connection: string | undefined): ReadonlySet<string> | null {
  if (connection === undefined || KEEP_ALIVE_OR_CLOSE.test(connection)) return null;
  let named: Set<string> | null = null;
  for (const option of connection.split(',')) {
    const name = option.trim().toLowerCase();
    if (name === '' || name === 'close' || name === 'keep-alive') continue;
    (named ??= new Set()).add(name);
  }
  return named;
}
