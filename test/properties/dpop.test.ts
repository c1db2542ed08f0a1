import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import { normalizeHtu, requestHtu } from '../../src/dpop/htu.js';
import { verifyProof } from '../../src/dpop/proof.js';
import { anyText, holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * DPoP proofs (RFC 9449 section 4.3) as properties: a proof is accepted exactly when it is a
 * `dpop+jwt` signed by the key in its header, with claims of the right types and an `iat` within
 * the window; any change to its signed part, and any string that is not such a proof, is
 * refused without throwing; and `htu` is compared after RFC 3986 normalization, so every
 * spelling of the request's URL matches it and no other URL does.
 */

const WINDOW = { maxAgeSeconds: 60, clockSkewSeconds: 5 };
const UNRESERVED = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~';

interface Signer {
  readonly alg: 'ES256' | 'EdDSA';
  readonly privateKey: CryptoKey;
  readonly jwk: JWK;
}
let signers: Signer[];

beforeAll(async () => {
  signers = await Promise.all(
    (['ES256', 'EdDSA'] as const).map(async (alg) => {
      const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
      return { alg, privateKey, jwk: await exportJWK(publicKey) };
    }),
  );
});

/** A claim value of any JSON type, or absent. */
const anyClaim = fc.oneof(fc.constant(undefined), fc.jsonValue({ maxDepth: 1 }));
const claims = fc.record({
  jti: fc.oneof(
    { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 40 }) },
    { weight: 1, arbitrary: anyClaim },
    { weight: 1, arbitrary: fc.constant('j'.repeat(257)) },
  ),
  htm: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('GET', 'POST', 'get') }, { weight: 1, arbitrary: anyClaim }),
  htu: fc.oneof({ weight: 4, arbitrary: fc.webUrl() }, { weight: 1, arbitrary: anyClaim }),
  ath: fc.oneof(
    { weight: 3, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.base64String({ maxLength: 43 }) },
    { weight: 1, arbitrary: anyClaim },
  ),
  nonce: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: anyClaim }),
  // Seconds from now, away from the window's edges (a second may tick between signing and checking).
  iat: fc.oneof(
    { weight: 4, arbitrary: fc.integer({ min: -62, max: 3 }) },
    { weight: 2, arbitrary: fc.integer({ min: -10_000, max: 10_000 }).filter((offset) => offset < -68 || offset > 8) },
    { weight: 1, arbitrary: fc.constantFrom<unknown>('1700000000', null, [], 1.5e300) },
  ),
});
type Claims = typeof claims extends fc.Arbitrary<infer Value> ? Value : never;

async function sign(signer: Signer, { iat, ...rest }: Claims): Promise<string> {
  const payload = Object.fromEntries(Object.entries(rest).filter(([, value]) => value !== undefined));
  const issuedAt = typeof iat === 'number' ? Math.floor(Date.now() / 1000) + iat : iat;
  return new SignJWT({ ...payload, iat: issuedAt } as Record<string, unknown>)
    .setProtectedHeader({ alg: signer.alg, typ: 'dpop+jwt', jwk: signer.jwk })
    .sign(signer.privateKey);
}

/** What RFC 9449 section 4.3 makes of a proof with these claims, signed as it should be. */
function expectedOutcome({ jti, htm, htu, ath, nonce, iat }: Claims): 'verified' | 'invalid' | 'stale' {
  if (typeof iat !== 'number') return 'invalid';
  if (iat < -(WINDOW.maxAgeSeconds + WINDOW.clockSkewSeconds) || iat > WINDOW.clockSkewSeconds) return 'stale';
  const typed = typeof jti === 'string' && jti !== '' && jti.length <= 256 && typeof htm === 'string' && typeof htu === 'string';
  return typed && (ath === undefined || typeof ath === 'string') && (nonce === undefined || typeof nonce === 'string') ? 'verified' : 'invalid';
}

