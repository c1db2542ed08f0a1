import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UnknownTokens, ValidTokens, type CachedToken } from '../../src/store/token-cache.js';
import type { AccessTokenRecord } from '../../src/store/tokens/port.js';
import { holds, PROPERTY_TIMEOUT } from '../support/properties.js';

/**
 * The token cache's two tables (src/store/token-cache.ts: typed arrays, 16-byte keys, interned
 * values) against a model that is the plainest thing that could work: a Map per table, its
 * insertion order the recency order, one record object per entry. Both get the same random
 * operations (saves, lookups at a moving clock, deletions, revocations by user, family and
 * application, clears, attachments, eviction at a small capacity) and every answer is compared:
 * the record and cache life a lookup finds, the unknown-until time, how many entries, how many
 * were evicted, what is attached.
 */

const TTL_MS = 1_000;
const STALE_MS = 300;
const NEGATIVE_TTL_MS = 500;

/** Real digests (43 characters of base64url), and two strings no gateway makes, which the cache must key all the same. */
const DIGESTS = [...Array.from({ length: 10 }, (_, index) => createHash('sha256').update(`token-${index}`).digest('base64url')), 'access-old', ''];
const USERS = ['user-1', 'user-2', 'ü-3', null] as const;
const FAMILIES = ['family-1', 'family-2', null] as const;
const CLIENTS = ['client-a', 'client-b'] as const;

const record = fc.record({
  kind: fc.constantFrom('user' as const, 'application' as const),
  clientId: fc.constantFrom<string>(...CLIENTS),
  userId: fc.constantFrom<string | null>(...USERS),
  scopes: fc.constantFrom<string[]>(['public'], ['public', 'staff'], []),
  familyId: fc.constantFrom<string | null>(...FAMILIES),
  audience: fc.constantFrom<string[] | undefined>(undefined, [], ['https://api.example/a'], ['https://api.example/a', 'https://api.example/b']),
  /** Some issued more than 49 days before their expiry, or (a clock off) after it: times kept apart from the 32-bit columns. */
  issuedAt: fc.oneof(fc.integer({ min: 0, max: 5_000 }), fc.constantFrom(-5_000_000_000, 2_000_000)),
  /** From now: a token may be close to its expiry, past it, or months from it. */
  expiresIn: fc.oneof(fc.integer({ min: -200, max: 4_000 }), fc.constant(5_000_000_000)),
  jkt: fc.constantFrom<string | undefined>(undefined, 'thumbprint-1', 'thumbprint-2'),
});

const digest = fc.nat({ max: DIGESTS.length - 1 }).map((index) => DIGESTS[index]!);
const operation = fc.oneof(
  { weight: 4, arbitrary: fc.record({ op: fc.constant('save' as const), digest, record }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('get' as const), digest }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 900 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('delete' as const), digest }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('revoke' as const),
      field: fc.constant('userId' as const),
      value: fc.constantFrom<string>('user-1', 'user-2', 'ü-3'),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('revoke' as const),
      field: fc.constant('familyId' as const),
      value: fc.constantFrom<string>('family-1', 'family-2'),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant('revoke' as const), field: fc.constant('clientId' as const), value: fc.constantFrom<string>(...CLIENTS) }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('attach' as const), digest, value: fc.constantFrom('assertion-1', 'assertion-2') }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('unknown' as const), digest }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('isUnknown' as const), digest }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('forget' as const), digest }) },
  { weight: 1, arbitrary: fc.constant({ op: 'clear' as const }) },
);
type Operation = typeof operation extends fc.Arbitrary<infer T> ? T : never;

/** What a lookup tells a caller: the record, how long the cache answers for it, and whether it does now. */
function answer(entry: CachedToken | ModelEntry | undefined, now: number) {
  if (entry === undefined) return undefined;
  const { kind, clientId, userId, scopes, scope, familyId, audience, issuedAt, expiresAt, jkt, freshUntil, staleUntil } = entry;
  return {
    kind,
    clientId,
    userId,
    scopes: [...scopes],
    scope,
    familyId,
    audience: [...audience],
    issuedAt,
    expiresAt,
    jkt,
    freshUntil,
    staleUntil,
    fresh: now < freshUntil,
  };
}

interface ModelEntry extends CachedToken {
  attachments: Map<string, string>;
}

/** The model: a Map whose insertion order is the recency order (a touch deletes and sets again). */
class Model {
  readonly valid = new Map<string, ModelEntry>();
  readonly unknown = new Map<string, number>();
  validEvictions = 0;
  unknownEvictions = 0;

  constructor(
    private readonly capacity: number,
    private readonly unknownCapacity: number,
  ) {}

  get(digest: string): ModelEntry | undefined {
    const entry = this.valid.get(digest);
    if (entry !== undefined) this.touch(this.valid, digest, entry);
    return entry;
  }

  save(digest: string, record: AccessTokenRecord, now: number): void {
    const freshUntil = Math.min(now + TTL_MS, record.expiresAt);
    const staleUntil = Math.min(freshUntil + STALE_MS, record.expiresAt);
    if (staleUntil <= now) return;
    const entry: ModelEntry = {
      ...record,
      jkt: record.jkt,
      scope: record.scopes.join(' '),
      audience: record.audience ?? [],
      freshUntil,
      staleUntil,
      attachments: new Map(),
    };
    if (this.valid.has(digest)) this.valid.delete(digest);
    else if (this.valid.size === this.capacity) {
      this.valid.delete(this.valid.keys().next().value!);
      this.validEvictions++;
    }
    this.valid.set(digest, entry);
  }

