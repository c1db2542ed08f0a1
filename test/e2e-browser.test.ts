import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { clientDocument, createTestCa, startDocumentServer, startTestDns, type DocumentServer, type TestCa, type TestDns } from './support/client-metadata.js';
import { application, authorizePath, createUser } from './support/issuer.js';

/**
 * The authorization code flow in a real browser (headless Chromium, JavaScript switched off, as
 * the pages must work without it): sign-in page, a wrong password, consent, and the redirect
 * to a real callback server, whose code is then shown to be good.
 */

const CHROMIUM = process.env.TOKENGATE_TEST_CHROMIUM ?? '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];
const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats';
const CLIENT_ID = 'e2e-tickets';

/** What the size check below reads of the page's global. */
interface PageGlobal {
  getComputedStyle(element: unknown): { fontSize: string };
}

/** The application's side: a callback server on a free port that records what it receives. */
interface Callback {
  server: Server;
  redirectUri: string;
  received: URLSearchParams[];
}

async function startCallback(): Promise<Callback> {
  const received: URLSearchParams[] = [];
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://callback');
    if (url.pathname === '/callback') received.push(url.searchParams);
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Signed in</title><p>You are signed in.</p>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, redirectUri: `http://127.0.0.1:${(server.address() as AddressInfo).port}/callback`, received };
}

interface CodeGrant {
  clientId: string;
  userId: string;
  redirectUri: string;
  codeChallenge: string | null;
}

/**
 * Proves a code the browser brought back is good, the way the application uses it: exchanged
 * at the token endpoint with the PKCE verifier (public client), for tokens the store holds.
 */
async function redeemCode(issuer: RunningTokengate, code: string, redirectUri: string, verifier: string): Promise<CodeGrant> {
  const response = await fetch(new URL('/oauth/token', issuer.baseUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: redirectUri, client_id: CLIENT_ID, code_verifier: verifier }),
  });
  expect(response.status).toBe(200);
  const tokens = (await response.json()) as { access_token: string; token_type: string; refresh_token?: string };
  expect(tokens.token_type).toBe('Bearer');
  expect(tokens.refresh_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
  const accessToken = await issuer.store.tokens.getAccessToken(tokenDigest(tokens.access_token));
  if (accessToken === null || accessToken.userId === null) throw new Error('the issued access token is not in the store');
  return { clientId: accessToken.clientId, userId: accessToken.userId, redirectUri, codeChallenge: createHash('sha256').update(verifier).digest('base64url') };
}

/**
 * Runs a test's steps on a page; when one fails, the page as it was is saved as a screenshot in
 * a fresh temporary directory and the failure names the file. A passing run writes nothing.
 */
async function onPage(page: Page, steps: () => Promise<void>): Promise<void> {
  try {
    await steps();
  } catch (error) {
    const file = join(await mkdtemp(join(tmpdir(), 'tokengate-e2e-')), 'failure.png');
    const saved = await page.screenshot({ path: file, fullPage: true }).then(
      () => true,
      () => false,
    );
    if (saved && error instanceof Error) error.message += `\nThe page at the failure: ${file}`;
    throw error;
  } finally {
    await page.close();
  }
}

