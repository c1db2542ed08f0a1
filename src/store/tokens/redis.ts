import type { RedisDoor } from '../backend.js';
import { consumed, parse } from '../redis-records.js';
import { CONSUME_SCRIPT, type Consumed } from '../single-use.js';
import {
  exchangeIndex,
  exchangeIndexes,
  identityEmailIndex,
  identityIndexes,
  identityIssuerIndex,
  identitySubjectIndex,
  REVOKED_MARK_MS,
  userClientIndex,
  type AccessTokenRecord,
  type IndexRevocation,
  type RefreshTokenRecord,
  type RevocationEvent,
  type RevocationFeed,
  type Tokens,
} from './port.js';
import { TOKEN_SCRIPTS } from './scripts.js';

/**
 * Keys:
 *   at:<digest>   JSON AccessTokenRecord, TTL
 *   rt:<digest>   HASH r=JSON used=1 once used, TTL  (rotation, reuse visible)
 *   idx:grant:<digest>  ZSET of the tokens of one user at one application (digest of both ids), never marked
 *   idx:exchanged:<digest>  ZSET of the tokens exchanged from access token <digest> (RFC 8693)
 *   idx:user|client|family:<id>  ZSET of "at:<digest>"/"rt:<digest>" scored by expiry, TTL = last expiry;
 *                 member "revoked" once the family, user or application is gone for good
 *   channel revocations  RevocationEvent JSON (sharded pub/sub on a Cluster)
 *
 * On a Cluster the operations that involve several keys (a token and its indexes, a revocation
 * and the tokens it removes) are ordered steps, safe in any interleaving without a transaction
 * across slots; on one server they are one script each (docs/store.md says which guarantee
 * each operation keeps).
 */
export class RedisTokens implements Tokens {
  private readonly channel: string;

  constructor(private readonly door: RedisDoor) {
    for (const [name, script] of Object.entries(TOKEN_SCRIPTS)) door.defineScript(name, script);
    door.defineScript('consume', CONSUME_SCRIPT);
    this.channel = door.key('revocations');
  }

  async saveAccessToken(digest: string, record: AccessTokenRecord): Promise<void> {
    await this.saveIndexed(`at:${digest}`, 'string', record);
  }

  async getAccessToken(digest: string): Promise<AccessTokenRecord | null> {
    return parse<AccessTokenRecord>(await this.door.read<string | null>('get', this.door.key(`at:${digest}`)));
  }

  async saveRefreshToken(digest: string, record: RefreshTokenRecord): Promise<void> {
    await this.saveIndexed(`rt:${digest}`, 'hash', record);
  }

  async getRefreshToken(digest: string): Promise<RefreshTokenRecord | null> {
    const [record, used] = await this.door.read<Array<string | null>>('hmget', this.door.key(`rt:${digest}`), 'r', 'used');
    return used === '1' ? null : parse<RefreshTokenRecord>(record ?? null);
  }

  async consumeRefreshToken(digest: string): Promise<Consumed<RefreshTokenRecord> | null> {
    return consumed<RefreshTokenRecord>(await this.door.write('consume', this.door.key(`rt:${digest}`)));
  }

  async revokeAccessToken(digest: string): Promise<number> {
    const removed = await this.removeMembers([`at:${digest}`]);
    return removed + (await this.revokeIndexed(this.door.key(`idx:${exchangeIndex(digest)}`), true));
  }

  revokeRefreshToken(digest: string): Promise<number> {
    return this.removeMembers([`rt:${digest}`]);
  }

  revokeFamily(familyId: string): Promise<number> {
    return this.revokeIndexed(this.indexKey('family', familyId), true);
  }

  revokeUserTokens(userId: string, options: IndexRevocation = {}): Promise<number> {
    return this.revokeIndexed(this.indexKey('user', userId), options.forGood === true);
  }

  revokeClientTokens(clientId: string, options: IndexRevocation = {}): Promise<number> {
    return this.revokeIndexed(this.indexKey('client', clientId), options.forGood === true);
  }

  revokeUserClientTokens(userId: string, clientId: string): Promise<number> {
    return this.revokeIndexed(this.door.key(`idx:${userClientIndex(userId, clientId)}`), false);
  }

  revokeIdentityTokens(issuer: string, subject?: string): Promise<number> {
    const index = subject === undefined ? identityIssuerIndex(issuer) : identitySubjectIndex(issuer, subject);
    return this.revokeIndexed(this.door.key(`idx:${index}`), false);
  }

