import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readApplicationInput, readApplicationPatch, readRevocationTarget, readUserInput } from '../../src/admin/validate.js';
import { TokengateError } from '../../src/errors.js';
import { registerApplication, startTokengate, type RunningTokengate } from '../support/instance.js';
import { anyText, holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * The admin API's bodies as properties: any JSON value, any object with the known fields given
 * values of any type, is read or refused with a 400 invalid_request whose description names the
 * field (or the body) and what it needs; nothing throws anything else; and through a running ops
 * listener, no body gets a 5xx.
 */

const ISSUER = { scopes: ['public', 'staff'], defaultScopes: ['public'] };
const RESOURCES = ['https://api.ticketing.example/api/public'];
const RATE_LIMITS = { gold: {}, silver: {} };
const FIELDS = ['name', 'redirect_uris', 'scopes', 'confidential', 'resources', 'dpop', 'rate_limit', 'email', 'password', 'user_id', 'client_id'];
/** How a refusal's description begins: the field it is about, the body as a whole, or what to give instead. */
const NAMES_WHAT = new RegExp(`^(${FIELDS.join('|')}|the body|give|cannot update)[ :]`);

const fieldValue = fc.oneof(
  fc.constantFrom(
    'Box office',
    'https://app.example/cb',
    'http://localhost:3000/cb',
    'https://app.example/cb#f',
    'javascript:alert(1)',
    'public',
    'staff',
    'required',
    'allowed',
    'gold',
    'default',
    'ana@example.com',
    'a long enough password',
    RESOURCES[0]!,
  ),
  fc.array(fc.constantFrom('https://app.example/cb', 'public', 'staff', 'unknown', RESOURCES[0]!, ''), { maxLength: 3 }),
  fc.jsonValue({ maxDepth: 2 }),
  anyText(20),
);
const body = fc.oneof(
  { weight: 4, arbitrary: fc.dictionary(fc.constantFrom(...FIELDS, 'extra', '__proto__'), fieldValue, { maxKeys: 6 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.anything() },
);

function outcome(read: () => unknown): 'read' | string {
  try {
    read();
    return 'read';
  } catch (error) {
    if (!(error instanceof TokengateError)) throw error;
    expect(error.code).toBe('INVALID_REQUEST');
    return error.description;
  }
}

describe('admin API bodies, for any value', () => {
  it(
    'reads each body or refuses it with invalid_request naming the field, never another exception',
    () =>
      holds(
        'admin: bodies',
        fc.property(body, (value) => {
          for (const read of [
            () => readApplicationInput(value, ISSUER, RESOURCES),
            () => readApplicationPatch(value, ISSUER, RESOURCES, RATE_LIMITS),
            () => readUserInput(value),
            () => readRevocationTarget(value),
          ]) {
            const result = outcome(read);
            if (result !== 'read') expect(result).toMatch(NAMES_WHAT);
          }
          return true;
        }),
        800,
      ),
    PROPERTY_TIMEOUT,
  );

  it(
    'takes an application only with https (or loopback http) redirect URIs without a fragment, and scopes and resources the config knows',
    () =>
      holds(
        'admin: applications read are sound',
        fc.property(body, (value) => {
          let application;
          try {
            application = readApplicationInput(value, ISSUER, RESOURCES);
          } catch {
            return true;
          }
          for (const uri of application.redirectUris) {
            const url = new URL(uri);
            expect(uri.includes('#')).toBe(false);
            expect(url.protocol === 'https:' || ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)).toBe(true);
          }
          expect(application.scopes.every((scope) => ISSUER.scopes.includes(scope))).toBe(true);
          expect(application.resources.every((resource) => RESOURCES.includes(resource))).toBe(true);
          return true;
        }),
        800,
      ),
    PROPERTY_TIMEOUT,
  );
});

describe('admin API bodies through a running ops listener', () => {
  const ADMIN_TOKEN = 'admin-token-for-property-tests-0123';
  let running: RunningTokengate;
  let clientId: string;

  beforeAll(async () => {
    running = await startTokengate('properties-admin', { config: { admin: { token: ADMIN_TOKEN } } });
    clientId = (await registerApplication(running.store)).clientId;
  });

  afterAll(async () => {
    await running?.close();
  });

  const rawBody = fc.oneof({ weight: 3, arbitrary: body.map((value) => JSON.stringify(value) ?? 'null') }, { weight: 1, arbitrary: anyText(40) });

  it(
    'answers every body with a success or a 4xx and an RFC error body, never a 5xx',
    async () => {
      let refused = 0;
      await holds(
        'admin: through the ops listener',
        fc.asyncProperty(fc.constantFrom('POST /applications', 'PATCH /applications/:id', 'POST /tokens/revoke'), rawBody, async (endpoint, text) => {
          const [method, path] = endpoint.split(' ') as [string, string];
          const response = await fetch(`${running.opsUrl}/admin${path.replace(':id', clientId)}`, {
            method,
            headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
            body: text,
          });
          const answer = (await response.json()) as Record<string, unknown>;
          expect({ endpoint, text, status: response.status < 500 }).toEqual({ endpoint, text, status: true });
          if (response.status >= 400) {
            refused += 1;
            expect(answer).toEqual({ error: expect.stringMatching(/^[a-z_]+$/), error_description: expect.any(String) });
          }
          return true;
        }),
        100,
      );
      expect(refused).toBeGreaterThan(30);
    },
    PROPERTY_TIMEOUT,
  );
});
