import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose';
import * as oidc from 'openid-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientSecretDigest } from '../src/issuer/client-auth.js';
import { adminFetch, startTokengate, type RunningTokengate } from './support/instance.js';
import { application, authorizePath, createUser, FormClient, formFields } from './support/issuer.js';
import { freePort } from './support/ports.js';

/**
 * The ID token keys rotate twice while two relying parties verify every ID token with the key
 * sets they cache: openid-client (its JWKS fetched again for an unknown key id only once its copy
 * is 60 s old) and jose's createRemoteJWKSet (cached 10 minutes, fetched again for an unknown key
 * id at most every 30 s). A refresh every few hundred milliseconds gets a new ID token; not one
 * fails to verify, and three keys in turn sign them. The shortest timeline the config allows:
 * a new key published 55 + 1 + 5 s before it signs.
 */

const SECRET = 'rotation-secret-0123456789';
const REDIRECT_URI = 'https://festival.example/callback';
const EMAIL = 'fan@example.com';
const PASSWORD = 'front row seats forever';

let issuer: RunningTokengate;
let issuerUrl: string;

beforeAll(async () => {
  const port = await freePort();
  issuerUrl = `http://127.0.0.1:${port}`;
  issuer = await startTokengate('openid-rotation', {
    port,
    config: { openidConnect: { enabled: true, jwksMaxAgeSeconds: 55, keyRefreshSeconds: 1, rotationIntervalSeconds: 0 } },
  });
  await issuer.store.applications.put(
    application({ clientId: 'festival', secretDigest: clientSecretDigest(SECRET), redirectUris: [REDIRECT_URI], scopes: ['openid', 'email'] }),
  );
  await createUser(issuer.store, 'user-fan', EMAIL, PASSWORD);
});

afterAll(async () => {
  await issuer?.close();
});

async function rotate(): Promise<void> {
  const answer = await adminFetch(issuer, '/openid-keys/rotate', { method: 'POST' });
  expect(answer.status).toBe(200);
}

describe('ID token key rotation', () => {
  it('rotates twice while openid-client and jose verify every ID token with their cached key sets: none fails', async () => {
    const config = await oidc.discovery(new URL(issuerUrl), 'festival', SECRET, oidc.ClientSecretBasic(SECRET), { execute: [oidc.allowInsecureRequests] });
    oidc.enableNonRepudiationChecks(config);
    const remoteKeys = createRemoteJWKSet(new URL(`${issuerUrl}/.well-known/jwks.json`));

    // One sign-in; its refresh token carries the grant on.
    const browser = new FormClient(issuerUrl);
    const login = await browser.get(authorizePath({ client_id: 'festival', redirect_uri: REDIRECT_URI, response_type: 'code', scope: 'openid', state: 's' }));
    const consent = await browser.follow(await browser.post('/oauth/authorize/login', { ...formFields(login.text), email: EMAIL, password: PASSWORD }));
    const approved = await browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    let tokens: oidc.TokenEndpointResponse & oidc.TokenEndpointResponseHelpers = await oidc.authorizationCodeGrant(config, new URL(approved.location!), {
      expectedState: 's',
      idTokenExpected: true,
    });

    const kidsInTurn: string[] = [];
    const failures: unknown[] = [];
    let verified = 0;
    const deadline = Date.now() + 200_000;
    await rotate();
    let rotatedAgain = false;
    while (kidsInTurn.length < 3 && Date.now() < deadline) {
      try {
        // openid-client checks the signature with its own cached JWKS (non-repudiation checks on).
        tokens = await oidc.refreshTokenGrant(config, tokens.refresh_token!);
        await jwtVerify(tokens.id_token!, remoteKeys, { issuer: issuerUrl, audience: 'festival' });
        verified += 1;
        const kid = decodeProtectedHeader(tokens.id_token!).kid!;
        if (kidsInTurn.at(-1) !== kid) kidsInTurn.push(kid);
      } catch (error) {
        failures.push(error);
        break;
      }
      // The second rotation once the first new key signs.
      if (kidsInTurn.length === 2 && !rotatedAgain) {
        rotatedAgain = true;
        await rotate();
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    expect(failures).toEqual([]);
    expect(kidsInTurn).toHaveLength(3);
    expect(new Set(kidsInTurn).size).toBe(3);
    expect(verified).toBeGreaterThan(100);
  }, 240_000);
});
