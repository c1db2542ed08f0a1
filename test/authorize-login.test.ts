import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenDigest } from '../src/token/token-value.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';
import { rawRedis } from './support/redis.js';
import { FormClient, application, authorizePath, createUser, formFields, type PageResponse } from './support/issuer.js';

/**
 * Signing in on the authorization page: the login throttle (shared through the store by every
 * sidecar) and the two user sources, the HTTP one against a real HTTP server.
 */

const REDIRECT_URI = 'https://app.example/cb';
const AUTHORIZE = authorizePath({ client_id: 'box-office', redirect_uri: REDIRECT_URI, response_type: 'code', state: 's' });

async function attemptLogin(client: FormClient, email: string, password: string): Promise<PageResponse> {
  const login = await client.get(AUTHORIZE);
  expect(login.status).toBe(200);
  return client.post('/oauth/authorize/login', { ...formFields(login.text), email, password });
}

function from(issuer: RunningTokengate, address: string): FormClient {
  return new FormClient(issuer.baseUrl, { 'x-forwarded-for': address });
}

function expectIncorrect(response: PageResponse): void {
  expect(response.status).toBe(200);
  expect(response.text).toContain('The e-mail or password is incorrect.');
}

function expectThrottled(response: PageResponse): void {
  expect(response.status).toBe(429);
  expect(response.location).toBeNull();
  expect(response.text).toContain('Too many sign-in attempts');
  expect(response.text).not.toContain('incorrect');
}

describe('login throttle', () => {
  let issuer: RunningTokengate;
  let sidecar: RunningTokengate;
  // Each attempt costs a scrypt run (the test mode's N: docs/issuer.md#password-hashes), and the spawned processes more on a loaded machine.
  const SIGN_IN_TIMEOUT = 90_000;

  beforeAll(async () => {
    const settings = {
      server: { trustProxy: ['loopback'] },
      issuer: { loginThrottle: { maxAttemptsPerAccount: 3, maxAttemptsPerAddress: 5, windowSeconds: 600 } },
    };
    issuer = await startTokengate('throttle', { config: settings });
    // A second sidecar on the same store: the counts are shared.
    sidecar = await startTokengate('throttle-sidecar', { sharing: issuer, config: settings });
    await issuer.store.applications.put(application());
    await Promise.all([
      createUser(issuer.store, 'user-a', 'a@example.com', 'password-a'),
      createUser(issuer.store, 'user-b', 'b@example.com', 'password-b'),
      createUser(issuer.store, 'user-c', 'c@example.com', 'password-c'),
    ]);
  });

  afterAll(async () => {
    await sidecar?.close();
    await issuer?.close();
  });

  it(
    'per account: after the limit even the right password gets 429, from any address and any sidecar',
    async () => {
      for (const address of ['10.1.0.1', '10.1.0.2', '10.1.0.3']) expectIncorrect(await attemptLogin(from(issuer, address), 'a@example.com', 'wrong'));
      expectThrottled(await attemptLogin(from(issuer, '10.1.0.4'), 'a@example.com', 'password-a'));
      expectThrottled(await attemptLogin(from(issuer, '10.1.0.5'), 'A@Example.com', 'password-a'));
      expectThrottled(await attemptLogin(from(sidecar, '10.1.0.6'), 'a@example.com', 'password-a'));
    },
    SIGN_IN_TIMEOUT,
  );

  it(
    "per account: a successful login clears the account's count",
    async () => {
      const client = from(issuer, '10.2.0.1');
      for (let attempt = 0; attempt < 2; attempt += 1) expectIncorrect(await attemptLogin(client, 'b@example.com', 'wrong'));
      expect((await attemptLogin(client, 'b@example.com', 'password-b')).status).toBe(303);
      const fresh = from(issuer, '10.2.0.2');
      for (let attempt = 0; attempt < 3; attempt += 1) expectIncorrect(await attemptLogin(fresh, 'b@example.com', 'wrong'));
      expectThrottled(await attemptLogin(fresh, 'b@example.com', 'wrong'));
    },
    SIGN_IN_TIMEOUT,
  );

  it(
    'per address: failures with many e-mails from one address throttle that address only',
    async () => {
      const address = '10.3.0.1';
      for (let attempt = 0; attempt < 5; attempt += 1) expectIncorrect(await attemptLogin(from(issuer, address), `guess-${attempt}@example.com`, 'wrong'));
      expectThrottled(await attemptLogin(from(issuer, address), 'c@example.com', 'password-c'));
      expectThrottled(await attemptLogin(from(sidecar, address), 'c@example.com', 'password-c'));
      expect((await attemptLogin(from(issuer, '10.3.0.2'), 'c@example.com', 'password-c')).status).toBe(303);
    },
    SIGN_IN_TIMEOUT,
  );

  it(
    "per address: successful logins do not use up the address's allowance (a shared office address keeps working)",
    async () => {
      const address = '10.4.0.1';
      for (let attempt = 0; attempt < 7; attempt += 1) expect((await attemptLogin(from(issuer, address), 'c@example.com', 'password-c')).status).toBe(303);
    },
    SIGN_IN_TIMEOUT,
  );

  it('keeps the counts in the store under digests, never under the e-mail', async () => {
    const raw = rawRedis();
    const keys = await raw.keys(`${issuer.prefix}counter:*`).finally(() => raw.disconnect());
    expect(keys).toContain(`${issuer.prefix}counter:login-account:${tokenDigest('a@example.com')}`);
    expect(keys).toContain(`${issuer.prefix}counter:login-address:10.3.0.1`);
    expect(keys.some((key) => key.includes('@'))).toBe(false);
  });
});

