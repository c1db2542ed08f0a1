import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isBearerToken, MALFORMED_BEARER, parseBearer, parseDpopAuthorization } from '../../src/http/bearer.js';
import { startUpstream, type Upstream } from '../support/gateway.js';
import { exchange } from '../support/ingress.js';
import { startTokengate, type RunningTokengate } from '../support/instance.js';
import { anyText, holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * The `Authorization` header (RFC 6750 section 2.1, RFC 9449 section 7.1) as properties: Bearer
 * and DPoP in any letter case and spacing, other schemes, extra credentials after the token. A
 * header yields one credential or a refusal, never two; and through a running gateway, a request
 * reaches the upstream only with exactly one credential, which the upstream never sees.
 */

const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;
const schemes = fc.constantFrom('Bearer', 'bearer', 'BEARER', 'bEaReR', 'DPoP', 'dpop', 'DPOP', 'Basic', 'Digest', 'Bearer-ish', 'Token', '');
const separators = fc.constantFrom(' ', '  ', '\t', ' \t', '', '   ');
const extras = fc.constantFrom('', '', '', ', Basic dXNlcjpwYXNz', ' second-token', ',', ' ', '=', ', Bearer other');
/** Characters of a header value as a client can send them: visible ASCII, space and tab. */
const headerText = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)), maxLength: 24 });

/** What RFC 6750 section 2.1 and RFC 9449 section 7.1 make of a header value, written from the grammar. */
function grammarOf(value: string): { scheme: 'bearer' | 'dpop'; token: string } | 'malformed' | 'other scheme' {
  const space = value.search(/[ \t]/);
  const name = (space === -1 ? value : value.slice(0, space)).toLowerCase();
  if (value === '') return 'malformed';
  if (name !== 'bearer' && name !== 'dpop') return 'other scheme';
  const rest = value.slice(name.length);
  const token = rest.replace(/^ +/, '');
  if (token === rest || !B64TOKEN.test(token)) return 'malformed';
  return { scheme: name, token };
}

describe('the Authorization header, for any value', () => {
  const value = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.tuple(schemes, separators, fc.oneof(fc.constant('mF_9.B5f-4.1JqM'), headerText, anyText(8)), extras).map((parts) => parts.join('')),
    },
    { weight: 1, arbitrary: anyText() },
  );

  it(
    'gives the token of a header that is the scheme, spaces and one b64token; a refusal for a broken one; nothing for another scheme',
    () =>
      holds(
        'authorization: grammar',
        fc.property(value, (header) => {
          const expected = grammarOf(header);
          const bearer = parseBearer(header);
          const dpop = parseDpopAuthorization(header);
          if (expected === 'other scheme') return bearer === null && dpop === null;
          if (expected === 'malformed') return bearer === MALFORMED_BEARER || (bearer === null && dpop === MALFORMED_BEARER);
          const token = expected.scheme === 'bearer' ? bearer : dpop;
          return token === expected.token && isBearerToken(token);
        }),
        2_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'never yields two credentials: the Bearer and DPoP parsers never both give a token, and a token never holds a separator',
    () =>
      holds(
        'authorization: one credential',
        fc.property(value, (header) => {
          const bearer = parseBearer(header);
          const dpop = bearer === null ? parseDpopAuthorization(header) : null;
          const tokens = [bearer, dpop].filter((token): token is string => typeof token === 'string');
          return tokens.length <= 1 && tokens.every((token) => !/[ \t,]/.test(token));
        }),
        2_000,
      ),
    PROPERTY_TIMEOUT,
  );
});