describe('DPoP proofs, for any claims and any bytes', () => {
  it(
    'accepts a proof exactly when its claims have their types and its iat is within the window; an iat that is not a number is invalid, not stale',
    () =>
      holds(
        'dpop: claims',
        fc.asyncProperty(fc.nat(1), claims, async (which, proofClaims) => {
          const signer = signers[which]!;
          const outcome = await verifyProof(await sign(signer, proofClaims), WINDOW);
          const expected = expectedOutcome(proofClaims);
          expect({ proofClaims, outcome: typeof outcome === 'string' ? outcome : 'verified' }).toEqual({ proofClaims, outcome: expected });
          if (typeof outcome !== 'string') expect(outcome).toMatchObject({ jti: proofClaims.jti, htm: proofClaims.htm, htu: proofClaims.htu });
          return true;
        }),
        200,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'refuses a proof with any character of its header or claims changed',
    () =>
      holds(
        'dpop: tampering',
        fc.asyncProperty(fc.nat(1), fc.nat(), fc.constantFrom(...'ABCabc012-_'), async (which, position, replacement) => {
          const proof = await sign(signers[which]!, {
            jti: randomUUID(),
            htm: 'GET',
            htu: 'https://tickets.example/api',
            ath: undefined,
            nonce: undefined,
            iat: 0,
          });
          const signedPart = proof.lastIndexOf('.');
          const index = position % signedPart;
          fc.pre(proof[index] !== '.' && proof[index] !== replacement);
          const tampered = `${proof.slice(0, index)}${replacement}${proof.slice(index + 1)}`;
          return (await verifyProof(tampered, WINDOW)) === 'invalid';
        }),
        200,
      ),
    PROPERTY_TIMEOUT,
  );

  const segment = fc.oneof(
    fc.base64String({ maxLength: 60 }).map((text) => text.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')),
    fc.jsonValue({ maxDepth: 2 }).map((value) => Buffer.from(JSON.stringify(value) ?? '').toString('base64url')),
    fc
      .record({ alg: fc.constantFrom('none', 'HS256', 'ES256', 'EdDSA', 'RS256', ''), typ: fc.constantFrom('dpop+jwt', 'JWT', ''), jwk: anyClaim })
      .map((header) => Buffer.from(JSON.stringify(header)).toString('base64url')),
    anyText(12),
  );
  it(
    'refuses any string that is not such a proof, without throwing',
    () =>
      holds(
        'dpop: any string',
        fc.asyncProperty(
          fc.oneof(
            anyText(),
            fc.array(segment, { minLength: 1, maxLength: 4 }).map((parts) => parts.join('.')),
          ),
          async (text) => {
            return (await verifyProof(text, WINDOW)) === 'invalid';
          },
        ),
        300,
      ),
    PROPERTY_TIMEOUT,
  );
});

/** A URL and spellings of it: case of scheme and host, the default port, escapes of unreserved characters in either case, query and fragment. */
const url = fc.record({
  https: fc.boolean(),
  host: fc.domain(),
  port: fc.oneof(fc.constant(null), fc.integer({ min: 1, max: 65_535 })),
  segments: fc.array(fc.string({ unit: fc.constantFrom(...UNRESERVED, '%2F', '%25', '@', '!', '$'), minLength: 1, maxLength: 6 }), { maxLength: 4 }),
});
type Url = typeof url extends fc.Arbitrary<infer Value> ? Value : never;
const spelling = fc.record({
  upperScheme: fc.boolean(),
  upperHost: fc.boolean(),
  explicitPort: fc.boolean(),
  escapes: fc.array(fc.boolean(), { maxLength: 40 }),
  lowerHex: fc.boolean(),
  tail: fc.constantFrom('', '?a=1', '#f', '?x#y'),
});

function spell({ https, host, port, segments }: Url, how: typeof spelling extends fc.Arbitrary<infer Value> ? Value : never): string {
  const scheme = https ? 'https' : 'http';
  const defaultPort = https ? 443 : 80;
  const shownPort = port !== null && port !== defaultPort ? `:${port}` : how.explicitPort ? `:${defaultPort}` : '';
  let escapeIndex = 0;
  const path = segments
    .map((segment) =>
      segment.replace(/%[0-9A-F]{2}|./g, (piece) => {
        if (piece.startsWith('%')) return how.lowerHex ? piece.toLowerCase() : piece;
        if (!UNRESERVED.includes(piece) || !how.escapes[escapeIndex++]) return piece;
        const escape = `%${piece.charCodeAt(0).toString(16).padStart(2, '0')}`;
        return how.lowerHex ? escape : escape.toUpperCase();
      }),
    )
    .join('/');
  return `${how.upperScheme ? scheme.toUpperCase() : scheme}://${how.upperHost ? host.toUpperCase() : host}${shownPort}/${path}${how.tail}`;
}

describe('htu, for any URL and any spelling of it', () => {
  it(
    'normalizes every spelling of a URL to one value, the one requestHtu gives the request, and never throws',
    () =>
      holds(
        'dpop: htu spellings',
        fc.property(url, spelling, spelling, (target, one, other) => {
          const plain = spell(target, { upperScheme: false, upperHost: false, explicitPort: false, escapes: [], lowerHex: false, tail: '' });
          const normalized = normalizeHtu(plain);
          expect(normalized).not.toBeNull();
          expect(normalizeHtu(spell(target, one))).toBe(normalized);
          expect(normalizeHtu(spell(target, other))).toBe(normalized);
          expect(normalizeHtu(normalized!)).toBe(normalized);
          const { protocol, host, pathname } = new URL(plain);
          expect(requestHtu(protocol.slice(0, -1), host, `${pathname}${one.tail}`)).toBe(normalized);
          return true;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'tells apart two URLs whose paths differ',
    () =>
      holds(
        'dpop: htu differs',
        fc.property(url, url, spelling, (first, second, how) => {
          const plain = (target: Url) => spell(target, { upperScheme: false, upperHost: false, explicitPort: false, escapes: [], lowerHex: false, tail: '' });
          fc.pre(new URL(plain(first)).href !== new URL(plain(second)).href);
          return normalizeHtu(spell(first, how)) !== normalizeHtu(plain(second));
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'gives null, never an exception, for what is not an http(s) URL without credentials',
    () =>
      holds(
        'dpop: htu any string',
        fc.property(fc.oneof(anyText(), fc.webUrl({ withQueryParameters: true, withFragments: true, authoritySettings: { withUserInfo: true } })), (text) => {
          const normalized = normalizeHtu(text);
          return normalized === null || /^https?:\/\/[^@/]+\//.test(normalized);
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );
});