describe('login throttle: which address counts', () => {
  // The documented default: 20 failed sign-ins per address in the window, then 429.
  const PER_ADDRESS = 20;
  let direct: RunningTokengate;
  let behindProxy: RunningTokengate;

  beforeAll(async () => {
    // Clients reach it straight: X-Forwarded-For is what they wrote, never their address.
    direct = await startTokengate('throttle-direct', { config: { server: { trustProxy: ['192.0.2.0/24'] } } });
    // A proxy on the loopback appends each client's address: the address is the one it wrote.
    behindProxy = await startTokengate('throttle-proxied', { config: { server: { trustProxy: ['loopback'] } } });
    for (const running of [direct, behindProxy]) await running.store.applications.put(application());
  });

  afterAll(async () => {
    await direct?.close();
    await behindProxy?.close();
  });

  /** 25 failed sign-ins, each for another account, the n-th with the X-Forwarded-For `forwardedFor(n)`: the statuses. */
  async function failures(running: RunningTokengate, forwardedFor: (attempt: number) => string): Promise<number[]> {
    const statuses: number[] = [];
    for (let attempt = 1; attempt <= PER_ADDRESS + 5; attempt += 1) {
      const response = await attemptLogin(from(running, forwardedFor(attempt)), `guess-${attempt}@example.com`, 'wrong');
      statuses.push(response.status);
    }
    return statuses;
  }

  it('counts the connection, not the X-Forwarded-For a client writes: another address in it each time is throttled after 20 all the same', async () => {
    const statuses = await failures(direct, (attempt) => `198.51.100.${attempt}`);
    expect(statuses).toEqual([...Array<number>(PER_ADDRESS).fill(200), 429, 429, 429, 429, 429]);
  }, 180_000);

  it('counts an IPv6 client by its /64: 25 addresses of one network, named by a trusted proxy, are throttled after 20', async () => {
    const statuses = await failures(behindProxy, (attempt) => `2001:db8:7:1:${attempt.toString(16)}::${attempt}`);
    expect(statuses).toEqual([...Array<number>(PER_ADDRESS).fill(200), 429, 429, 429, 429, 429]);
    // Another /64 is another client.
    expectIncorrect(await attemptLogin(from(behindProxy, '2001:db8:7:2::1'), 'other@example.com', 'wrong'));
  }, 180_000);
});

/** The ticketing service's credential check, as a real HTTP server: behaviour chosen by e-mail. */
interface UserService {
  server: Server;
  url: string;
  calls: Array<{ contentType: string | undefined; body: unknown }>;
}