  revokeIdentityEmailTokens(issuer: string, email: string): Promise<number> {
    return this.revokeIndexed(this.door.key(`idx:${identityEmailIndex(issuer, email)}`), false);
  }

  subscribeRevocations(feed: RevocationFeed): Promise<() => Promise<void>> {
    return this.door.subscribe(this.channel, {
      onMessage(message) {
        const event = parse<RevocationEvent>(message);
        if (event !== null && Array.isArray(event.accessTokens)) feed.onRevoked(event);
      },
      onInterrupted: () => feed.onInterrupted(),
      onReset: () => feed.onReset(),
    });
  }

  private indexKey(kind: 'user' | 'client' | 'family', id: string): string {
    return this.door.key(`idx:${kind}:${id}`);
  }

  private indexKeys(record: AccessTokenRecord | RefreshTokenRecord): string[] {
    const keys = [this.indexKey('client', record.clientId)];
    if (record.userId !== null) keys.push(this.indexKey('user', record.userId), this.door.key(`idx:${userClientIndex(record.userId, record.clientId)}`));
    if (record.familyId !== null) keys.push(this.indexKey('family', record.familyId));
    if ('identity' in record && record.identity !== undefined) for (const index of identityIndexes(record.identity)) keys.push(this.door.key(`idx:${index}`));
    if ('exchangedFrom' in record) for (const index of exchangeIndexes(record.exchangedFrom)) keys.push(this.door.key(`idx:${index}`));
    return keys;
  }

  /**
   * A token and its indexes. On one server (or Sentinel) one script does it all. On a Cluster
   * the keys live on different slots, so it takes three steps that need no transaction:
   * 1. it joins every index (refused by a family, user or application marked revoked: the token
   *    is then born revoked, and nothing is written);
   * 2. its record is written;
   * 3. it checks it is still in every index: a revocation that read an index between 1 and 2
   *    found no record to delete, so the record deletes itself.
   * A revocation that read the index after 2 deletes the record; one that read it before 1 does
   * not concern it. Either way no token outlives a revocation it was indexed under.
   */
  private async saveIndexed(member: string, kind: 'string' | 'hash', record: AccessTokenRecord | RefreshTokenRecord): Promise<void> {
    const now = Date.now();
    if (record.expiresAt <= now) return;
    const indexes = this.indexKeys(record);
    const recordKey = this.door.key(member);
    const payload = JSON.stringify(record);
    if (!this.door.cluster) {
      await this.door.write('saveIndexed', 1 + indexes.length, recordKey, ...indexes, member, record.expiresAt, now, kind, payload);
      return;
    }
    const joined = await Promise.all(indexes.map((index) => this.door.write<number>('indexAdd', index, member, record.expiresAt, now)));
    if (joined.includes(0)) return;
    await this.door.write('saveRecord', recordKey, kind, payload, record.expiresAt);
    const still = await Promise.all(indexes.map((index) => this.door.read<number>('isMember', index, member)));
    if (still.includes(0)) await this.door.write('del', recordKey);
  }

  /**
   * Revocation by index: take the members, marking the index revoked for good when asked,
   * delete their records, then announce the access tokens to every sidecar, after the
   * deletions, so a sidecar that reads the store on hearing it finds nothing. One script on one
   * server (or Sentinel); those steps in turn on a Cluster.
   */
  private async revokeIndexed(indexKey: string, forGood: boolean): Promise<number> {
    const markFloor = Date.now() + REVOKED_MARK_MS;
    if (!this.door.cluster) return this.door.write<number>('revoke', indexKey, forGood ? '1' : '0', markFloor, this.door.key(''), this.channel, Date.now());
    return this.removeMembers(await this.door.write<string[]>('revokeIndex', indexKey, forGood ? '1' : '0', markFloor));
  }

  private async removeMembers(members: string[]): Promise<number> {
    if (!this.door.cluster) return this.door.write<number>('revoke', '', '0', 0, this.door.key(''), this.channel, Date.now(), ...members);
    const removed = await Promise.all(members.map((member) => this.door.write<number>('del', this.door.key(member))));
    // Announced even when already gone here: another sidecar may still cache them.
    const accessTokens = members.filter((member) => member.startsWith('at:')).map((member) => member.slice(3));
    if (accessTokens.length > 0) await this.door.publish(this.channel, JSON.stringify({ accessTokens, publishedAt: Date.now() } satisfies RevocationEvent));
    return removed.reduce((sum, count) => sum + count, 0);
  }
}
