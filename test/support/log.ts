import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';
import { loggerOptions } from '../../src/observability/logger.js';

/** One JSON log line as pino wrote it. */
export type LogEntry = Record<string, unknown> & { level: number; msg: string };

export interface CapturedLog {
  /** A logger with tokengate's own options (redaction included) at `level`, writing into `lines`. */
  readonly logger: Logger;
  /** Every line written so far, as written. */
  readonly lines: string[];
  /** The lines parsed. */
  entries(): LogEntry[];
  /** Everything written, as one string (to search for secrets). */
  text(): string;
}

export function captureLog(level: string): CapturedLog {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return {
    logger: pino(loggerOptions(level), sink),
    lines,
    entries: () => lines.map((line) => JSON.parse(line) as LogEntry),
    text: () => lines.join('\n'),
  };
}

/** The access log's lines among them. */
export function accessLines(log: CapturedLog): LogEntry[] {
  return log.entries().filter((entry) => entry.msg === 'request completed');
}
