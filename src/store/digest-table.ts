import { hash } from 'node:crypto';

/** What a slot was dropped for: made room for another (`evict`), or deleted. */
export type DropReason = 'evict' | 'delete';

/** No slot: the end of a chain or of the recency list. */
const NONE = -1;
const FIRST_ALLOCATION = 1024;

/** base64url character code -> its 6 bits, -1 for any other character. */
const SEXTETS = new Int8Array(128).fill(-1);
for (const [index, character] of [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'].entries()) {
  SEXTETS[character.charCodeAt(0)] = index;
}

/**
 * A bounded table of token digests with least-recently-used eviction, in typed arrays: each
 * entry is a slot number, its key the first 16 bytes of the token's SHA-256 (four 32-bit words),
 * chained in hash buckets and linked in recency order by slot numbers. No object per entry, so
 * the collector has nothing to trace however many tokens it holds; what an entry carries besides
 * its key lives in columns the owner indexes by slot (`onGrow` tells it their new length).
 *
 * Keys are SHA-256 output of tokens whose tag was checked, so their first word is a uniform
 * hash already and nobody can choose which bucket one lands in. Lookup, insertion, eviction and
 * deletion are O(1); the arrays grow by doubling up to the capacity, never past it.
 */
export class DigestTable {
  private keys: Uint32Array;
  /** Bucket -> first slot in it + 1 (0: empty), so a fresh array needs no filling. */
  private buckets: Int32Array;
  private bucketMask: number;
  /** Slot -> next slot in its bucket; for a free slot, the next free one. */
  private chain: Int32Array;
  /** Recency links: slot -> the slot used just before it (older) and just after it (newer). */
  private older: Int32Array;
  private newer: Int32Array;
  private newest = NONE;
  private oldest = NONE;
  private firstFree = NONE;
  /** Slots ever handed out since the last clear: [0, used). */
  private used = 0;
  private allocated = 0;
  private count = 0;
  // The key of the last lookup, decoded without allocating.
  private k0 = 0;
  private k1 = 0;
  private k2 = 0;
  private k3 = 0;

  constructor(
    readonly capacity: number,
    /** Called when a slot leaves the table, before it is reused. */
    private readonly onDrop: (slot: number, reason: DropReason) => void,
    /** Called when the columns must hold `length` slots (they keep slots below the old length). */
    private readonly onGrow: (length: number) => void,
  ) {
    this.keys = new Uint32Array(0);
    this.chain = new Int32Array(0);
    this.older = new Int32Array(0);
    this.newer = new Int32Array(0);
    this.buckets = new Int32Array(0);
    this.bucketMask = 0;
  }

  get size(): number {
    return this.count;
  }

  /** The slot holding `digest`, or -1. Does not change its recency. */
  find(digest: string): number {
    this.decode(digest);
    if (this.allocated === 0) return NONE;
    let slot = this.buckets[this.k0 & this.bucketMask]! - 1;
    const keys = this.keys;
    while (slot !== NONE) {
      const at = slot << 2;
      if (keys[at] === this.k0 && keys[at + 1] === this.k1 && keys[at + 2] === this.k2 && keys[at + 3] === this.k3) return slot;
      slot = this.chain[slot]!;
    }
    return NONE;
  }

  /** Makes `slot` the most recently used. */
  touch(slot: number): void {
    if (slot === this.newest) return;
    this.unlinkRecency(slot);
    this.linkNewest(slot);
  }

  /**
   * A slot for `digest`, which must not be in the table (find it first), as the most recently
   * used; at capacity the least recently used entry is dropped (`evict`) to make room.
   */
  insert(digest: string): number {
    this.decode(digest);
    if (this.count === this.capacity) this.drop(this.oldest, 'evict');
    let slot: number;
    if (this.firstFree !== NONE) {
      slot = this.firstFree;
      this.firstFree = this.chain[slot]!;
    } else {
      if (this.used === this.allocated) this.grow();
      slot = this.used++;
    }
    const at = slot << 2;
    this.keys[at] = this.k0;
    this.keys[at + 1] = this.k1;
    this.keys[at + 2] = this.k2;
    this.keys[at + 3] = this.k3;
    const bucket = this.k0 & this.bucketMask;
    this.chain[slot] = this.buckets[bucket]! - 1;
    this.buckets[bucket] = slot + 1;
    this.linkNewest(slot);
    this.count++;
    return slot;
  }

  /** Drops the entry in `slot` (a deletion, not an eviction). */
  delete(slot: number): void {
    this.drop(slot, 'delete');
  }

  /** Every slot in use, most recently used first (a copy: deleting while going through it is safe). */
  slots(): Int32Array {
    const slots = new Int32Array(this.count);
    let index = 0;
    for (let slot = this.newest; slot !== NONE; slot = this.older[slot]!) slots[index++] = slot;
    return slots;
  }

  /** Forgets every entry at once (without dropping them one by one) and gives the memory back. */
  clear(): void {
    this.keys = new Uint32Array(0);
    this.chain = new Int32Array(0);
    this.older = new Int32Array(0);
    this.newer = new Int32Array(0);
    this.buckets = new Int32Array(0);
    this.bucketMask = 0;
    this.newest = this.oldest = this.firstFree = NONE;
    this.used = this.allocated = this.count = 0;
    this.onGrow(0);
  }

  private drop(slot: number, reason: DropReason): void {
    this.onDrop(slot, reason);
    const at = slot << 2;
    const bucket = this.keys[at]! & this.bucketMask;
    let previous = NONE;
    let current = this.buckets[bucket]! - 1;
    while (current !== slot) {
      previous = current;
      current = this.chain[current]!;
    }
    if (previous === NONE) this.buckets[bucket] = this.chain[slot]! + 1;
    else this.chain[previous] = this.chain[slot]!;
    this.unlinkRecency(slot);
    this.chain[slot] = this.firstFree;
    this.firstFree = slot;
    this.count--;
  }

  private linkNewest(slot: number): void {
    this.older[slot] = this.newest;
    this.newer[slot] = NONE;
    if (this.newest !== NONE) this.newer[this.newest] = slot;
    this.newest = slot;
    if (this.oldest === NONE) this.oldest = slot;
  }

  private unlinkRecency(slot: number): void {
    const older = this.older[slot]!;
    const newer = this.newer[slot]!;
    if (older === NONE) this.oldest = newer;
    else this.newer[older] = newer;
    if (newer === NONE) this.newest = older;
    else this.older[newer] = older;
  }

  /** Twice the slots (at most the capacity), and as many buckets as slots, rechained. */
  private grow(): void {
    const length = Math.min(this.capacity, Math.max(FIRST_ALLOCATION, this.allocated * 2));
    this.keys = grown(this.keys, length * 4);
    this.chain = grown(this.chain, length);
    this.older = grown(this.older, length);
    this.newer = grown(this.newer, length);
    const bucketCount = 2 ** Math.ceil(Math.log2(length));
    if (bucketCount !== this.buckets.length) {
      this.buckets = new Int32Array(bucketCount);
      this.bucketMask = bucketCount - 1;
      // Every slot handed out is in a bucket or on the free list: rechain the ones in use.
      for (let slot = this.newest; slot !== NONE; slot = this.older[slot]!) {
        const bucket = this.keys[slot << 2]! & this.bucketMask;
        this.chain[slot] = this.buckets[bucket]! - 1;
        this.buckets[bucket] = slot + 1;
      }
    }
    this.allocated = length;
    this.onGrow(length);
  }

  /**
   * The first 16 bytes of the SHA-256 a digest spells (43 characters of base64url) into k0..k3:
   * its first 22 characters, four at a time (3 bytes each). Any other string (not a digest the
   * gateway makes) is hashed to a key of the same size.
   */
  private decode(digest: string): void {
    if (digest.length === 43) {
      const g0 = group(digest, 0);
      const g1 = group(digest, 4);
      const g2 = group(digest, 8);
      const g3 = group(digest, 12);
      const g4 = group(digest, 16);
      const g5 = (sextet(digest, 20) << 6) | sextet(digest, 21);
      if ((g0 | g1 | g2 | g3 | g4 | g5) >= 0) {
        this.k0 = ((g0 << 8) | (g1 >>> 16)) >>> 0;
        this.k1 = (((g1 & 0xffff) << 16) | (g2 >>> 8)) >>> 0;
        this.k2 = (((g2 & 0xff) << 24) | g3) >>> 0;
        this.k3 = ((g4 << 8) | (g5 >>> 4)) >>> 0;
        return;
      }
    }
    const bytes = hash('sha256', digest, 'buffer');
    this.k0 = bytes.readUInt32BE(0);
    this.k1 = bytes.readUInt32BE(4);
    this.k2 = bytes.readUInt32BE(8);
    this.k3 = bytes.readUInt32BE(12);
  }
}

/** The 6 bits of one base64url character; negative for any other character. */
function sextet(text: string, index: number): number {
  const code = text.charCodeAt(index);
  return code < 128 ? SEXTETS[code]! : -1;
}

/** Four base64url characters as 24 bits; negative when one is not base64url. */
function group(text: string, at: number): number {
  const a = sextet(text, at);
  const b = sextet(text, at + 1);
  const c = sextet(text, at + 2);
  const d = sextet(text, at + 3);
  return (a | b | c | d) < 0 ? -1 : (a << 18) | (b << 12) | (c << 6) | d;
}

/** A copy of `array` with room for `length` elements. */
export function grown<T extends Uint32Array | Int32Array | Float64Array | Uint8Array>(array: T, length: number): T {
  const bigger = new (array.constructor as new (length: number) => T)(length);
  bigger.set(array.subarray(0, Math.min(array.length, length)));
  return bigger;
}
