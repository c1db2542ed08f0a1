import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APPLICATION_TOKEN, rawRequest, startUpstream, statusOf, type Upstream } from './support/gateway.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';

/**
 * Input that must be refused with a clear 4xx and an RFC error body, with nothing reaching an
 * upstream: smuggling-shaped framing (node's parser refuses it before the gateway runs),
 * oversized heads, and malformed credentials in bodies. Sent byte for byte over a socket.
 */

const MAX_HEADER_SIZE = 4_096;
let userApi: Upstream;
let organizerApi: Upstream;
let gateway: RunningTokengate;
let userToken: string;

beforeAll(async () => {
  [userApi, organizerApi] = await Promise.all([startUpstream(), startUpstream()]);
  gateway = await startTokengate('gateway-bad-input', {
    config: {
      server: { maxHeaderSize: MAX_HEADER_SIZE },
      routes: [
        { path: '/api/public/tickets', token: 'user', upstream: userApi.url },
        { path: '/api/public/uploads', token: 'user', upstream: userApi.url, allowBodyToken: false },
        { path: '/api/public/events', token: 'application', upstream: organizerApi.url },
      ],
    },
  });
  userToken = await gateway.issue();
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all([userApi?.close(), organizerApi?.close()]);
});

function forwardedCount(): number {
  return userApi.received.length + organizerApi.received.length;
}

function bodyOf(answer: string): unknown {
  return JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
}

