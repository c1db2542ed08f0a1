import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InterimAnswerFilter } from '../../src/gateway/interim-answers.js';
import { holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * What the gateway lets undici read of an upstream connection (src/gateway/interim-answers.ts),
 * as a property: for any answers, each any number of interim heads before its final one, and
 * any body, cut into chunks anywhere, what passes is exactly those bytes without the 100 heads.
 */

const field = fc.tuple(
  fc.constantFrom('X-Upstream', 'Link', 'Server', 'Content-Length'),
  fc.string({ unit: fc.constantFrom(...'abc 01;<>/=.'), maxLength: 12 }),
);
const head = (status: string, fields: Array<[string, string]>) =>
  `HTTP/1.1 ${status}\r\n${fields.map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n`;
const interim = fc
  .tuple(fc.constantFrom('100 Continue', '100 ', '100', '102 Processing', '103 Early Hints', '199'), fc.array(field, { maxLength: 3 }))
  .map(([status, fields]) => ({
    text: head(status, fields),
    dropped: status.startsWith('100'),
  }));
/** A final answer; its body may hold anything, status lines of interim answers included. */
const final = fc
  .tuple(
    fc.constantFrom('200 OK', '204 No Content', '404 Not Found', '502 Bad Gateway'),
    fc.array(field, { maxLength: 2 }),
    fc.array(fc.constantFrom('HTTP/1.1 100 Continue\r\n\r\n', 'body', '\r\n\r\n', 'HTTP/1.1 ', '1'), { maxLength: 4 }),
  )
  .map(([status, fields, body]) => `${head(status, [...fields, ['Content-Length', String(body.join('').length)]])}${body.join('')}`);
const answer = fc.tuple(fc.array(interim, { maxLength: 4 }), final).map(([interims, last]) => ({
  sent: `${interims.map((each) => each.text).join('')}${last}`,
  passed: `${interims
    .filter((each) => !each.dropped)
    .map((each) => each.text)
    .join('')}${last}`,
}));

/** `text` cut at the given places. */
function chunks(text: string, cuts: number[]): Buffer[] {
  const at = [...new Set(cuts.map((cut) => cut % (text.length + 1)))].sort((a, b) => a - b);
  return [0, ...at].map((start, index) => Buffer.from(text.slice(start, [...at, text.length][index]), 'latin1')).filter((chunk) => chunk.length > 0);
}

describe('the interim answer filter, for any answers cut anywhere', () => {
  it(
    'passes each answer without its 100 heads, every other byte as sent and in order',
    () =>
      holds(
        'interim answers: only 100 heads dropped',
        fc.property(fc.array(fc.tuple(answer, fc.array(fc.nat(), { maxLength: 8 })), { minLength: 1, maxLength: 3 }), (answers) => {
          const filter = new InterimAnswerFilter(16_384);
          for (const [{ sent, passed }, cuts] of answers) {
            filter.expectAnswer();
            const read = chunks(sent, cuts)
              .map((chunk) => filter.take(chunk))
              .filter((chunk): chunk is Buffer => chunk !== null);
            expect(Buffer.concat(read).toString('latin1')).toBe(passed);
          }
          return true;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );
});
