import { describe, expect, it } from 'vitest';
import { clientIdentityAssured, consentRequired, isNativeRedirectUri, promptAsksForConsent, type ConsentQuestion } from '../src/issuer/consent.js';
import type { ApplicationRecord, GrantRecord } from '../src/store/store.js';

/**
 * The one decision of remembered consent (src/issuer/consent.ts): when a user's grant spares
 * them the consent page, and what the page presents as new when it does not. The same rule runs
 * through the real pages in test/consent-remembered.test.ts and test/account-browser.test.ts.
 */

const WEB = 'https://app.example/cb';

function application(overrides: Partial<ApplicationRecord> = {}): ApplicationRecord {
  return {
    clientId: 'box-office',
    name: 'Box Office',
    secretDigest: 'x',
    redirectUris: [WEB],
    scopes: ['public', 'organizer'],
    confidential: true,
    createdAt: 1,
    ...overrides,
  };
}

function grant(overrides: Partial<GrantRecord> = {}): GrantRecord {
  return { id: 'g1', userId: 'u', clientId: 'box-office', scopes: ['public'], resources: ['https://api.example/'], approvedAt: 1, lastUsedAt: 1, ...overrides };
}

function question(overrides: Partial<ConsentQuestion> = {}): ConsentQuestion {
  return {
    application: application(),
    redirectUri: WEB,
    scopes: ['public'],
    audience: ['https://api.example/'],
    grant: grant(),
    promptConsent: false,
    ...overrides,
  };
}

/** A client known by its metadata document, as the finder hands it out: public, with its document. */
const documentClient = {
  ...application({ clientId: 'https://assistant.example/client.json', confidential: false, secretDigest: null }),
  metadataDocument: { host: 'assistant.example', clientName: 'Assistant' },
} as unknown as ApplicationRecord;

describe('consentRequired', () => {
  it('skips the page for a confidential web application whose grant covers every scope and resource asked for', () => {
    expect(consentRequired(question())).toEqual({ required: false, grant: grant() });
    // Asking for less than the grant is covered too.
    expect(consentRequired(question({ audience: [] })).required).toBe(false);
  });

  it('asks a user who has no grant, for everything', () => {
    expect(consentRequired(question({ grant: null }))).toEqual({
      required: true,
      reason: 'no_grant',
      promptNone: 'CONSENT_REQUIRED',
      grant: null,
      newScopes: ['public'],
      newResources: ['https://api.example/'],
    });
  });

  it('asks for the difference only when the request wants more scopes or resources than the grant', () => {
    expect(consentRequired(question({ scopes: ['public', 'organizer'] }))).toMatchObject({
      required: true,
      reason: 'more_requested',
      promptNone: 'CONSENT_REQUIRED',
      newScopes: ['organizer'],
      newResources: [],
    });
    expect(consentRequired(question({ audience: ['https://api.example/', 'https://mcp.example/'] }))).toMatchObject({
      required: true,
      reason: 'more_requested',
      newScopes: [],
      newResources: ['https://mcp.example/'],
    });
  });

  it('asks whenever prompt=consent, even when covered', () => {
    expect(consentRequired(question({ promptConsent: true }))).toMatchObject({ required: true, reason: 'prompt_consent', newScopes: [], newResources: [] });
    expect(promptAsksForConsent('login consent')).toBe(true);
    expect(promptAsksForConsent('consent')).toBe(true);
    expect(promptAsksForConsent('login')).toBe(false);
    expect(promptAsksForConsent('consents')).toBe(false);
    expect(promptAsksForConsent(undefined)).toBe(false);
  });

  it.each([
    ['a public client', { application: application({ confidential: false, secretDigest: null }) }],
    ['a client known by its metadata document', { application: documentClient }],
    ['a confidential application sending the user to a loopback address', { redirectUri: 'http://127.0.0.1:53123/callback' }],
    ['a confidential application sending the user to localhost', { redirectUri: 'http://localhost:8000/cb' }],
    ['a confidential application sending the user to [::1]', { redirectUri: 'http://[::1]:8000/cb' }],
    ['a confidential application sending the user to a custom scheme', { redirectUri: 'com.example.tickets:/oauth/cb' }],
  ])('never lets %s through silently, even with a covering grant', (_case, overrides) => {
    // prompt=none: the approval is there, the person must still see the page (node-oidc-provider's answer for native clients).
    expect(consentRequired(question(overrides))).toMatchObject({
      required: true,
      reason: 'client_not_assured',
      promptNone: 'INTERACTION_REQUIRED',
      newScopes: [],
      newResources: [],
    });
  });

  it('names the difference first when a client that is asked every time wants more', () => {
    expect(consentRequired(question({ application: application({ confidential: false }), scopes: ['public', 'organizer'] }))).toMatchObject({
      reason: 'more_requested',
      promptNone: 'CONSENT_REQUIRED',
      newScopes: ['organizer'],
    });
  });
});

describe('clientIdentityAssured', () => {
  it('holds for a confidential application on a web address, http or https, and nothing else', () => {
    expect(clientIdentityAssured(application(), WEB)).toBe(true);
    expect(clientIdentityAssured(application(), 'http://intranet.example/cb')).toBe(true);
    expect(clientIdentityAssured(application({ confidential: false }), WEB)).toBe(false);
    expect(clientIdentityAssured(documentClient, WEB)).toBe(false);
  });

  it.each([
    ['http://127.0.0.1/cb', true],
    ['http://127.10.0.1:9/cb', true],
    ['http://localhost/cb', true],
    ['http://app.localhost/cb', true],
    ['http://[::1]/cb', true],
    ['com.example.app:/cb', true],
    ['myapp://callback', true],
    ['https://app.example/cb', false],
    ['https://127.example/cb', false],
    ['http://localhost.example/cb', false],
  ])('%s is a native redirect URI: %s', (uri, native) => {
    expect(isNativeRedirectUri(uri)).toBe(native);
  });
});
