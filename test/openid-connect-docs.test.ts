import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { decodeJwt } from 'jose';
import * as oidc from 'openid-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_COMMANDS } from '../src/cli/admin-commands.js';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { application, authorizePath, createUser, FormClient, formFields } from './support/issuer.js';
import { codeBlocks, readDocument, sectionOf, shellCommands, tableUnder } from './support/markdown.js';
import { freePort } from './support/ports.js';

/**
 * docs/openid-connect.md as written: its curl walkthrough run against a running tokengate (the
 * documented issuer URL swapped for the test's), its discovery document as served, the claims
 * its table lists as an ID token carries them, and the openid-client calls of its walkthrough.
 */

const DOC = readDocument('docs/openid-connect.md');
const WALKTHROUGH = sectionOf(DOC, '## Log in with the ticketing service');
const DOCUMENTED_ISSUER = 'https://auth.ticketing.example';
const REDIRECT_URI = 'https://festival.example/callback';
const SECRET = 'festival-docs-secret-0123456789';
const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats forever';

let issuer: RunningTokengate;
let issuerUrl: string;

beforeAll(async () => {
  const port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  issuer = await startTokengate('openid-docs', { port, config: { openidConnect: { enabled: true } } });
  await issuer.store.applications.put(
    application({ clientId: 'festival', secretDigest: clientSecretDigest(SECRET), redirectUris: [REDIRECT_URI], scopes: ['openid', 'email'] }),
  );
  await createUser(issuer.store, 'user-fan', EMAIL, PASSWORD);
});

afterAll(async () => {
  await issuer?.close();
});

/** A code for the walkthrough's application, the user signing in and approving over HTTP. */
async function codeFor(parameters: Record<string, string> = {}): Promise<string> {
  const browser = new FormClient(issuerUrl);
  const login = await browser.get(
    authorizePath({ client_id: 'festival', redirect_uri: REDIRECT_URI, response_type: 'code', scope: 'openid email', ...parameters }),
  );
  const next = await browser.follow(await browser.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: PASSWORD }));
  // Approved once, the confidential application gets its code without the consent page.
  const back = next.status === 302 ? next : await browser.post('/oauth/authorize/decision', { ...formFields(next.text), decision: 'approve' });
  return new URL(back.location!).searchParams.get('code')!;
}

async function sh(command: string, env: Record<string, string>): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', command.replaceAll(DOCUMENTED_ISSUER, issuerUrl)], {
    env: { PATH: process.env.PATH!, ...env },
  });
  return stdout;
}

describe('docs/openid-connect.md', () => {
  it("runs the walkthrough's curl commands as written: discovery, the code's token answer with its ID token, UserInfo", async () => {
    const commands = shellCommands(codeBlocks(sectionOf(WALKTHROUGH, '### With curl'), 'sh')[0]!);
    expect(commands).toHaveLength(3);
    const discovery = JSON.parse(await sh(commands[0]!, {})) as Record<string, unknown>;
    expect(discovery.issuer).toBe(issuerUrl);
    const tokens = JSON.parse(await sh(commands[1]!, { FESTIVAL_SECRET: SECRET, CODE: await codeFor() })) as Record<string, string>;
    expect(tokens).toMatchObject({
      access_token: expect.any(String) as string,
      refresh_token: expect.any(String) as string,
      id_token: expect.any(String) as string,
    });
    const userinfo = JSON.parse(await sh(commands[2]!, { ACCESS_TOKEN: tokens.access_token! })) as Record<string, unknown>;
    // As the page says UserInfo answers.
    const documented = JSON.parse(/UserInfo answers\s+`([^`]+)`/.exec(WALKTHROUGH)![1]!) as Record<string, unknown>;
    expect(Object.keys(userinfo).sort()).toEqual(Object.keys(documented).sort());
    expect(userinfo).toEqual({ ...documented, sub: 'user-fan' });
  });

  it("uses openid-client's functions as they are named, and the registration command's options as the CLI takes them", async () => {
    const block = codeBlocks(sectionOf(WALKTHROUGH, '### With openid-client'), 'js')[0]!;
    const called = [...new Set([...block.matchAll(/client\.(\w+)\(/g)].map((match) => match[1]!))];
    expect(called).toEqual(expect.arrayContaining(['discovery', 'buildAuthorizationUrl', 'authorizationCodeGrant', 'fetchUserInfo']));
    for (const name of called) expect(typeof (oidc as Record<string, unknown>)[name], name).toBe('function');
    const register = shellCommands(codeBlocks(WALKTHROUGH, 'sh')[0]!)[0]!;
    const options = Object.keys(ADMIN_COMMANDS['apps create']!.options);
    for (const option of register.matchAll(/--([a-z-]+)/g)) expect(options).toContain(option[1]);
  });

  it('shows the discovery members as served', async () => {
    const served = (await (await fetch(`${issuerUrl}/.well-known/openid-configuration`)).json()) as Record<string, unknown>;
    const shown = JSON.parse(codeBlocks(sectionOf(DOC, '## Discovery'), 'json')[0]!.replaceAll(DOCUMENTED_ISSUER, issuerUrl)) as Record<string, unknown>;
    for (const [member, value] of Object.entries(shown)) expect({ member, value: served[member] }).toEqual({ member, value });
  });

  it('lists every claim of an ID token with a nonce and the email scope, and no other', async () => {
    const config = await oidc.discovery(new URL(issuerUrl), 'festival', SECRET, oidc.ClientSecretBasic(SECRET), { execute: [oidc.allowInsecureRequests] });
    const code = await codeFor({ nonce: 'docs-nonce' });
    const tokens = await oidc.authorizationCodeGrant(config, new URL(`${REDIRECT_URI}?code=${code}&iss=${encodeURIComponent(issuerUrl)}`), {
      expectedNonce: 'docs-nonce',
      idTokenExpected: true,
    });
    const listed = tableUnder(DOC, '## ID tokens').flatMap((row) => [...row.split('|')[1]!.matchAll(/`(\w+)`/g)].map((match) => match[1]!));
    expect(Object.keys(decodeJwt(tokens.id_token!)).sort()).toEqual([...listed].sort());
  });
});
