import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loggerOptions, redactUrl } from '../src/observability/logger.js';
import { s256CodeChallenge } from '../src/issuer/pkce.js';
import {
  basicAuthorization,
  issueAuthorizationCode,
  postForm,
  registerApplication,
  registerUser,
  startTokengate,
  type RunningTokengate,
} from './support/instance.js';

/** Every secret a flow handles, and the log of the instance that handled them at the most verbose level. */
const lines: string[] = [];
let running: RunningTokengate;

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  running = await startTokengate('issuer-logs', { logger: pino(loggerOptions('trace'), sink) });
});
afterAll(async () => {
  await running.close();
});

it('keeps secrets out of the log, on success and on every kind of refusal', async () => {
  const secrets: string[] = [];
  const token = `${running.baseUrl}/oauth/token`;
  const app = await registerApplication(running.store);
  const other = await registerApplication(running.store, { redirectUri: app.redirectUri });
  const userId = await registerUser(running.store);
  secrets.push(app.clientSecret!, other.clientSecret!);

  const verifier = randomBytes(32).toString('base64url');
  const { code } = await issueAuthorizationCode(running, app, userId, { codeChallenge: s256CodeChallenge(verifier), codeChallengeMethod: 'S256' });
  const wrongVerifier = randomBytes(32).toString('base64url');
  const wrongSecret = `wrong-${randomBytes(16).toString('hex')}`;
  secrets.push(code, verifier, wrongVerifier, wrongSecret);

  const exchanged = (await (
    await postForm(token, {
      grant_type: 'authorization_code',
      code,
      code_verifier: verifier,
      redirect_uri: app.redirectUri,
      client_id: app.clientId,
      client_secret: app.clientSecret,
    })
  ).json()) as { access_token: string; refresh_token: string };
  secrets.push(exchanged.access_token, exchanged.refresh_token);
  const refused = [
    // replay, which revokes the family and logs a warning
    await postForm(token, {
      grant_type: 'authorization_code',
      code,
      code_verifier: verifier,
      redirect_uri: app.redirectUri,
      client_id: app.clientId,
      client_secret: app.clientSecret,
    }),
    await postForm(token, { grant_type: 'client_credentials', client_id: app.clientId, client_secret: wrongSecret }),
    // swapped parameters: the secret arrives as the client id
    await postForm(token, { grant_type: 'client_credentials', client_id: app.clientSecret, client_secret: app.clientId }),
    await postForm(token, { grant_type: 'client_credentials' }, { authorization: basicAuthorization(app.clientId, wrongSecret) }),
    await postForm(`${token}?client_secret=${wrongSecret}&code=${code}`, { grant_type: 'client_credentials' }),
    await postForm(token, {
      grant_type: 'refresh_token',
      refresh_token: exchanged.refresh_token,
      client_id: other.clientId,
      client_secret: other.clientSecret,
    }),
    await postForm(token, {
      grant_type: 'authorization_code',
      code: exchanged.access_token,
      code_verifier: wrongVerifier,
      redirect_uri: app.redirectUri,
      client_id: app.clientId,
      client_secret: app.clientSecret,
    }),
    await fetch(token, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"client_secret":"${wrongSecret}",` }),
    await fetch(`${running.baseUrl}/oauth/token/info`, { headers: { authorization: `Bearer ${exchanged.access_token}` } }),
  ];
  expect(refused.map((response) => response.status)).toEqual([400, 401, 401, 401, 400, 400, 400, 400, 401]);
  await postForm(`${running.baseUrl}/oauth/revoke`, { token: exchanged.refresh_token, client_id: app.clientId, client_secret: app.clientSecret });

  // The log is not empty: refusals and the replay are there, with their reasons.
  const log = lines.join('\n');
  expect(log).toContain('request refused');
  expect(log).toContain('authorization code replayed: token family revoked');
  expect(log).toContain('wrong client secret');
  for (const secret of secrets) expect(log, 'a secret reached the log').not.toContain(secret);
});

it("keeps OpenID Connect's secrets out of the log: the id_token_hint, the login_hint's address, the ID token", async () => {
  const openidLines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      openidLines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const openid = await startTokengate('issuer-logs-openid', {
    logger: pino(loggerOptions('trace'), sink),
    config: { openidConnect: { enabled: true }, logging: { requests: 'all' } },
  });
  try {
    const app = await registerApplication(openid.store, { scopes: ['openid', 'email'] });
    const now = Math.floor(Date.now() / 1000);
    const hint = await openid.tokengate.context.openid!.sign(
      { iss: openid.tokengate.context.openid!.issuer, sub: 'user-1', aud: app.clientId, iat: now, exp: now + 60 },
      'RS256',
      'JWT',
    );
    const address = `hinted-${randomBytes(4).toString('hex')}@example.com`;
    const query = new URLSearchParams({
      client_id: app.clientId,
      redirect_uri: app.redirectUri,
      response_type: 'code',
      scope: 'openid',
      id_token_hint: hint,
      login_hint: address,
    });
    expect((await fetch(`${openid.baseUrl}/oauth/authorize?${query.toString()}`)).status).toBe(200);
    // Refused (an unknown application): the refusal's log line carries the request's URL.
    query.set('client_id', 'no-such-application');
    expect((await fetch(`${openid.baseUrl}/oauth/authorize?${query.toString()}`)).status).toBe(400);
    const log = openidLines.join('\n');
    expect(log).toContain('/oauth/authorize');
    // Where a log line names a request URL, these parameters are redacted.
    expect(redactUrl(`/oauth/authorize?${query.toString()}`)).toBe(
      `/oauth/authorize?${query.toString().replace(/(id_token_hint|login_hint)=[^&]*/g, '$1=[REDACTED]')}`,
    );
    expect(redactUrl(`/oauth/authorize?${query.toString()}`)).not.toContain(hint.split('.')[2]);
    expect(log, 'the id_token_hint reached the log').not.toContain(hint.split('.')[2]);
    expect(log, 'the login_hint reached the log').not.toContain(address);
  } finally {
    await openid.close();
  }
});
