import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redirectUriProblem } from '../../src/http/redirect-uri.js';
import { TokengateError } from '../../src/errors.js';
import { redirectUriWith } from '../../src/issuer/authorize/request.js';
import { isWellFormedCodeVerifier, s256CodeChallenge, verifyCodeVerifier } from '../../src/issuer/pkce.js';
import type { AuthorizationCodeRecord } from '../../src/store/store.js';
import { registerApplication, startTokengate, type RunningTokengate, type TestApplication } from '../support/instance.js';
import { anyText, holds, PROPERTY_TIMEOUT, unicodeCharacter } from '../support/properties.js';

/**
 * The issuer's comparisons as properties: a redirect URI is trusted only as registered,
 * character for character (RFC 9700 section 2.1), and the parameters added to it come back to
 * the application exactly; a PKCE verifier (RFC 7636) passes only for its own challenge.
 */

const VERIFIER_CHARACTERS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~';
const verifier = fc.string({ unit: fc.constantFrom(...VERIFIER_CHARACTERS), minLength: 43, maxLength: 128 });
const anyVerifier = fc.oneof(verifier, fc.string({ minLength: 40, maxLength: 130 }), anyText(130));

function codeWith(challenge: string | null): AuthorizationCodeRecord {
  return {
    clientId: 'c',
    userId: 'u',
    redirectUri: 'https://app.example/cb',
    scopes: ['public'],
    codeChallenge: challenge,
    codeChallengeMethod: challenge === null ? null : 'S256',
    familyId: 'f',
    issuedAt: 0,
    expiresAt: 1,
  };
}

function refusal(check: () => void): string | null {
  try {
    check();
    return null;
  } catch (error) {
    if (error instanceof TokengateError) return error.code;
    throw error;
  }
}

describe('PKCE, for any verifier', () => {
  it(
    'takes as well formed exactly 43 to 128 unreserved characters, and passes a verifier only against its own S256 challenge',
    () =>
      holds(
        'pkce: verifier',
        fc.property(anyVerifier, verifier, (presented, original) => {
          const wellFormed = presented.length >= 43 && presented.length <= 128 && [...presented].every((character) => VERIFIER_CHARACTERS.includes(character));
          expect(isWellFormedCodeVerifier(presented)).toBe(wellFormed);
          const challenge = s256CodeChallenge(original);
          expect(challenge).toBe(createHash('sha256').update(original).digest('base64url'));
          expect(refusal(() => verifyCodeVerifier(codeWith(challenge), original, true))).toBeNull();
          expect(refusal(() => verifyCodeVerifier(codeWith(challenge), presented, true))).toBe(presented === original ? null : 'INVALID_GRANT');
          // No downgrade: a verifier for a code without a challenge, or a public client's code without one.
          expect(refusal(() => verifyCodeVerifier(codeWith(null), presented, false))).toBe('INVALID_GRANT');
          expect(refusal(() => verifyCodeVerifier(codeWith(null), undefined, true))).toBe('INVALID_GRANT');
          return true;
        }),
        300,
      ),
    PROPERTY_TIMEOUT,
  );
});

/** Redirect URIs an operator can register: https anywhere, http on the loopback, with a path and a query of their own. */
const registrable = fc
  .tuple(
    fc.oneof(
      fc.webUrl({ validSchemes: ['https'], withQueryParameters: true }),
      fc.constantFrom('http://localhost:3000/callback', 'http://127.0.0.1:9999/cb?x=1'),
    ),
    fc.constantFrom('', '?', '?a=1&', '?tenant=a%20b'),
  )
  .map(([url, tail]) => (url.includes('?') || tail === '' ? url : `${url}${tail}`))
  .filter((url) => redirectUriProblem(url) === null);

