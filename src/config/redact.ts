/** A Redis URL without its password, for messages. */
export function withoutPassword(value: string): string {
  try {
    const url = new URL(value);
    if (url.password !== '') url.password = '***';
    return url.toString();
  } catch {
    return '(unparseable URL)';
  }
}
