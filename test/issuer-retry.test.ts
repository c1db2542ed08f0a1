import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError, withTokens, type Store, type Tokens } from '../src/store/store.js';
import { tokenDigest } from '../src/token/token-value.js';
import {
  clientCredentials,
  issueAuthorizationCode,
  postForm,
  registerApplication,
  registerUser,
  startTokengate,
  type RunningTokengate,
  type TestApplication,
} from './support/instance.js';

/**
 * docs/issuer.md "Retrying after a 503": a store that answers too late may have done the work
 * all the same. Each case makes one real store call answer late (it runs against Redis, then
 * its caller is told the store failed, as when Redis applies a command after
 * store.commandTimeoutMs) and checks what the documented retry gets.
 */

/** Token store calls that answer late, once each. */
const answerLate = new Set<keyof Tokens>();
/** Digests of the access tokens stored by a call that then answered late: issued, never delivered. */
const undelivered: string[] = [];

function lateOnce(store: Store): Store {
  const tokens = new Proxy(store.tokens, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        const result: unknown = await (value as (...args: unknown[]) => Promise<unknown>).apply(target, args);
        if (!answerLate.delete(key as keyof Tokens)) return result;
        if (key === 'saveAccessToken') undelivered.push(args[0] as string);
        throw new StoreUnavailableError('redis: Command timed out');
      };
    },
  });
  return withTokens(store, tokens);
}

let running: RunningTokengate;
let app: TestApplication;
let userId: string;

beforeAll(async () => {
  running = await startTokengate('issuer-retry', { wrap: lateOnce });
  app = await registerApplication(running.store);
  userId = await registerUser(running.store);
});
afterAll(async () => {
  await running?.close();
});

const tokenEndpoint = (parameters: Record<string, string>) => postForm(`${running.baseUrl}/oauth/token`, { ...parameters, ...clientCredentials(app) });
const revoke = (token: string) => postForm(`${running.baseUrl}/oauth/revoke`, { token, ...clientCredentials(app) });

async function expectUnavailable(response: Response): Promise<void> {
  expect(response.status).toBe(503);
  expect(response.headers.get('retry-after')).toBe('1');
  expect(((await response.json()) as { error: string }).error).toBe('temporarily_unavailable');
}

async function expectInvalidGrant(response: Response): Promise<void> {
  expect(response.status).toBe(400);
  expect(((await response.json()) as { error: string }).error).toBe('invalid_grant');
}

async function codeExchange(): Promise<{ access_token: string; refresh_token: string }> {
  const { code } = await issueAuthorizationCode(running, app, userId);
  const response = await tokenEndpoint({ grant_type: 'authorization_code', code, redirect_uri: app.redirectUri });
  expect(response.status).toBe(200);
  return (await response.json()) as { access_token: string; refresh_token: string };
}

describe('after a 503', () => {
  it('a revocation may have been applied, and retrying it answers 200', async () => {
    const { access_token: token } = await codeExchange();
    answerLate.add('revokeAccessToken');
    await expectUnavailable(await revoke(token));
    expect(await running.store.tokens.getAccessToken(tokenDigest(token))).toBeNull();
    expect((await revoke(token)).status).toBe(200);
  });

  it('a client_credentials request may be retried: nothing was spent', async () => {
    answerLate.add('saveAccessToken');
    await expectUnavailable(await tokenEndpoint({ grant_type: 'client_credentials' }));
    expect((await tokenEndpoint({ grant_type: 'client_credentials' })).status).toBe(200);
  });

  it('a code exchange may have spent the code: the retry answers invalid_grant and revokes what the lost attempt issued', async () => {
    const { code } = await issueAuthorizationCode(running, app, userId);
    const exchange = () => tokenEndpoint({ grant_type: 'authorization_code', code, redirect_uri: app.redirectUri });
    answerLate.add('saveAccessToken');
    await expectUnavailable(await exchange());
    const lost = undelivered.pop()!;
    expect(await running.store.tokens.getAccessToken(lost)).not.toBeNull();

    await expectInvalidGrant(await exchange());
    expect(await running.store.tokens.getAccessToken(lost)).toBeNull();
  });

  it('a refresh may have rotated the refresh token: the retry answers invalid_grant and revokes the whole grant', async () => {
    const tokens = await codeExchange();
    const refresh = () => tokenEndpoint({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token });
    answerLate.add('saveAccessToken');
    await expectUnavailable(await refresh());
    const lost = undelivered.pop()!;
    expect(await running.store.tokens.getAccessToken(tokenDigest(tokens.access_token))).not.toBeNull();

    await expectInvalidGrant(await refresh());
    expect(await running.store.tokens.getAccessToken(lost)).toBeNull();
    expect(await running.store.tokens.getAccessToken(tokenDigest(tokens.access_token))).toBeNull();
  });
});
