/** A Map whose entries vanish at their expiry: on read, and by the memory store's periodic sweep. */
export class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();

  get(key: string, now = Date.now()): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: V, expiresAt: number): void {
    this.entries.set(key, { value, expiresAt });
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  delete(key: string): boolean {
    return this.entries.delete(key);
  }

  /** Adds one to a counter, starting it at 1 with `expiresAt` if absent; the window's end never moves. */
  increment(this: ExpiringMap<number>, key: string, expiresAt: number, now: number): number {
    const entry = this.entries.get(key);
    if (entry === undefined || entry.expiresAt <= now) {
      this.entries.set(key, { value: 1, expiresAt });
      return 1;
    }
    entry.value += 1;
    return entry.value;
  }

  /** Takes one from a live counter; an expired or absent one is left alone. */
  decrement(this: ExpiringMap<number>, key: string, now: number): void {
    const entry = this.entries.get(key);
    if (entry !== undefined && entry.expiresAt > now) entry.value -= 1;
  }

  sweep(now: number): void {
    for (const [key, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(key);
  }
}

/** Records are cloned in and out of the memory store, so a caller can never change what is stored (as with Redis). */
export function cloneOrNull<T>(value: T | undefined): T | null {
  return value === undefined ? null : structuredClone(value);
}
