import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/load-config.js';
import { longestAssertion } from '../src/identity/config-checks.js';
import { TOO_LARGE } from '../src/identity/index.js';
import { configHash } from '../src/config/reload.js';

/** The config checks of the signed identity: every problem names its key. */

function problemsOf(config: Record<string, unknown>): Array<{ path: string; message: string }> {
  try {
    parseConfig(JSON.stringify(config), 'identity.yaml', {});
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    // The line is the JSON's one line: not what these tests are about.
    return (error as ConfigError).problems.map(({ path, message }) => ({ path, message }));
  }
  return [];
}

const base = { issuer: { issuerUrl: 'https://auth.ticketing.example' } };
const route = {
  path: '/api/public/me',
  token: 'user',
  upstream: 'http://127.0.0.1:3000',
  signedIdentity: 'instead',
  signedIdentityAudience: 'https://api.ticketing.example',
};

describe('signedIdentity in the config', () => {
  it('accepts a route with its audience, and the defaults', () => {
    expect(problemsOf({ ...base, signedIdentity: { enabled: true }, routes: [route] })).toEqual([]);
    const config = parseConfig(JSON.stringify({ ...base, signedIdentity: { enabled: true }, routes: [route] }), 'identity.yaml', {});
    expect(config.signedIdentity).toMatchObject({
      algorithm: 'ES256',
      header: 'x-tokengate-identity',
      lifetimeSeconds: 120,
      maxBytes: 1024,
      jwksMaxAgeSeconds: 300,
    });
  });

  it('refuses an algorithm other than ES256 and EdDSA, naming the key', () => {
    for (const algorithm of ['RS256', 'none', 'HS256']) {
      expect(problemsOf({ ...base, signedIdentity: { enabled: true, algorithm } })).toContainEqual(
        expect.objectContaining({ path: 'signedIdentity.algorithm' }),
      );
    }
    expect(problemsOf({ ...base, signedIdentity: { enabled: true, algorithm: 'EdDSA' }, routes: [route] })).toEqual([]);
  });

  it('refuses a config whose assertion could outgrow maxBytes, naming the key and the route', () => {
    const scopes = ['public', ...Array.from({ length: 40 }, (_unused, index) => `tickets:scope-${index}`)];
    const problems = problemsOf({ ...base, issuer: { ...base.issuer, scopes }, signedIdentity: { enabled: true }, routes: [route] });
    expect(problems).toEqual([
      {
        path: 'signedIdentity.maxBytes',
        message: expect.stringMatching(/^the signed identity of routes\[0\] \(\/api\/public\/me\) could be \d+ bytes, more than 1024/) as string,
      },
    ]);
    // The same scopes fit a larger bound.
    expect(problemsOf({ ...base, issuer: { ...base.issuer, scopes }, signedIdentity: { enabled: true, maxBytes: 2048 }, routes: [route] })).toEqual([]);
    // Metadata document clients have client ids of up to 512 characters: they alone outgrow 1 KiB.
    const metadataClients = { enabled: true, allow: [{ clientId: 'https://app.example/client.json' }] };
    expect(problemsOf({ ...base, clientMetadataDocuments: metadataClients, signedIdentity: { enabled: true }, routes: [route] })).toContainEqual(
      expect.objectContaining({ path: 'signedIdentity.maxBytes' }),
    );
  });

  it('sizes the bound from the largest assertion a route could carry', () => {
    const config = { clientMetadataDocuments: { enabled: false }, issuer: { scopes: ['public'] } } as Parameters<typeof longestAssertion>[0];
    const longest = longestAssertion(config, 'https://auth.ticketing.example', 'https://api.ticketing.example');
    // A user id of 255 characters dominates: about 600 bytes, well under 1 KiB.
    expect(longest).toBeGreaterThan(500);
    expect(longest).toBeLessThan(1024);
    expect(TOO_LARGE).toBeTypeOf('symbol');
  });

  it('refuses a route asking for it while it is off, or without an audience', () => {
    expect(problemsOf({ ...base, routes: [route] })).toEqual([
      { path: 'routes[0].signedIdentity', message: 'needs signedIdentity.enabled: true (the signing keys)' },
    ]);
    const { signedIdentityAudience: _unused, ...noAudience } = route;
    expect(problemsOf({ ...base, signedIdentity: { enabled: true }, routes: [noAudience] })).toEqual([
      { path: 'routes[0].signedIdentity', message: expect.stringContaining('needs an audience') as string },
    ]);
    expect(problemsOf({ ...base, signedIdentity: { enabled: true, audience: 'https://api.ticketing.example' }, routes: [noAudience] })).toEqual([]);
  });

  it('refuses a header that is not a name or is one tokengate already uses, a key encryption key that is not 32 bytes, and a rotation too short for the timeline', () => {
    const problems = problemsOf({
      ...base,
      signedIdentity: { enabled: true, header: 'X-Auth-User-Id', keyEncryptionKey: 'c2hvcnQ', rotationIntervalSeconds: 60 },
    });
    expect(problems.map((problem) => problem.path).sort()).toEqual([
      'signedIdentity.header',
      'signedIdentity.keyEncryptionKey',
      'signedIdentity.rotationIntervalSeconds',
    ]);
    expect(problemsOf({ ...base, signedIdentity: { enabled: true, header: 'x identity' } })).toContainEqual(
      expect.objectContaining({ path: 'signedIdentity.header' }),
    );
    expect(problemsOf({ ...base, signedIdentity: { enabled: true, keyEncryptionKey: Buffer.alloc(32, 7).toString('base64url') } })).toEqual([]);
  });

  it('keeps the key encryption key out of the published config hash', () => {
    const withKey = (key: string) =>
      configHash(parseConfig(JSON.stringify({ ...base, signedIdentity: { enabled: true, keyEncryptionKey: key } }), 'identity.yaml', {}));
    expect(withKey(Buffer.alloc(32, 1).toString('base64url'))).toBe(withKey(Buffer.alloc(32, 2).toString('base64url')));
    expect(withKey(Buffer.alloc(32, 1).toString('base64url'))).not.toBe(withKey(''));
  });
});
