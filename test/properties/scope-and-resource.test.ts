import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TokengateError } from '../../src/errors.js';
import { grantAudience } from '../../src/resource/audience.js';
import { identifierProblem } from '../../src/resource/identifier.js';
import type { ResourceRegistry } from '../../src/resource/registry.js';
import { formatScope, hasScopes, parseScope, resolveScopes } from '../../src/token/scope.js';
import { anyText, holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * Scopes (RFC 6749 section 3.3) and resource identifiers (RFC 8707) as properties: a scope
 * string parses to its distinct scope tokens or is refused, and what is granted is what was
 * allowed; a resource is accepted only as a registered identifier spelled exactly, and a refused
 * one is told apart (malformed, unknown, not permitted) without the client's value echoed back.
 */

/** RFC 6749 section 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const isScopeToken = (part: string) => part.length > 0 && [...part].every((character) => /[\x21\x23-\x5b\x5d-\x7e]/.test(character));
const scopeToken = fc.string({
  unit: fc
    .integer({ min: 0x21, max: 0x7e })
    .filter((code) => code !== 0x22 && code !== 0x5c)
    .map((code) => String.fromCharCode(code)),
  minLength: 1,
  maxLength: 8,
});
const scopeString = fc.oneof(
  fc
    .array(fc.tuple(fc.oneof(scopeToken, fc.constantFrom('public', 'staff', 'admin')), fc.constantFrom(' ', '  ', '   ')), { maxLength: 6 })
    .map((parts) => parts.flat().join('')),
  anyText(20),
);

describe('scopes, for any scope string', () => {
  it(
    'parses to its distinct scope tokens in order, or refuses a string with anything but scope tokens and spaces; never throws',
    () =>
      holds(
        'scope: parse',
        fc.property(scopeString, (value) => {
          const parts = value.split(' ').filter((part) => part !== '');
          const parsed = parseScope(value);
          if (!parts.every(isScopeToken)) return parsed === null;
          expect(parsed).toEqual([...new Set(parts)]);
          expect(parseScope(formatScope(parsed!))).toEqual(parsed);
          return true;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  const scopeSet: fc.Arbitrary<string[]> = fc.uniqueArray(fc.constantFrom('public', 'staff', 'admin', 'write', 'read'), { maxLength: 5 });
  it(
    'grants a request only scopes the issuer knows and the application may have, and names the ones it refuses: unknown ones first',
    () =>
      holds(
        'scope: resolve',
        fc.property(
          fc.option(scopeString, { nil: undefined }),
          scopeSet,
          scopeSet,
          fc.array(fc.constantFrom('public', 'read'), { maxLength: 2 }),
          (requested, allowed, known, defaults) => {
            const resolution = resolveScopes(requested, allowed, known, defaults);
            const wanted = requested === undefined || requested.trim() === '' ? defaults : parseScope(requested);
            if (wanted === null) return !resolution.ok && resolution.reason === 'The scope parameter is malformed.';
            // Scopes the issuer does not know are named first; once there are none, those the application may not have.
            const unknown = wanted.filter((scope) => !known.includes(scope));
            if (unknown.length > 0) return !resolution.ok && resolution.reason === `Unknown scope: ${unknown.join(' ')}.`;
            const refused = wanted.filter((scope) => !allowed.includes(scope));
            if (refused.length > 0) return !resolution.ok && resolution.reason === `The application may not request: ${refused.join(' ')}.`;
            expect(resolution).toEqual({ ok: true, scopes: wanted });
            return hasScopes(known, wanted) && hasScopes(allowed, wanted);
          },
        ),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );
});

const REGISTERED = ['https://api.ticketing.example/api/public', 'https://api.ticketing.example/organizer', 'https://mcp.ticketing.example'];
const registry: ResourceRegistry = {
  identifiers: REGISTERED,
  byIdentifier: new Map(REGISTERED.map((identifier) => [identifier, { identifier, metadataUrl: '', metadataPath: '', document: '' }])),
  byMetadataPath: new Map(),
};
/** Requested resources: registered ones, other spellings of them, other URIs, and what is no URI at all. */
const resource = fc.oneof(
  fc.constantFrom(...REGISTERED),
  fc.tuple(fc.constantFrom(...REGISTERED), fc.constantFrom('/', '#f', '?q=1', '/x', '%20', ' ')).map(([identifier, tail]) => `${identifier}${tail}`),
  fc.constantFrom(...REGISTERED).map((identifier) => identifier.toUpperCase()),
  fc.webUrl({ withQueryParameters: true, withFragments: true }),
  fc.constantFrom('https://elsewhere.example/', 'urn:ticketing:api', '/api/public', 'https://', 'not a uri'),
  anyText(24),
);

describe('resources, for any requested value', () => {
  it(
    'accepts exactly the registered identifiers the application may use; tells malformed, unknown and not permitted apart; echoes only registered identifiers',
    () =>
      holds(
        'resource: grant audience',
        fc.property(resource, fc.subarray(REGISTERED), (requested, limitedTo) => {
          const application = { resources: limitedTo };
          const permitted = limitedTo.length === 0 ? REGISTERED : limitedTo;
          let description: string;
          try {
            const audience = grantAudience([requested], application, registry);
            return permitted.includes(requested) && audience.length === 1 && audience[0] === requested;
          } catch (error) {
            if (!(error instanceof TokengateError) || error.code !== 'INVALID_TARGET') throw error;
            description = error.description;
          }
          const url = URL.parse(requested);
          if (REGISTERED.includes(requested)) {
            expect(permitted).not.toContain(requested);
            expect(description).toBe(`The application may not request tokens for ${requested}.`);
          } else if (url === null || requested.includes('#'))
            expect(description).toBe('A resource parameter is not an absolute URI without a fragment (RFC 8707).');
          else
            expect(description).toMatch(
              /^A requested resource is not registered with this issuer\.( Identifiers are compared exactly: did you mean https:\/\/[^ ]+\?)?$/,
            );
          // The client's own value is never written back unless it is registered.
          return REGISTERED.includes(requested) || requested.length < 8 || !description.includes(requested);
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'takes in config only identifiers in their one canonical spelling, and suggests a spelling it would take',
    () =>
      holds(
        'resource: identifier spelling',
        fc.property(resource, (value) => {
          const problem = identifierProblem(value);
          if (problem === null) {
            const url = new URL(value);
            return url.search === '' && url.hash === '' && (url.protocol === 'https:' || url.protocol === 'http:') && url.username === '';
          }
          const suggested = /must be written as (\S+)$/.exec(problem)?.[1];
          return suggested === undefined || identifierProblem(suggested) === null;
        }),
        1_000,
      ),
    PROPERTY_TIMEOUT,
  );
});