  revoke(field: 'userId' | 'familyId' | 'clientId', value: string): void {
    for (const [digest, entry] of [...this.valid]) if (entry[field] === value) this.valid.delete(digest);
  }

  isUnknown(digest: string): number | undefined {
    const until = this.unknown.get(digest);
    if (until !== undefined) this.touch(this.unknown, digest, until);
    return until;
  }

  rememberUnknown(digest: string, until: number): void {
    if (this.unknown.has(digest)) this.unknown.delete(digest);
    else if (this.unknown.size === this.unknownCapacity) {
      this.unknown.delete(this.unknown.keys().next().value!);
      this.unknownEvictions++;
    }
    this.unknown.set(digest, until);
  }

  private touch<T>(map: Map<string, T>, key: string, value: T): void {
    map.delete(key);
    map.set(key, value);
  }
}

/** `views`: how many objects hits hand out again; with fewer than entries, most hits build theirs from the columns. */
function run(capacity: number, unknownCapacity: number, views: number, operations: Operation[]): boolean {
  let evictions = 0;
  let unknownEvictions = 0;
  const valid = new ValidTokens(capacity, TTL_MS, STALE_MS, () => evictions++, views);
  const unknown = new UnknownTokens(unknownCapacity, () => unknownEvictions++);
  const model = new Model(capacity, unknownCapacity);
  let now = 1_000_000;
  for (const operation of operations) {
    switch (operation.op) {
      case 'save': {
        const { expiresIn, ...rest } = operation.record;
        const saved: AccessTokenRecord = { ...rest, expiresAt: now + expiresIn };
        valid.remember(operation.digest, valid.entryFor(saved, now), now);
        model.save(operation.digest, saved, now);
        break;
      }
      case 'get':
        expect(answer(valid.get(operation.digest), now)).toEqual(answer(model.get(operation.digest), now));
        expect(valid.attached(operation.digest, 'assertion')).toBe(model.valid.get(operation.digest)?.attachments.get('assertion'));
        break;
      case 'advance':
        now += operation.ms;
        break;
      case 'delete':
        valid.delete(operation.digest);
        model.valid.delete(operation.digest);
        break;
      case 'revoke':
        valid.deleteMatching(operation.field, operation.value);
        model.revoke(operation.field, operation.value);
        break;
      case 'attach':
        valid.attach(operation.digest, 'assertion', operation.value);
        model.valid.get(operation.digest)?.attachments.set('assertion', operation.value);
        break;
      case 'unknown':
        unknown.set(operation.digest, now + NEGATIVE_TTL_MS);
        model.rememberUnknown(operation.digest, now + NEGATIVE_TTL_MS);
        break;
      case 'isUnknown':
        expect(unknown.get(operation.digest)).toBe(model.isUnknown(operation.digest));
        break;
      case 'forget':
        unknown.delete(operation.digest);
        model.unknown.delete(operation.digest);
        break;
      case 'clear':
        valid.clear();
        unknown.clear();
        model.valid.clear();
        model.unknown.clear();
        break;
    }
    expect([valid.size, unknown.size, evictions, unknownEvictions]).toEqual([
      model.valid.size,
      model.unknown.size,
      model.validEvictions,
      model.unknownEvictions,
    ]);
  }
  // Whatever is left answers as the model's does, in the model's recency order.
  for (const digest of [...model.valid.keys()]) expect(answer(valid.get(digest), now)).toEqual(answer(model.get(digest), now));
  return true;
}

describe('token cache tables against a Map model', () => {
  it(
    'answer every operation as the model does: the same records, cache lives, evictions and unknown tokens',
    async () => {
      await holds(
        'token cache tables',
        fc.property(
          fc.integer({ min: 1, max: 5 }),
          fc.integer({ min: 1, max: 4 }),
          fc.constantFrom(1, 2, 4096),
          fc.array(operation, { minLength: 10, maxLength: 100, size: 'max' }),
          run,
        ),
        300,
      );
    },
    PROPERTY_TIMEOUT,
  );

  it(
    'keep the same answers across the growth of their arrays, with more entries than the first allocation',
    async () => {
      const many = Array.from({ length: 3_000 }, (_, index) => createHash('sha256').update(`many-${index}`).digest('base64url'));
      const base = { kind: 'user' as const, clientId: 'client-a', scopes: ['public'], audience: undefined, issuedAt: 1, jkt: undefined };
      await holds(
        'token cache tables, grown',
        fc.property(fc.integer({ min: 1_500, max: 2_500 }), fc.array(fc.nat({ max: many.length - 1 }), { minLength: 1, maxLength: 400 }), (capacity, reads) => {
          const operations: Operation[] = [
            ...many.map((digest, index) => ({
              op: 'save' as const,
              digest,
              record: { ...base, userId: `user-${index % 7}`, familyId: `family-${index}`, expiresIn: 10_000 },
            })),
            ...reads.map((index) => ({ op: 'get' as const, digest: many[index]! })),
            { op: 'revoke' as const, field: 'userId' as const, value: 'user-3' },
            ...reads.map((index) => ({ op: 'get' as const, digest: many[index]! })),
          ];
          return run(capacity, 1, 64, operations);
        }),
        5,
      );
    },
    PROPERTY_TIMEOUT,
  );
});
