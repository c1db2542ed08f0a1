import { TokengateError } from '../errors.js';
import type { SubjectKey } from './signals-store.js';

/** How much of a subject identifier tokengate reads: aliases and complex subjects nest, but not without end. */
const MOST_NESTING = 4;

/** A subject tokengate found names for, or the format it could not use (acknowledged and counted, never an error). */
export type ResolvedSubject = { readonly keys: readonly SubjectKey[]; readonly format: string } | { readonly unsupported: string };

/**
 * The names a subject identifier (RFC 9493, and SSF's `complex` subjects) gives a subject of
 * this provider: `iss_sub` (its `iss` must be the provider's own: a provider speaks for its own
 * subjects only), `opaque` (the provider's identifier: its `sub`), `email` (lower-cased, as the
 * assertions' user claim is read), `complex` (its `user` member), `aliases` (each identifier it
 * lists that tokengate can use). Other formats (phone numbers, account URIs, DIDs...) name no
 * token here: unsupported, not an error.
 */
export function resolveSubject(subject: unknown, providerIssuer: string, depth = 0): ResolvedSubject {
  if (!isObject(subject) || typeof subject.format !== 'string') throw malformed('has no subject identifier with a format');
  if (depth > MOST_NESTING) throw malformed('nests its subject identifiers too deeply');
  switch (subject.format) {
    case 'iss_sub': {
      const { iss, sub } = subject;
      if (typeof iss !== 'string' || typeof sub !== 'string' || sub === '') throw malformed('has an iss_sub subject without its iss and sub');
      if (iss !== providerIssuer)
        throw new TokengateError('SET_ACCESS_DENIED', {
          description: 'The SET names a subject of another issuer: a provider speaks for its own subjects only.',
        });
      return { keys: [{ by: 'sub', value: sub }], format: 'iss_sub' };
    }
    case 'opaque':
      if (typeof subject.id !== 'string' || subject.id === '') throw malformed('has an opaque subject without its id');
      return { keys: [{ by: 'sub', value: subject.id }], format: 'opaque' };
    case 'email':
      if (typeof subject.email !== 'string' || !subject.email.includes('@')) throw malformed('has an email subject without an address');
      return { keys: [{ by: 'email', value: subject.email.toLowerCase() }], format: 'email' };
    case 'complex':
      if (subject.user === undefined) return { unsupported: 'complex without a user' };
      return resolveSubject(subject.user, providerIssuer, depth + 1);
    case 'aliases':
      return resolveAliases(subject.identifiers, providerIssuer, depth);
    default:
      return { unsupported: subject.format.slice(0, 40) };
  }
}

function resolveAliases(identifiers: unknown, providerIssuer: string, depth: number): ResolvedSubject {
  if (!Array.isArray(identifiers) || identifiers.length === 0) throw malformed('has an aliases subject without identifiers');
  const keys: SubjectKey[] = [];
  for (const identifier of identifiers.slice(0, 16)) {
    const resolved = resolveSubject(identifier, providerIssuer, depth + 1);
    if ('keys' in resolved) keys.push(...resolved.keys);
  }
  return keys.length === 0 ? { unsupported: 'aliases without a usable identifier' } : { keys, format: 'aliases' };
}

function malformed(why: string): TokengateError {
  return new TokengateError('SET_INVALID_REQUEST', { description: `The SET ${why}.` });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