describe('credentials through a running gateway, for any set of Authorization and DPoP headers and query tokens', () => {
  let upstream: Upstream;
  let gateway: RunningTokengate;
  let valid: string;

  beforeAll(async () => {
    upstream = await startUpstream();
    gateway = await startTokengate('properties-authorization', { config: { routes: [{ path: '/api/either', token: 'any', upstream: upstream.url }] } });
    valid = await gateway.issue();
  });

  afterAll(async () => {
    await gateway?.close();
    await upstream?.close();
  });

  type Credential = 'valid' | 'forged' | 'garbage' | 'empty';
  const credential = fc.constantFrom<Credential>('valid', 'valid', 'forged', 'garbage', 'empty');
  interface Header {
    scheme: string;
    separator: string;
    credential: Credential;
    extra: string;
  }
  const header: fc.Arbitrary<Header> = fc.record({ scheme: schemes, separator: separators, credential, extra: extras });
  // One well-formed Bearer header now and then, so that a good share of requests deserve forwarding.
  const wellFormed: fc.Arbitrary<Header> = fc.record({
    scheme: fc.constantFrom('Bearer', 'bearer', 'BEARER'),
    separator: fc.constantFrom(' ', '  '),
    credential,
    extra: fc.constant(''),
  });
  const request = fc.record({
    authorization: fc.oneof(
      fc.array(header, { maxLength: 2 }),
      wellFormed.map((each) => [each]),
    ),
    dpop: fc.array(fc.constantFrom('eyJhbGciOiJFUzI1NiJ9.e30.sig', 'not a proof'), { maxLength: 2 }),
    query: fc.oneof(fc.constant<Credential[]>([]), fc.array(credential, { maxLength: 2 })),
  });

  /** The status RFC 6750 and RFC 9449 give the request, worked out from what was sent. */
  function expectedStatus(sent: { authorization: string[]; query: string[] }, tokenOf: (value: string) => Credential): number {
    if (sent.authorization.length > 1) return 400;
    const fromHeader = sent.authorization.length === 1 ? grammarOf(sent.authorization[0]!) : 'other scheme';
    if (fromHeader === 'malformed') return 400;
    const presented = (fromHeader === 'other scheme' ? 0 : 1) + sent.query.length;
    if (presented > 1) return 400;
    if (presented === 0) return 401;
    if (sent.query.length === 1) return sent.query[0] === '' ? 400 : tokenOf(sent.query[0]!) === 'valid' ? 200 : 401;
    const { scheme, token } = fromHeader as { scheme: 'bearer' | 'dpop'; token: string };
    // A valid token that is not DPoP-bound, sent as DPoP: refused (dpop_unbound_token).
    return scheme === 'bearer' && tokenOf(token) === 'valid' ? 200 : 401;
  }

  it(
    'forwards exactly the requests with one valid Bearer credential, without it; refuses the others with their RFC error',
    async () => {
      let forwarded = 0;
      await holds(
        'authorization: through the gateway',
        fc.asyncProperty(request, async (sent) => {
          const values: Record<Credential, string> = { valid, forged: `${valid.slice(0, 42)}${valid[42] === 'A' ? 'B' : 'A'}`, garbage: 'x-y-z', empty: '' };
          const tokenOf = (value: string): Credential => (value === valid ? 'valid' : value === values.forged ? 'forged' : 'garbage');
          // Node drops the whitespace around a field value (RFC 9110 section 5.5): so does the expectation.
          const authorization = sent.authorization.map((each) => `${each.scheme}${each.separator}${values[each.credential]}${each.extra}`.trim());
          const query = sent.query.map((each) => values[each]);
          const target = `/api/either/x${query.length === 0 ? '' : `?${query.map((each) => `access_token=${each}`).join('&')}`}`;
          const before = upstream.received.length;
          const answer = await exchange(gateway.port, 'GET', target, [
            ...authorization.map((each) => ['Authorization', each] as const),
            ...sent.dpop.map((each) => ['DPoP', each] as const),
          ]);
          const status = expectedStatus({ authorization, query }, tokenOf);
          expect({ authorization, query, status: answer.status }).toEqual({ authorization, query, status });
          if (status !== 200) {
            expect(upstream.received.length).toBe(before);
            expect(JSON.parse(answer.body)).toEqual({ error: expect.stringMatching(/^invalid_(request|token)$/), error_description: expect.any(String) });
            if (status === 401) expect(answer.header('www-authenticate')).toMatch(/^(Bearer|DPoP) realm=/);
            return true;
          }
          forwarded += 1;
          const received = upstream.received.at(-1)!;
          expect(received.headers.authorization).toBeUndefined();
          expect(received.headers.dpop).toBeUndefined();
          expect(received.url).toBe('/api/either/x');
          return true;
        }),
        120,
      );
      expect(forwarded).toBeGreaterThan(10);
    },
    PROPERTY_TIMEOUT,
  );
});
