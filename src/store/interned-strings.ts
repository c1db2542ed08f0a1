import { randomInt } from 'node:crypto';
import { grown } from './digest-table.js';

const FIRST_IDS = 256;
const FIRST_BYTES = 4096;

/**
 * Strings many cache entries may share (user ids, token family ids, DPoP key thumbprints), each
 * kept once as UTF-8 bytes in one buffer and named by a number, with a count of the entries
 * holding it: the last release frees it, so the table holds what the cache holds and no more.
 * Id 0 is never handed out (an entry's "none"). Freed bytes are reclaimed by compacting the
 * buffer once they are more than half of it. Arrays grow by half again, not double: a full
 * cache does not carry twice the room it needs.
 *
 * One string costs its bytes and 16 bytes of bookkeeping, against some 60 to 100 bytes as a
 * JavaScript string in a Map. Lookups hash the bytes with a per-process seed: a store's values
 * cannot be chosen to pile up in one bucket.
 */
export class InternedStrings {
  private bytes = Buffer.alloc(FIRST_BYTES);
  /** Bytes in use at the start of `bytes`, live or freed. */
  private end = 0;
  private liveBytes = 0;
  // Per id.
  private offsets = new Uint32Array(FIRST_IDS);
  private lengths = new Uint32Array(FIRST_IDS);
  /** 1 for a string of ASCII only, decoded as Latin-1: a copy, no UTF-8 decoding. */
  private ascii = new Uint8Array(FIRST_IDS);
  private references = new Uint32Array(FIRST_IDS);
  /** Next id in the same bucket; for a free id, the next free one. */
  private chain = new Int32Array(FIRST_IDS);
  /** Bucket -> first id in it (0: empty). */
  private buckets = new Int32Array(FIRST_IDS);
  private nextId = 1;
  private firstFree = 0;
  private count = 0;
  private scratch = Buffer.alloc(256);
  private readonly seed = randomInt(2 ** 31);

  /** Distinct strings held. */
  get size(): number {
    return this.count;
  }

  /** The id of `value`, counting one more holder (adding it when new). */
  acquire(value: string): number {
    const length = this.encode(value);
    const code = this.hashOf(this.scratch, 0, length);
    const found = this.lookup(code, length);
    if (found !== 0) {
      this.references[found]!++;
      return found;
    }
    const id = this.newId();
    const offset = this.reserve(length);
    this.scratch.copy(this.bytes, offset, 0, length);
    this.offsets[id] = offset;
    this.lengths[id] = length;
    this.ascii[id] = length === value.length ? 1 : 0;
    this.references[id] = 1;
    const bucket = code & (this.buckets.length - 1);
    this.chain[id] = this.buckets[bucket]!;
    this.buckets[bucket] = id;
    this.count++;
    this.liveBytes += length;
    if (this.count > this.buckets.length) this.rebucket(this.buckets.length * 2);
    return id;
  }

  /** The id of `value` when held, else 0; counts no holder. */
  find(value: string): number {
    const length = this.encode(value);
    return this.lookup(this.hashOf(this.scratch, 0, length), length);
  }

  /** One holder fewer; the last one frees the string. */
  release(id: number): void {
    if (--this.references[id]! > 0) return;
    const bucket = this.hashOf(this.bytes, this.offsets[id]!, this.lengths[id]!) & (this.buckets.length - 1);
    if (this.buckets[bucket] === id) this.buckets[bucket] = this.chain[id]!;
    else {
      let previous = this.buckets[bucket]!;
      while (this.chain[previous] !== id) previous = this.chain[previous]!;
      this.chain[previous] = this.chain[id]!;
    }
    this.liveBytes -= this.lengths[id]!;
    this.lengths[id] = 0;
    this.chain[id] = this.firstFree;
    this.firstFree = id;
    this.count--;
  }

  value(id: number): string {
    const offset = this.offsets[id]!;
    const end = offset + this.lengths[id]!;
    return this.bytes.toString(this.ascii[id] === 1 ? 'latin1' : 'utf8', offset, end);
  }

  /** Forgets every string at once and gives the memory back. */
  clear(): void {
    this.bytes = Buffer.alloc(FIRST_BYTES);
    this.end = this.liveBytes = 0;
    this.offsets = new Uint32Array(FIRST_IDS);
    this.lengths = new Uint32Array(FIRST_IDS);
    this.ascii = new Uint8Array(FIRST_IDS);
    this.references = new Uint32Array(FIRST_IDS);
    this.chain = new Int32Array(FIRST_IDS);
    this.buckets = new Int32Array(FIRST_IDS);
    this.nextId = 1;
    this.firstFree = this.count = 0;
  }

  /** `value` as UTF-8 at the start of the scratch buffer; its length in bytes. */
  private encode(value: string): number {
    if (value.length * 3 > this.scratch.length) this.scratch = Buffer.alloc(value.length * 3);
    return this.scratch.write(value, 0, 'utf8');
  }

  private lookup(code: number, length: number): number {
    let id = this.buckets[code & (this.buckets.length - 1)]!;
    while (id !== 0) {
      if (this.lengths[id] === length && this.scratch.compare(this.bytes, this.offsets[id]!, this.offsets[id]! + length, 0, length) === 0) return id;
      id = this.chain[id]!;
    }
    return 0;
  }

  /** FNV-1a over the bytes, seeded. */
  private hashOf(buffer: Buffer, offset: number, length: number): number {
    let code = 0x811c9dc5 ^ this.seed;
    for (let index = offset; index < offset + length; index++) code = Math.imul(code ^ buffer[index]!, 0x01000193);
    return code >>> 0;
  }

  private newId(): number {
    if (this.firstFree !== 0) {
      const id = this.firstFree;
      this.firstFree = this.chain[id]!;
      return id;
    }
    if (this.nextId === this.offsets.length) {
      const length = Math.ceil(this.offsets.length * 1.5);
      this.offsets = grown(this.offsets, length);
      this.lengths = grown(this.lengths, length);
      this.ascii = grown(this.ascii, length);
      this.references = grown(this.references, length);
      this.chain = grown(this.chain, length);
    }
    return this.nextId++;
  }

  /** Room for `length` more bytes at the end of the buffer: compacted first when half of it is freed strings, grown when still short. */
  private reserve(length: number): number {
    if (this.end + length > this.bytes.length) {
      if (this.liveBytes < this.end / 2) this.compact(this.bytes.length);
      if (this.end + length > this.bytes.length) this.compact(Math.ceil(Math.max(this.bytes.length, this.liveBytes + length) * 1.5));
    }
    const offset = this.end;
    this.end += length;
    return offset;
  }

  /** Copies the live strings, in id order, to the start of a buffer of `size` bytes. */
  private compact(size: number): void {
    const bytes = Buffer.alloc(size);
    let end = 0;
    for (let id = 1; id < this.nextId; id++) {
      if (this.references[id] === 0) continue;
      const offset = this.offsets[id]!;
      this.bytes.copy(bytes, end, offset, offset + this.lengths[id]!);
      this.offsets[id] = end;
      end += this.lengths[id]!;
    }
    this.bytes = bytes;
    this.end = end;
  }

  private rebucket(bucketCount: number): void {
    this.buckets = new Int32Array(bucketCount);
    for (let id = 1; id < this.nextId; id++) {
      if (this.references[id] === 0) continue;
      const bucket = this.hashOf(this.bytes, this.offsets[id]!, this.lengths[id]!) & (bucketCount - 1);
      this.chain[id] = this.buckets[bucket]!;
      this.buckets[bucket] = id;
    }
  }
}
