import { createRequire } from 'node:module';
import { chromium, type Browser, type BrowserContext } from 'playwright-core';

/**
 * Headless Chromium for the pages' tests: the person's browser runs without JavaScript and under
 * the pages' own CSP, as the pages must work. axe-core is a script: it runs in a context of its
 * own, with JavaScript and `bypassCSP` (the pages' `default-src 'none'` rightly refuses any
 * injected script, axe's included).
 */

const CHROMIUM = process.env.TOKENGATE_TEST_CHROMIUM ?? '/usr/bin/chromium';
const AXE_SCRIPT = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const WCAG_21_AA = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];

/** Chromium with `hosts` (the applications' and an attacker's sites) resolved to this machine by Chromium itself. */
export function launchChromium(hosts: string[]): Promise<Browser> {
  const rules = `--host-resolver-rules=${hosts.map((host) => `MAP ${host} 127.0.0.1`).join(', ')}`;
  const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic', '--no-first-run', rules];
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args });
}

/** The person's browser: no JavaScript; what Chromium reports of the pages' CSP goes to `policyViolations`. */
export async function personContext(browser: Browser, policyViolations: string[]): Promise<BrowserContext> {
  const person = await browser.newContext({ javaScriptEnabled: false });
  person.on('console', (message) => {
    if (/Content Security Policy|Refused to/i.test(message.text())) policyViolations.push(message.text());
  });
  return person;
}

/**
 * The WCAG 2.1 A and AA violations axe-core finds on the page at `url`, opened in a context of
 * its own: with `signedInAs`'s cookies, or none.
 */
export async function accessibilityViolations(
  browser: Browser,
  url: string,
  colorScheme: 'light' | 'dark',
  signedInAs: BrowserContext | null,
): Promise<{ title: string; violations: Array<{ id: string; targets: string[] }> }> {
  const context = await browser.newContext({ bypassCSP: true, colorScheme });
  try {
    if (signedInAs !== null) await context.addCookies(await signedInAs.cookies());
    const page = await context.newPage();
    await page.goto(url);
    await page.addScriptTag({ path: AXE_SCRIPT });
    const results = await page.evaluate(async (tags) => {
      const axe = (
        globalThis as unknown as {
          axe: { run(context: unknown, options: unknown): Promise<{ violations: Array<{ id: string; nodes: Array<{ target: string[] }> }> }> };
        }
      ).axe;
      return axe.run(globalThis, { runOnly: { type: 'tag', values: tags } });
    }, WCAG_21_AA);
    return {
      title: await page.title(),
      violations: results.violations.map((violation) => ({ id: violation.id, targets: violation.nodes.flatMap((node) => node.target) })),
    };
  } finally {
    await context.close();
  }
}
