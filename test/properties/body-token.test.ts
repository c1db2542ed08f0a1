import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeFormComponent, parameterTaker } from '../../src/http/form.js';
import { takeJsonMember } from '../../src/http/json-member.js';
import { startUpstream, type Upstream } from '../support/gateway.js';
import { exchange } from '../support/ingress.js';
import { startTokengate, type RunningTokengate } from '../support/instance.js';
import { anyText, holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * The token in a form or JSON body (RFC 6750 section 2.2, and JSON beside it) as properties: the
 * `access_token` pairs or members are taken out and nothing else is touched, a lookalike name is
 * noticed, nothing throws; and through a running gateway, a body with one token is forwarded
 * without it, a second token is never read as a credential, and the body limit holds.
 */

const TOKEN = 'access_token';
const takeToken = parameterTaker(TOKEN);
/** Names servers read as access_token although they are spelled otherwise. */
const LOOKALIKES = ['ACCESS_TOKEN', 'Access_Token', 'access_token[]', 'access_token[0]', 'access.token', 'access+token', 'access%20token', '+access_token'];
const formName = fc.constantFrom(TOKEN, TOKEN, 'access%5Ftoken', 'access_toke%6E', 'event', 'a', '', '%zz', 'x%', 'access_tokens', ...LOOKALIKES);
const formValue = fc.oneof(
  fc.constantFrom('', 'mF_9.B5f-4.1JqM', '%zz', '%', '+', 'a%20b', '%E2%82%AC', '%C0%AE', '='),
  fc.string({ maxLength: 12 }).map((text) => encodeURIComponent(text)),
);
const formPair = fc.oneof(
  { weight: 6, arbitrary: fc.tuple(formName, formValue).map(([name, value]) => `${name}=${value}`) },
  { weight: 1, arbitrary: formName },
);
const formBody = fc.array(formPair, { maxLength: 6 }).map((pairs) => pairs.join('&'));

describe('access_token in a form body or query, for any encoded string', () => {
  it(
    'takes exactly the pairs named access_token once decoded, keeps every other pair byte for byte and in order, and notices lookalikes',
    () =>
      holds(
        'body token: form',
        fc.property(formBody, (encoded) => {
          const pairs = encoded.split('&');
          const nameOf = (pair: string) => decodeFormComponent(pair.includes('=') ? pair.slice(0, pair.indexOf('=')) : pair);
          const named = pairs.filter((pair) => nameOf(pair) === TOKEN);
          const others = pairs.filter((pair) => nameOf(pair) !== TOKEN);
          const lookalike = others.some((pair) => LOOKALIKES.some((name) => pair === name || pair.startsWith(`${name}=`)));
          const taken = takeToken(encoded);
          if (named.length === 0 && !lookalike) return taken === null || (taken.values.length === 0 && taken.lookalike);
          expect(taken).not.toBeNull();
          expect(taken!.rest).toBe(others.join('&'));
          expect(taken!.values).toHaveLength(named.length);
          if (lookalike) expect(taken!.lookalike).toBe(true);
          // Where every component decodes, the values are those the WHATWG form parser reads.
          if (pairs.every((pair) => pair.split('=').every((part) => decodeFormComponent(part) !== undefined))) {
            expect(taken!.values).toEqual(new URLSearchParams(encoded).getAll(TOKEN));
          }
          return true;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'notices an access_token (or a lookalike) that servers splitting pairs at ";" as well as "&" would read',
    () =>
      holds(
        'body token: ";" separators',
        fc.property(fc.array(fc.tuple(formPair, fc.constantFrom('&', ';')), { maxLength: 6 }), (parts) => {
          const encoded = parts.map(([pair, separator], index) => `${index === 0 ? '' : separator}${pair}`).join('');
          const nameOf = (pair: string) => decodeFormComponent(pair.includes('=') ? pair.slice(0, pair.indexOf('=')) : pair);
          const whatwg = encoded.split('&').filter((pair) => nameOf(pair) === TOKEN).length;
          const bySemicolon = encoded.split(/[&;]/);
          const smuggled =
            bySemicolon.filter((pair) => nameOf(pair) === TOKEN).length > whatwg ||
            bySemicolon.some((pair) => LOOKALIKES.some((name) => pair === name || pair.startsWith(`${name}=`)));
          if (smuggled) expect(takeToken(encoded)?.lookalike).toBe(true);
          return true;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'never throws, whatever the bytes',
    () =>
      holds(
        'body token: form never throws',
        fc.property(anyText(), (encoded) => {
          const taken = takeToken(encoded);
          return taken === null || typeof taken.rest === 'string';
        }),
        300,
      ),
    PROPERTY_TIMEOUT,
  );
});

/** A JSON member as text: its key in some spelling (escapes included) and its value, kept exactly as written. */
const jsonKey = fc.oneof(
  fc.constantFrom(`"${TOKEN}"`, `"${TOKEN}"`, '"access\\u005ftoken"', '"\\u0061ccess_token"', '"ACCESS_TOKEN"', '"event"', '""', '"a\\"b"', '"\\u00e9"'),
  fc.string({ maxLength: 8 }).map((key) => JSON.stringify(key)),
);
const jsonValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((value) => JSON.stringify(value)),
  fc.constantFrom(
    '"mF_9.B5f-4.1JqM"',
    '123456789012345678901234567890',
    '1e400',
    '-0.0',
    '"\\ud800"',
    '"é"',
    '[[[[[[[[]]]]]]]]',
    '{"access_token":"nested"}',
    'null',
  ),
);
const space = fc.constantFrom('', ' ', '\n', '\t ', '\r\n  ');
const jsonMember = fc
  .tuple(space, jsonKey, space, space, jsonValue, space)
  .map(([a, key, b, c, value, d]) => ({ key, value, text: `${a}${key}${b}:${c}${value}${d}` }));
const jsonObject = fc.tuple(space, fc.array(jsonMember, { maxLength: 6 }), space).map(([before, members, after]) => ({
  members,
  text: `${before}{${members.map((member) => member.text).join(',')}}${after}`,
}));

describe('access_token in a JSON body, for any object and any bytes', () => {
  it(
    'takes every top-level access_token member, however its key is escaped, and forwards every other member as it was written',
    () =>
      holds(
        'body token: JSON',
        fc.property(jsonObject, ({ members, text }) => {
          const isToken = (member: { key: string }) => JSON.parse(member.key) === TOKEN;
          const taken = takeJsonMember(Buffer.from(text), TOKEN);
          if (!members.some(isToken)) return taken === null;
          expect(taken).not.toBe('invalid');
          expect(taken).not.toBeNull();
          const { values, rest } = taken as Exclude<typeof taken, 'invalid' | null>;
          expect(values).toEqual(
            members
              .filter(isToken)
              .map((member) => JSON.parse(member.value) as unknown)
              .map((value) => (typeof value === 'string' ? value : undefined)),
          );
          // The members kept are byte for byte those sent, only the whitespace around them gone.
          expect(rest.toString()).toBe(
            `{${members
              .filter((member) => !isToken(member))
              .map((member) => member.text.trim())
              .join(',')}}`,
          );
          const parsed = JSON.parse(text) as Record<string, unknown>;
          delete parsed[TOKEN];
          expect(JSON.parse(rest.toString())).toEqual(parsed);
          return true;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'says invalid exactly when the bytes are not JSON, and never throws',
    () =>
      holds(
        'body token: JSON never throws',
        fc.property(
          fc.oneof(
            anyText(),
            jsonObject.map(({ text }) => text.slice(0, Math.max(0, text.length - 1))),
            fc.jsonValue().map((value) => JSON.stringify(value) ?? ''),
          ),
          (text) => {
            let json = true;
            try {
              JSON.parse(text);
            } catch {
              json = false;
            }
            const taken = takeJsonMember(Buffer.from(text), TOKEN);
            return json ? taken !== 'invalid' : taken === 'invalid';
          },
        ),
        500,
      ),
    PROPERTY_TIMEOUT,
  );
});

describe('body tokens through a running gateway', () => {
  const BODY_LIMIT = 2_048;
  let upstream: Upstream;
  let gateway: RunningTokengate;
  let valid: string;

  beforeAll(async () => {
    upstream = await startUpstream();
    gateway = await startTokengate('properties-body', {
      config: { server: { bodyLimit: BODY_LIMIT }, routes: [{ path: '/api/tickets', token: 'any', upstream: upstream.url }] },
    });
    valid = await gateway.issue();
  });

  afterAll(async () => {
    await gateway?.close();
    await upstream?.close();
  });

  type Token = 'valid' | 'forged';
  const tokens = fc.array(fc.constantFrom<Token>('valid', 'valid', 'forged'), { maxLength: 2 });
  const request = fc.record({
    type: fc.constantFrom('form', 'json'),
    inBody: fc.oneof(tokens, fc.constant<Token[]>(['valid'])),
    inHeader: fc.boolean(),
    others: fc.array(fc.tuple(fc.constantFrom('event', 'seat', 'note'), fc.string({ maxLength: 16 })), { maxLength: 4 }),
    padding: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 3_000 })),
  });

  it(
    'forwards a body with exactly one valid token without it, every other part untouched; refuses a second token and a body over the limit',
    async () => {
      let forwarded = 0;
      await holds(
        'body token: through the gateway',
        fc.asyncProperty(request, async ({ type, inBody, inHeader, others, padding }) => {
          const forged = `${valid.slice(0, 42)}${valid[42] === 'A' ? 'B' : 'A'}`;
          const value = (token: Token) => (token === 'valid' ? valid : forged);
          const fields: Array<[string, string]> = [...others, ...inBody.map((token): [string, string] => [TOKEN, value(token)]), ['pad', 'p'.repeat(padding)]];
          const body =
            type === 'form'
              ? new URLSearchParams(fields).toString()
              : `{${fields.map(([name, each]) => `${JSON.stringify(name)}:${JSON.stringify(each)}`).join(',')}}`;
          const headers: Array<[string, string]> = [['Content-Type', type === 'form' ? 'application/x-www-form-urlencoded' : 'application/json']];
          if (inHeader) headers.push(['Authorization', `Bearer ${valid}`]);
          const before = upstream.received.length;
          const answer = await exchange(gateway.port, 'POST', '/api/tickets', headers, body);
          const credentials = inBody.length + (inHeader ? 1 : 0);
          const expected =
            Buffer.byteLength(body) > BODY_LIMIT ? 413 : credentials === 0 ? 401 : credentials > 1 ? 400 : inHeader || inBody[0] === 'valid' ? 200 : 401;
          expect({ type, credentials, length: body.length, status: answer.status }).toEqual({ type, credentials, length: body.length, status: expected });
          if (expected !== 200) {
            expect(upstream.received.length).toBe(before);
            return true;
          }
          forwarded += 1;
          const received = upstream.received.at(-1)!.body;
          const kept = fields.filter(([name]) => name !== TOKEN);
          if (type === 'form') expect(received).toBe(new URLSearchParams(kept).toString());
          else expect(JSON.parse(received)).toEqual(Object.fromEntries(kept));
          expect(received).not.toContain(valid);
          return true;
        }),
        100,
      );
      expect(forwarded).toBeGreaterThan(8);
    },
    PROPERTY_TIMEOUT,
  );
});