async function startUserService(): Promise<UserService> {
  const calls: UserService['calls'] = [];
  const server = createServer(async (request: IncomingMessage, response) => {
    let text = '';
    for await (const chunk of request) text += chunk;
    const body = JSON.parse(text) as { email: string; password: string };
    calls.push({ contentType: request.headers['content-type'], body });
    const answer = (status: number, payload: string) => response.writeHead(status, { 'content-type': 'application/json' }).end(payload);
    const user = body.email.split('@')[0];
    if (user === 'slow') return; // never answers
    if (body.password !== 'right') return answer(401, '{"error":"invalid"}');
    switch (user) {
      case 'number':
        return answer(200, '{"id": 42}');
      case 'string':
        return answer(200, '{"id": "u-7", "name": "String"}');
      case 'forbidden':
        return answer(403, '{}');
      case 'missing':
        return answer(404, '{}');
      case 'broken':
        return answer(500, '{"error":"boom"}');
      case 'unavailable':
        return answer(503, '{}');
      case 'noid':
        return answer(200, '{}');
      case 'emptyid':
        return answer(200, '{"id": ""}');
      case 'objectid':
        return answer(200, '{"id": {"x": 1}}');
      case 'notjson':
        return answer(200, 'welcome!');
      case 'redirect':
        return response.writeHead(302, { location: 'http://127.0.0.1:1/' }).end();
      default:
        return answer(401, '{}');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/credentials`, calls };
}

async function stopServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

describe('http user source', () => {
  let users: UserService;
  let issuer: RunningTokengate;

  beforeAll(async () => {
    users = await startUserService();
    issuer = await startTokengate('http-users', {
      config: {
        server: { trustProxy: ['loopback'] },
        issuer: {
          users: { source: 'http', url: users.url, timeoutMs: 300 },
          loginThrottle: { maxAttemptsPerAccount: 2, maxAttemptsPerAddress: 100, windowSeconds: 60 },
        },
      },
    });
    await issuer.store.applications.put(application());
  });

  afterAll(async () => {
    await issuer?.close();
    if (users) await stopServer(users.server);
  });

  let nextAddress = 0;
  const client = () => from(issuer, `10.9.0.${(nextAddress += 1)}`);

  async function signedInUserId(email: string): Promise<string> {
    const browser = client();
    const signedIn = await attemptLogin(browser, email, 'right');
    expect(signedIn.status).toBe(303);
    const consent = await browser.follow(signedIn);
    const approved = await browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
    const code = new URL(approved.location!).searchParams.get('code')!;
    return (await issuer.store.codes.consume(tokenDigest(code)))!.record.userId;
  }

  it('posts the e-mail and password as JSON; 200 with a numeric or string id signs that user in', async () => {
    expect(await signedInUserId('number@example.com')).toBe('42');
    expect(users.calls.at(-1)).toEqual({ contentType: 'application/json', body: { email: 'number@example.com', password: 'right' } });
    expect(await signedInUserId('string@example.com')).toBe('u-7');
  });

  it.each([
    ['401', 'string@example.com', 'wrong'],
    ['403', 'forbidden@example.com', 'right'],
    ['404', 'missing@example.com', 'right'],
  ])('%s means wrong credentials: the form again with the generic message', async (_status, email, password) => {
    expectIncorrect(await attemptLogin(client(), email, password));
  });

  it.each([
    ['a 500', 'broken@example.com'],
    ['a 503', 'unavailable@example.com'],
    ['a 200 without an id', 'noid@example.com'],
    ['a 200 with an empty id', 'emptyid@example.com'],
    ['a 200 with an id that is not a string or number', 'objectid@example.com'],
    ['a 200 that is not JSON', 'notjson@example.com'],
    ['a redirect', 'redirect@example.com'],
    ['no answer within timeoutMs', 'slow@example.com'],
  ])('%s is "sign-in is temporarily unavailable" (503), never "wrong password"', async (_case, email) => {
    const response = await attemptLogin(client(), email, 'right');
    expect(response.status).toBe(503);
    expect(response.text).toContain('Sign-in is temporarily unavailable');
    expect(response.text).not.toContain('incorrect');
  });

  it('an unreachable user service is "temporarily unavailable" too', async () => {
    const gone = await startUserService();
    await stopServer(gone.server);
    const other = await startTokengate('http-users-gone', {
      sharing: issuer,
      config: { issuer: { users: { source: 'http', url: gone.url, timeoutMs: 300 } } },
    });
    try {
      const response = await attemptLogin(new FormClient(other.baseUrl), 'string@example.com', 'right');
      expect(response.status).toBe(503);
      expect(response.text).toContain('Sign-in is temporarily unavailable');
    } finally {
      await other.close();
    }
  });

  it('attempts the service could not judge do not count against the account', async () => {
    for (let attempt = 0; attempt < 4; attempt += 1) expect((await attemptLogin(client(), 'broken@example.com', 'right')).status).toBe(503);
  });

  it('over the limit, the password is not even checked: the user service hears nothing more', async () => {
    for (let attempt = 0; attempt < 2; attempt += 1) expectIncorrect(await attemptLogin(client(), 'number@example.com', 'wrong'));
    const callsBefore = users.calls.length;
    expectThrottled(await attemptLogin(client(), 'number@example.com', 'right'));
    expectThrottled(await attemptLogin(client(), 'number@example.com', 'wrong'));
    expect(users.calls.length).toBe(callsBefore);
  });
});
