import type { Socket } from 'node:net';

/**
 * Unsolicited `100 Continue` from an upstream, dropped before undici reads it.
 *
 * RFC 9110 section 15.2: a client must parse the 1xx answers that come before a final answer,
 * even ones it did not expect, and may ignore them. undici's HTTP/1.1 client instead fails the
 * request on any 100 ("bad response"), which made such an upstream's answers 502s. The gateway
 * never asks an upstream for a 100 (it answers `Expect: 100-continue` itself and does not pass
 * it on), so every 100 it gets is one it may ignore; other 1xx answers undici hands to the
 * forwarder, which relays 103 and drops the rest.
 *
 * The filter looks only where an answer starts: at the first bytes of the answer to a request
 * (each connection carries one request at a time) and after each interim answer it let through.
 * There it reads the status line (`HTTP/1.1 100 ...`); an interim answer is a head alone, ended
 * by the first empty line. Once a final answer starts, every byte passes untouched until the
 * next request, so a body is never inspected, whatever it holds. undici's parser still judges
 * every byte it is given: the filter only removes whole 100 heads.
 */
export class InterimAnswerFilter {
  /** Whether the next bytes read start an answer head (true until a final answer's head begins). */
  atHead = true;
  /** The start of a head not yet complete, kept until the rest arrives. */
  private held: Buffer | null = null;

  /** `maxHeadBytes`: past this without an empty line, bytes pass on for undici to refuse as it would. */
  constructor(private readonly maxHeadBytes: number) {}

  /** The connection's next request was handed to it: its answer starts with the next byte read. */
  expectAnswer(): void {
    this.atHead = true;
  }

  /** What undici may read of `chunk`: the bytes without any 100 head; null while all of it is held. */
  take(chunk: Buffer): Buffer | null {
    const bytes = this.held === null ? chunk : Buffer.concat([this.held, chunk]);
    this.held = null;
    let passed: Buffer[] | null = null;
    let start = 0;
    while (this.atHead && start < bytes.length) {
      const end = this.interimHeadEnd(bytes, start);
      if (end === FINAL) this.atHead = false;
      else if (end === INCOMPLETE) {
        this.held = bytes.subarray(start);
        start = bytes.length;
      } else {
        if (statusAt(bytes, start) !== CONTINUE) (passed ??= []).push(bytes.subarray(start, end));
        start = end;
      }
    }
    // The common case: a final answer's head at the start of the chunk, passed as it came.
    if (start === 0) return bytes;
    if (start < bytes.length) (passed ??= []).push(bytes.subarray(start));
    if (passed === null) return null;
    return passed.length === 1 ? passed[0]! : Buffer.concat(passed);
  }

  /** Where the interim head starting at `start` ends; FINAL when this is not one; INCOMPLETE until it can be told. */
  private interimHeadEnd(bytes: Buffer, start: number): number {
    const status = statusAt(bytes, start);
    if (status === INCOMPLETE) return INCOMPLETE;
    // 101 switches protocols: not an interim answer undici can go on from, left to undici to refuse.
    if (status === FINAL || status >= 200 || status === SWITCHING_PROTOCOLS) return FINAL;
    const end = bytes.indexOf(HEAD_END, start);
    if (end !== -1) return end + HEAD_END.length;
    return bytes.length - start > this.maxHeadBytes ? FINAL : INCOMPLETE;
  }
}

const FINAL = -1;
const INCOMPLETE = -2;
const CONTINUE = 100;
const SWITCHING_PROTOCOLS = 101;
const HEAD_END = '\r\n\r\n';
/** `HTTP/1.1 100 `: the part of a status line that says what the answer is. */
const STATUS_LINE_START = 'HTTP/d.d ddd ';

/**
 * The status of the status line at `start` (`HTTP/` digit `.` digit SP 3 digits, then SP or CR);
 * FINAL for bytes that are no status line, to pass on to undici as they are; INCOMPLETE while
 * too few bytes have come to tell.
 */
function statusAt(bytes: Buffer, start: number): number {
  const available = Math.min(bytes.length - start, STATUS_LINE_START.length);
  for (let index = 0; index < available; index += 1) {
    const expected = STATUS_LINE_START.charCodeAt(index);
    const code = bytes[start + index]!;
    const matches = expected === 0x64 /* d */ ? code >= 0x30 && code <= 0x39 : index === 12 ? code === 0x20 || code === 0x0d : code === expected;
    if (!matches) return FINAL;
  }
  if (available < STATUS_LINE_START.length) return INCOMPLETE;
  return (bytes[start + 9]! - 0x30) * 100 + (bytes[start + 10]! - 0x30) * 10 + (bytes[start + 11]! - 0x30);
}

/**
 * Puts `filter` between an upstream connection and undici, which reads it with `socket.read()`
 * (undici's HTTP/1.1 client pulls from the socket; it never listens for 'data'). Once the
 * final answer's head has passed, a read costs one property check.
 */
export function filterInterimAnswers(socket: Socket, filter: InterimAnswerFilter): void {
  const read = socket.read;
  socket.read = function readPastContinue(this: Socket, size?: number) {
    const chunk = read.call(this, size) as Buffer | null;
    return chunk === null || !filter.atHead ? chunk : filter.take(chunk);
  };
}