describe('request smuggling shapes', () => {
  // A user-token request whose framing hides a second request for the organizer API behind it.
  const smuggled = () => `GET /api/public/events HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\r\n\r\n`;
  const head = (framing: string) =>
    `POST /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\r\nContent-Type: application/octet-stream\r\n${framing}\r\n`;
  const shapes: Array<[string, () => string]> = [
    ['Content-Length with Transfer-Encoding', () => `${head('Content-Length: 6\r\nTransfer-Encoding: chunked\r\n')}0\r\n\r\n${smuggled()}`],
    ['Transfer-Encoding before Content-Length', () => `${head('Transfer-Encoding: chunked\r\nContent-Length: 6\r\n')}0\r\n\r\n${smuggled()}`],
    ['two different Content-Lengths', () => `${head('Content-Length: 0\r\nContent-Length: 80\r\n')}${smuggled()}`],
    ['a Content-Length list', () => `${head('Content-Length: 0, 80\r\n')}${smuggled()}`],
    ['chunked not last in Transfer-Encoding', () => `${head('Transfer-Encoding: chunked, identity\r\n')}0\r\n\r\n${smuggled()}`],
    ['an unknown transfer coding', () => `${head('Transfer-Encoding: xchunked\r\n')}0\r\n\r\n${smuggled()}`],
    ['a space before the colon', () => `${head('Transfer-Encoding : chunked\r\n')}0\r\n\r\n${smuggled()}`],
    ['a chunk size that is not hex', () => `${head('Transfer-Encoding: chunked\r\n')}0x0\r\n\r\n${smuggled()}`],
    ['a CR inside a header value', () => `${head('X-Note: a\rTransfer-Encoding: chunked\r\n')}0\r\n\r\n${smuggled()}`],
    ['a negative Content-Length', () => `${head('Content-Length: -1\r\n')}${smuggled()}`],
  ];

  for (const [shape, text] of shapes) {
    it(`refuses ${shape} with 400 and forwards nothing`, async () => {
      const before = forwardedCount();
      const answer = await rawRequest(gateway.port, text());
      expect(statusOf(answer)).toBe(400);
      expect(bodyOf(answer)).toEqual({ error: 'invalid_request', error_description: expect.any(String) });
      expect(answer).toMatch(/\r\ncache-control: no-store\r\n/i);
      // only one response: the smuggled request was never parsed as a request
      expect(answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);
      expect(forwardedCount()).toBe(before);
    });
  }

  it('never forwards the body of a GET, so a request hidden in it goes nowhere', async () => {
    const before = { user: userApi.received.length, organizer: organizerApi.received.length };
    const hidden = smuggled();
    const body = `${hidden.length.toString(16)}\r\n${hidden}\r\n0\r\n\r\n`;
    const answer = await rawRequest(
      gateway.port,
      `GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(statusOf(answer)).toBe(200);
    expect(userApi.received.length - before.user).toBe(1);
    expect(userApi.received.at(-1)!.body).toBe('');
    expect(userApi.received.at(-1)!.headers['transfer-encoding']).toBeUndefined();
    expect(organizerApi.received.length).toBe(before.organizer);
  });
});

describe('oversized and malformed heads', () => {
  it('answers a head larger than server.maxHeaderSize with 431 and forwards nothing', async () => {
    const before = forwardedCount();
    const answer = await rawRequest(
      gateway.port,
      `GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\r\nX-Padding: ${'p'.repeat(MAX_HEADER_SIZE)}\r\n\r\n`,
    );
    expect(statusOf(answer)).toBe(431);
    expect(bodyOf(answer)).toEqual({ error: 'invalid_request', error_description: 'The request headers are too large.' });
    expect(forwardedCount()).toBe(before);
  });

  it('answers a path that is not valid percent-encoded UTF-8 with 400 before routing', async () => {
    for (const path of ['/api/public/tickets/%zz', '/api/public/tickets/%c0%ae', '/api/public/tickets/%']) {
      const answer = await rawRequest(
        gateway.port,
        `GET ${path} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\r\nConnection: close\r\n\r\n`,
      );
      expect(statusOf(answer)).toBe(400);
      expect(bodyOf(answer)).toEqual({ error: 'invalid_request', error_description: 'The request path is not valid percent-encoded UTF-8.' });
      expect(answer).toMatch(/\r\ncache-control: no-store\r\n/i);
    }
  });

  it('answers an Authorization header of a huge made-up token with 401, not a crash or a store call', async () => {
    const answer = await rawRequest(
      gateway.port,
      `GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${'a'.repeat(3_000)}\r\nConnection: close\r\n\r\n`,
    );
    expect(statusOf(answer)).toBe(401);
    expect(bodyOf(answer)).toEqual({ error: 'invalid_token', error_description: 'The access token is invalid, expired or revoked.' });
  });

  it('answers a header value with bytes outside Latin-1 text rules or a bare LF line with 400', async () => {
    const before = forwardedCount();
    for (const text of [
      `GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\x00\r\n\r\n`,
      'GET /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nX-Bad\x7f: 1\r\n\r\n',
      'GET /api/public/tickets HTTP/9.9\r\nHost: gateway.test\r\n\r\n',
    ]) {
      expect(statusOf(await rawRequest(gateway.port, text)), JSON.stringify(text)).toBe(400);
    }
    expect(forwardedCount()).toBe(before);
  });
});

describe('malformed credentials in bodies and queries', () => {
  it('answers a token parameter that does not decode, is empty or is not a string with 400 invalid_request', async () => {
    const before = forwardedCount();
    const cases: Array<[string, string]> = [
      ['application/x-www-form-urlencoded', 'access_token=%zz'],
      ['application/x-www-form-urlencoded', 'access_token='],
      ['application/x-www-form-urlencoded', 'access_token'],
      ['application/json', '{"access_token": 42}'],
      ['application/json', '{"access_token": ""}'],
      ['application/json', '{"access_token": ["a"]}'],
    ];
    for (const [type, body] of cases) {
      const answer = await rawRequest(
        gateway.port,
        `POST /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: ${type}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
      expect({ body, status: statusOf(answer) }).toEqual({ body, status: 400 });
      expect(bodyOf(answer)).toEqual({
        error: 'invalid_request',
        error_description: 'The Authorization header or access_token parameter is not a valid bearer credential.',
      });
    }
    expect(
      statusOf(await rawRequest(gateway.port, 'GET /api/public/tickets?access_token=%zz HTTP/1.1\r\nHost: gateway.test\r\nConnection: close\r\n\r\n')),
    ).toBe(400);
    expect(forwardedCount()).toBe(before);
  });

  it('answers a body whose Content-Length exceeds server.bodyLimit with 413 before reading it', async () => {
    const answer = await rawRequest(
      gateway.port,
      `POST /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: application/json\r\nContent-Length: 99999999\r\n\r\n{`,
    );
    expect(statusOf(answer)).toBe(413);
    expect(bodyOf(answer)).toEqual({ error: 'invalid_request', error_description: 'The request body is too large.' });
    expect(answer).toMatch(/\r\nconnection: close\r\n/i);
  });

  it('keeps an application token and a JSON body with only an access_token working end to end', async () => {
    const token = await gateway.issue(APPLICATION_TOKEN);
    const body = JSON.stringify({ access_token: token });
    const answer = await rawRequest(
      gateway.port,
      `POST /api/public/events HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(statusOf(answer)).toBe(200);
    expect(organizerApi.received.at(-1)!.body).toBe('{}');
    expect(organizerApi.received.at(-1)!.headers['content-length']).toBe('2');
  });
});

describe('bodies and parameters built to hurt', () => {
  const post = (path: string, type: string, body: string) =>
    rawRequest(
      gateway.port,
      `POST ${path} HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: ${type}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );

  it('takes the token out of a JSON body nested thousands deep, forwarding every other byte as sent', async () => {
    const nested = `${'['.repeat(6_000)}${']'.repeat(6_000)}`;
    const answer = await post('/api/public/tickets', 'application/json', `{"access_token":"${userToken}","a":${nested},"n":12345678901234567890}`);
    expect(statusOf(answer)).toBe(200);
    expect(userApi.received.at(-1)!.body).toBe(`{"a":${nested},"n":12345678901234567890}`);
  });

  it('answers 401, not 500, for a deeply nested JSON body with an unknown token', async () => {
    const before = forwardedCount();
    const answer = await post('/api/public/tickets', 'application/json', `{"access_token":"x","a":${'['.repeat(6_000)}${']'.repeat(6_000)}}`);
    expect(statusOf(answer)).toBe(401);
    expect(forwardedCount()).toBe(before);
  });

  it('refuses parameters that frameworks read as access_token although they are spelled otherwise', async () => {
    const before = forwardedCount();
    const get = (query: string) => rawRequest(gateway.port, `GET /api/public/tickets?${query} HTTP/1.1\r\nHost: gateway.test\r\nConnection: close\r\n\r\n`);
    const spellings = [
      'ACCESS_TOKEN=x',
      'Access_Token=x',
      'access_token[]=x',
      'access_token%5B%5D=x',
      'access_token[0]=x',
      'access.token=x',
      'access%20token=x',
    ];
    for (const spelling of spellings) {
      const answer = await get(`${spelling}&access_token=${userToken}`);
      expect({ spelling, status: statusOf(answer) }).toEqual({ spelling, status: 400 });
      expect(bodyOf(answer)).toMatchObject({ error: 'invalid_request' });
    }
    const form = await post('/api/public/tickets', 'application/x-www-form-urlencoded', `ACCESS_TOKEN=x&access_token=${userToken}`);
    expect(statusOf(form)).toBe(400);
    expect(forwardedCount()).toBe(before);
  });

  it('refuses an access_token behind a ";", which Rack 2, older Python and Go read as a separator, in the query and in a form body', async () => {
    const before = forwardedCount();
    const withHeader = (request: string) => request.replace('\r\n', `\r\nAuthorization: Bearer ${userToken}\r\n`);
    for (const query of ['a=1;access_token=x', 'access_token;a=1', 'a=1;ACCESS_TOKEN=x', 'a=1&b=2;%20access_token=x']) {
      const answer = await rawRequest(
        gateway.port,
        withHeader(`POST /api/public/tickets?${query} HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`),
      );
      expect({ query, status: statusOf(answer) }).toEqual({ query, status: 400 });
      expect(bodyOf(answer)).toMatchObject({ error: 'invalid_request', error_description: expect.stringContaining('access_token') });
    }
    const body = 'event=7;access_token=x';
    const form = await rawRequest(
      gateway.port,
      withHeader(
        `POST /api/public/tickets HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      ),
    );
    expect(statusOf(form)).toBe(400);
    expect(forwardedCount()).toBe(before);
    // A ";" inside a value the WHATWG rules read whole is no token: forwarded as sent.
    const plain = await post('/api/public/tickets', 'application/x-www-form-urlencoded', `note=a;b&access_token=${userToken}`);
    expect(statusOf(plain)).toBe(200);
    expect(userApi.received.at(-1)!.body).toBe('note=a;b');
  });

  it('refuses a multipart body on a route that reads tokens from bodies, and streams it where bodies are not read', async () => {
    const before = forwardedCount();
    const boundary = 'tokengate-boundary';
    const multipart = `--${boundary}\r\nContent-Disposition: form-data; name="access_token"\r\n\r\nsmuggled\r\n--${boundary}--\r\n`;
    const send = (path: string) =>
      rawRequest(
        gateway.port,
        `POST ${path} HTTP/1.1\r\nHost: gateway.test\r\nAuthorization: Bearer ${userToken}\r\nContent-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${multipart.length}\r\nConnection: close\r\n\r\n${multipart}`,
      );
    const refused = await send('/api/public/tickets');
    expect(statusOf(refused)).toBe(400);
    expect(bodyOf(refused)).toMatchObject({ error: 'invalid_request', error_description: expect.stringContaining('multipart/form-data') });
    expect(forwardedCount()).toBe(before);
    const streamed = await send('/api/public/uploads');
    expect(statusOf(streamed)).toBe(200);
    expect(userApi.received.at(-1)!.body).toBe(multipart);
  });
});
