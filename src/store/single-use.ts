/**
 * Single use, shared by authorization codes and refresh tokens: the read that consumes a record
 * also says whether this was its first use, atomically, so a replay is seen even when two
 * requests race.
 */

/** Result of a single-use read. */
export interface Consumed<T> {
  record: T;
  /** False when the value was consumed before: a replay. */
  firstUse: boolean;
}

/** The Redis side: a HASH with the record in `r` and `used=1` once consumed. */
export const CONSUME_SCRIPT = {
  numberOfKeys: 1,
  lua: `
-- KEYS[1] single-use hash; returns {record, 1 if this call is the first use}
local record = redis.call('HGET', KEYS[1], 'r')
if not record then return nil end
return {record, redis.call('HSETNX', KEYS[1], 'used', '1')}
`,
} as const;

/** The memory side. */
export function consume<T>(entry: { record: T; used: boolean } | undefined): Consumed<T> | null {
  if (entry === undefined) return null;
  const firstUse = !entry.used;
  entry.used = true;
  return { record: structuredClone(entry.record), firstUse };
}
