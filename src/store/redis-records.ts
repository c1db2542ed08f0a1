import type { RedisDoor } from './backend.js';
import type { Consumed } from './single-use.js';

/** A record as JSON in Redis; a value that is not JSON (written by something else) reads as absent. */
export function parse<T>(value: string | null): T | null {
  if (value === null) return null;
  try {
    return JSON.parse(value) as T;
  } catch {
    return null;
  }
}

/** The reply of the `consume` script (./single-use.ts). */
export function consumed<T>(reply: unknown): Consumed<T> | null {
  if (reply === null || !Array.isArray(reply)) return null;
  const [text, firstUse] = reply as [string, number];
  const record = parse<T>(text);
  return record === null ? null : { record, firstUse: firstUse === 1 };
}

/** Every id of a set and the record each names; an id whose record is gone is skipped. */
export async function listRecords<T>(door: RedisDoor, setKey: string, recordKey: (id: string) => string): Promise<T[]> {
  const ids = await door.read<string[]>('smembers', setKey);
  // One GET per record, not MGET: on a Cluster the records live on different slots.
  const values = await Promise.all(ids.map((id) => door.read<string | null>('get', recordKey(id))));
  return values.map((value) => parse<T>(value)).filter((record): record is T & {} => record !== null);
}