describe('redirect URIs, for any registered URI and any parameters', () => {
  it(
    'adds the parameters to the registered URI so that the application reads back exactly what was sent, its own query kept as registered',
    () =>
      holds(
        'redirect: parameters come back',
        fc.property(
          registrable,
          fc.dictionary(fc.constantFrom('code', 'state', 'error', 'error_description', 'iss'), fc.string({ unit: unicodeCharacter, maxLength: 20 })),
          (registered, parameters) => {
            const location = redirectUriWith(registered, parameters);
            expect(location.startsWith(registered.endsWith('?') || registered.endsWith('&') ? registered : registered.split('?')[0]!)).toBe(true);
            const received = new URL(location).searchParams;
            for (const [name, value] of Object.entries(parameters)) expect(received.getAll(name).at(-1)).toBe(value);
            for (const [name, value] of new URL(registered).searchParams) expect(received.getAll(name)).toContain(value);
            return true;
          },
        ),
        500,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'checks any string an operator registers without throwing',
    () =>
      holds(
        'redirect: registration check',
        fc.property(
          fc.oneof(anyText(), fc.webUrl({ withFragments: true, withQueryParameters: true, authoritySettings: { withUserInfo: true, withPort: true } })),
          (value) => {
            const problem = redirectUriProblem(value);
            if (problem !== null) return typeof problem === 'string';
            const url = new URL(value);
            return !value.includes('#') && url.username === '' && (url.protocol === 'https:' || url.protocol === 'http:');
          },
        ),
        500,
      ),
    PROPERTY_TIMEOUT,
  );

  describe('through a running issuer', () => {
    let issuer: RunningTokengate;
    let application: TestApplication;
    const REGISTERED = 'https://app.example/cb?tenant=a%20b';

    beforeAll(async () => {
      issuer = await startTokengate('properties-issuer');
      application = await registerApplication(issuer.store, { redirectUri: REGISTERED });
    });

    afterAll(async () => {
      await issuer?.close();
    });

    /** Spellings of the registered URI that parse to the same or a nearby URL: each a different string. */
    const variant = fc.oneof(
      fc.constantFrom(
        REGISTERED,
        'HTTPS://app.example/cb?tenant=a%20b',
        'https://APP.example/cb?tenant=a%20b',
        'https://app.example:443/cb?tenant=a%20b',
        'https://app.example/cb?tenant=a+b',
        'https://app.example/cb?tenant=a%20B',
        'https://app.example/./cb?tenant=a%20b',
        'https://app.example/cb/?tenant=a%20b',
        'https://app.example/%63b?tenant=a%20b',
        'https://app.example/cb?tenant=a%20b#',
        'https://app.example/cb?tenant=a%20b&',
        'https://app.example.evil.example/cb?tenant=a%20b',
        'https://app.example@evil.example/cb?tenant=a%20b',
      ),
      fc.tuple(fc.nat(REGISTERED.length), fc.string({ maxLength: 3 })).map(([at, inserted]) => `${REGISTERED.slice(0, at)}${inserted}${REGISTERED.slice(at)}`),
      fc.nat(REGISTERED.length - 1).map((at) => `${REGISTERED.slice(0, at)}${REGISTERED.slice(at + 1)}`),
    );

    it(
      'continues the sign-in only for the registered URI exactly; any other string gets an error page, never a redirect',
      async () => {
        let trusted = 0;
        await holds(
          'redirect: exact comparison through the issuer',
          fc.asyncProperty(variant, async (redirectUri) => {
            const query = new URLSearchParams({ client_id: application.clientId, redirect_uri: redirectUri, response_type: 'code', state: 's' });
            const response = await fetch(`${issuer.baseUrl}/oauth/authorize?${query.toString()}`, { redirect: 'manual' });
            await response.arrayBuffer();
            if (redirectUri === REGISTERED) {
              trusted += 1;
              expect({ redirectUri, status: response.status }).toEqual({ redirectUri, status: 200 });
              return true;
            }
            expect({ redirectUri, status: response.status, location: response.headers.get('location') }).toEqual({ redirectUri, status: 400, location: null });
            return true;
          }),
          80,
        );
        expect(trusted).toBeGreaterThan(0);
      },
      PROPERTY_TIMEOUT,
    );
  });
});
