import { describe, expect, it } from 'vitest';
import { createTokenMinter, decodeTagKey, generateTagKey, tokenDigest, TOKEN_LENGTH } from '../src/token/token-value.js';
import { hasScopes, parseScope, resolveScopes } from '../src/token/scope.js';

describe('token values', () => {
  const minter = createTokenMinter(decodeTagKey(generateTagKey()));

  it("are 43 characters of base64url carrying this deployment's tag", () => {
    const values = Array.from({ length: 1000 }, () => minter.mint());
    for (const value of values) {
      expect(value).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(value).toHaveLength(TOKEN_LENGTH);
      expect(minter.hasValidTag(value)).toBe(true);
    }
    expect(new Set(values).size).toBe(values.length);
  });

  it('refuse a value minted under another key, or altered in any character', () => {
    const other = createTokenMinter(decodeTagKey(generateTagKey()));
    expect(minter.hasValidTag(other.mint())).toBe(false);
    const value = minter.mint();
    for (let index = 0; index < value.length; index += 1) {
      const replacement = value[index] === 'A' ? 'B' : 'A';
      expect(minter.hasValidTag(value.slice(0, index) + replacement + value.slice(index + 1))).toBe(false);
    }
  });

  it('refuse wrong lengths, foreign alphabets and non-canonical spellings without throwing', () => {
    const value = minter.mint();
    for (const bad of ['', value.slice(1), `${value}A`, value.replace(/.$/, '='), value.replace(/^./, '+'), value.replace(/^./, 'é'), ' '.repeat(43)]) {
      expect(minter.hasValidTag(bad)).toBe(false);
    }
    // The last character holds 2 spare bits: a spelling that differs only there decodes to the same bytes.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = alphabet.indexOf(value.at(-1)!);
    const twin = value.slice(0, -1) + alphabet[last ^ 1];
    expect(Buffer.from(twin, 'base64url').equals(Buffer.from(value, 'base64url'))).toBe(true);
    expect(minter.hasValidTag(twin)).toBe(false);
  });

  it('refuse a tag key shorter than 32 bytes', () => {
    expect(() => decodeTagKey(Buffer.alloc(16).toString('base64url'))).toThrow(/32 bytes/);
  });

  it('digest to a value that does not contain the token', () => {
    const value = minter.mint();
    expect(tokenDigest(value)).not.toContain(value);
    expect(tokenDigest(value)).toBe(tokenDigest(value));
  });
});

describe('scopes', () => {
  it('parse space-delimited scope tokens and refuse malformed ones', () => {
    expect(parseScope('public  read public')).toEqual(['public', 'read']);
    expect(parseScope('pub"lic')).toBeNull();
    expect(parseScope('a\\b')).toBeNull();
    expect(hasScopes(['public', 'read'], ['read'])).toBe(true);
    expect(hasScopes(['public'], ['read'])).toBe(false);
  });

  it('resolve to the defaults, or refuse unknown and unallowed scopes', () => {
    expect(resolveScopes(undefined, ['public'], ['public', 'admin'], ['public'])).toEqual({ ok: true, scopes: ['public'] });
    expect(resolveScopes('public', ['public'], ['public'], ['public'])).toEqual({ ok: true, scopes: ['public'] });
    expect(resolveScopes('nope', ['public'], ['public'], ['public'])).toMatchObject({ ok: false, reason: expect.stringContaining('Unknown scope') });
    expect(resolveScopes('admin', ['public'], ['public', 'admin'], ['public'])).toMatchObject({
      ok: false,
      reason: expect.stringContaining('may not request'),
    });
  });
});