describe('authorization code flow in headless Chromium', () => {
  let issuer: RunningTokengate;
  let callback: Callback;
  let browser: BrowserContext;
  let profile: string;
  let ca: TestCa;
  let documents: DocumentServer;
  let dns: TestDns;

  beforeAll(async () => {
    callback = await startCallback();
    ca = createTestCa(['assistant.test']);
    documents = await startDocumentServer(ca);
    dns = await startTestDns({ 'assistant.test': ['127.0.0.1'] });
    issuer = await startTokengate('e2e-browser', {
      config: {
        clientMetadataDocuments: {
          enabled: true,
          allow: [{ url: `https://assistant.test:${documents.port}` }],
          caFile: ca.caFile,
          nameServers: [dns.address],
          allowPrivateNetworks: ['127.0.0.1/32'],
        },
      },
    });
    await issuer.store.applications.put(
      application({ clientId: CLIENT_ID, name: 'Festival Tickets', secretDigest: null, confidential: false, redirectUris: [callback.redirectUri] }),
    );
    await createUser(issuer.store, 'user-fan', EMAIL, PASSWORD);
    profile = await mkdtemp(join(tmpdir(), 'tokengate-chromium-'));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      javaScriptEnabled: false,
      viewport: { width: 1024, height: 760 },
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) await rm(profile, { recursive: true, force: true });
    await issuer?.close();
    callback?.server.closeAllConnections();
    await new Promise((resolve) => callback?.server.close(resolve));
    await documents?.close();
    await dns?.close();
    ca?.remove();
  });

  it('signs in, consents and lands on the callback with a code and the state', async () => {
    const page = await browser.newPage();
    const consoleErrors: string[] = [];
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(message.text());
    });
    const verifier = randomBytes(32).toString('base64url');
    const state = randomBytes(8).toString('hex');
    const query = {
      client_id: CLIENT_ID,
      redirect_uri: callback.redirectUri,
      response_type: 'code',
      state,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    };

    await onPage(page, async () => {
      await page.goto(`${issuer.baseUrl}${authorizePath(query)}`);
      expect(await page.title()).toBe('Sign in · Ticketing');
      await expect.poll(() => page.locator('#email:focus').count()).toBe(1);

      await page.getByLabel('E-mail address').fill(EMAIL);
      await page.getByLabel('Password').fill('not my password');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect.poll(() => page.getByRole('alert').textContent()).toBe('The e-mail or password is incorrect.');
      expect(await page.getByLabel('E-mail address').inputValue()).toBe(EMAIL);
      expect(await page.getByLabel('Password').inputValue()).toBe('');

      await page.getByLabel('Password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Festival Tickets wants to access your Ticketing account');
      expect(await page.getByRole('listitem').allTextContents()).toEqual(['See your profile and manage your tickets']);

      await Promise.all([page.waitForURL((url) => url.href.startsWith(callback.redirectUri)), page.getByRole('button', { name: 'Approve' }).click()]);
    });
    expect(callback.received).toHaveLength(1);
    const answer = callback.received[0]!;
    expect(answer.get('state')).toBe(state);
    const code = answer.get('code')!;
    expect(code).toMatch(/^[A-Za-z0-9_-]{43}$/);

    expect(await redeemCode(issuer, code, callback.redirectUri, verifier)).toEqual({
      clientId: CLIENT_ID,
      userId: 'user-fan',
      redirectUri: callback.redirectUri,
      codeChallenge: query.code_challenge,
    });
    // No CSP violation (the stylesheet hash holds, form-action let the redirect through), no other error.
    expect(consoleErrors).toEqual([]);
  }, 60_000);

  it('cannot be framed by another site', async () => {
    const page = await browser.newPage();
    const framer = createServer((_request, response) => {
      response
        .writeHead(200, { 'content-type': 'text/html' })
        .end(
          `<!doctype html><iframe name="victim" src="${issuer.baseUrl}${authorizePath({ client_id: CLIENT_ID, redirect_uri: callback.redirectUri, response_type: 'code', code_challenge: 'a'.repeat(43), code_challenge_method: 'S256' })}"></iframe>`,
        );
    });
    await new Promise<void>((resolve) => framer.listen(0, '127.0.0.1', resolve));
    try {
      await onPage(page, async () => {
        // goto waits for the load event, which waits for the frame.
        await page.goto(`http://127.0.0.1:${(framer.address() as AddressInfo).port}/`);
        const frame = page.frame({ name: 'victim' });
        expect(frame).not.toBeNull();
        // Chromium replaced the framed document by its blocked-page placeholder: no sign-in form in it.
        expect(await frame!.content()).not.toContain('<form');
      });
    } finally {
      framer.closeAllConnections();
      await new Promise((resolve) => framer.close(resolve));
    }
  }, 30_000);

  it('names a client known by its metadata document by its host first, and waits for the person every time', async () => {
    const clientId = `https://assistant.test:${documents.port}/client.json`;
    const host = `assistant.test:${documents.port}`;
    // The name a client gives itself is a claim: here, one that borrows the service's own.
    documents.serveJson('/client.json', clientDocument(clientId, [callback.redirectUri], { client_name: 'Ticketing (official)' }));
    const verifier = randomBytes(32).toString('base64url');
    const url = `${issuer.baseUrl}${authorizePath({
      client_id: clientId,
      redirect_uri: callback.redirectUri,
      response_type: 'code',
      state: 'cimd',
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    })}`;
    const received = callback.received.length;
    // Signed out first: the sign-in page names the client too.
    await browser.clearCookies();
    const page = await browser.newPage();
    await onPage(page, async () => {
      await page.goto(url);
      await expect.poll(() => page.locator('.lead').textContent()).toBe(`to continue to ${host}`);
      await page.getByLabel('E-mail address').fill(EMAIL);
      await page.getByLabel('Password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Sign in' }).click();
      const heading = page.getByRole('heading', { level: 1 });
      await expect.poll(() => heading.textContent()).toBe(`${host} wants to access your Ticketing account`);
      // The host is the heading, in the page's largest type; the claimed name only in the note below, in quotes.
      // Runs in the page, whose global has the DOM's getComputedStyle (this project's types have no DOM).
      const size = (selector: string) =>
        page
          .locator(selector)
          .first()
          .evaluate((element) => parseFloat((globalThis as unknown as PageGlobal).getComputedStyle(element).fontSize));
      expect(await size('h1 strong')).toBeGreaterThan(await size('.client-origin'));
      expect(await page.locator('.client-origin').textContent()).toContain(`calls itself “Ticketing (official)”`);
      expect(await page.locator('.client-origin').textContent()).toContain(clientId);

      // Left alone, the page does nothing: no redirect, no code.
      await page.waitForTimeout(1_000);
      expect(page.url()).toContain('/oauth/authorize');
      expect(callback.received).toHaveLength(received);

      await Promise.all([page.waitForURL((target) => target.href.startsWith(callback.redirectUri)), page.getByRole('button', { name: 'Approve' }).click()]);
      expect(callback.received).toHaveLength(received + 1);

      // Signed in and approved once: asked again, the person sees the consent page again, not a redirect.
      await page.goto(url);
      await expect.poll(() => heading.textContent()).toBe(`${host} wants to access your Ticketing account`);
      await page.waitForTimeout(500);
      expect(page.url()).toContain('/oauth/authorize');
      expect(callback.received).toHaveLength(received + 1);
    });
  }, 60_000);
});
