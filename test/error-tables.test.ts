import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERRORS } from '../src/errors.js';
import { DENIALS, type DenialReason } from '../src/gateway/denials.js';
import { documentFiles, readDocument, ROOT, sectionOf, tableUnder } from './support/markdown.js';

/** The rows of an error table: status, `error` and the reason each names (first column, second, and the `reason` column). */
function errorRows(file: string, heading: string, reasonColumn: number): Array<{ status: number; error: string; reason: string }> {
  return tableUnder(readDocument(file), heading).map((row) => {
    const cells = row
      .slice(1, -1)
      .split('|')
      .map((cell) => cell.trim());
    return { status: Number(cells[0]), error: /`([^`]+)`/.exec(cells[1]!)![1]!, reason: /`([^`]+)`/.exec(cells[reasonColumn]!)![1]! };
  });
}

/** What src/errors.ts answers for a reason: the status and `error` of the error its denial names. */
function answerOf(reason: string): { status: number; error: string } | undefined {
  const denial = DENIALS[reason as DenialReason] as (typeof DENIALS)[DenialReason] | undefined;
  if (denial === undefined) return undefined;
  const { status, error } = ERRORS[denial.code];
  return { status, error };
}

describe("the docs' error tables", () => {
  it('give each gateway refusal the status and error src/errors.ts gives it, and list every one the gateway can give', () => {
    const rows = errorRows('docs/gateway.md', '## Errors', 3);
    expect(rows.length).toBeGreaterThan(30);
    for (const row of rows) expect({ reason: row.reason, ...answerOf(row.reason) }).toEqual(row);
    const gatewayReasons = Object.entries(DENIALS)
      .filter(([, denial]) => !('only' in denial) || denial.only === 'gateway')
      .map(([reason]) => reason);
    expect(rows.map((row) => row.reason).sort()).toEqual(gatewayReasons.sort());
  });

  it("give the decision listener's own refusals the status and error src/errors.ts gives them, and list each", () => {
    const rows = errorRows('docs/ingress.md', '### What the decision listener answers', 2);
    for (const row of rows) expect({ reason: row.reason, ...answerOf(row.reason) }).toEqual(row);
    const ownReasons = Object.entries(DENIALS)
      .filter(([, denial]) => 'only' in denial && denial.only === 'decisions')
      .map(([reason]) => reason);
    expect(rows.map((row) => row.reason).sort()).toEqual(ownReasons.sort());
  });
});

/** The TypeScript files under a folder of the repository, as paths relative to its root. */
function sourceFiles(folder: string): string[] {
  return readdirSync(join(ROOT, folder), { recursive: true, encoding: 'utf8' })
    .filter((path) => path.endsWith('.ts'))
    .map((path) => join(folder, path));
}

describe('the order of the request path', () => {
  it('is written out in one place of the docs (docs/gateway.md#the-request-path) and one of the code (src/gateway/check.ts); the others refer to them', () => {
    const chain = /\bextract\b[^.]{0,40}->[^.]{0,40}\bverify\b/;
    const code = ['src', 'bench'].flatMap((folder) => sourceFiles(folder));
    const spelled = [...documentFiles(), ...code].filter((file) => chain.test(readFileSync(join(ROOT, file), 'utf8').replace(/\s+/g, ' ')));
    expect(spelled).toEqual(['src/gateway/check.ts']);
    expect(sectionOf(readDocument('docs/gateway.md'), '## The request path')).toMatch(
      /1\. \*\*where\*\*[\s\S]*2\. \*\*extract\*\*[\s\S]*3\. \*\*verify\*\*[\s\S]*4\. \*\*prove\*\*[\s\S]*5\. \*\*authorize\*\*[\s\S]*6\. \*\*meter\*\*[\s\S]*7\. \*\*sign\*\*[\s\S]*8\. \*\*forward\*\*/,
    );
  });
});
