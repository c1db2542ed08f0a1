import type { RedisDoor } from './backend.js';
import { ExpiringMap } from './expiring-map.js';
import { consumed } from './redis-records.js';
import { CONSUME_SCRIPT, consume, type Consumed } from './single-use.js';
import { SAVE_RECORD_SCRIPT } from './tokens/scripts.js';

export interface AuthorizationCodeRecord {
  clientId: string;
  userId: string;
  redirectUri: string;
  scopes: string[];
  codeChallenge: string | null;
  codeChallengeMethod: 'S256' | null;
  /** The token family the tokens issued from this code belong to. */
  familyId: string;
  /** Resource identifiers the grant was authorized for (RFC 8707); absent on codes issued without resources configured. */
  audience?: string[];
  issuedAt: number;
  expiresAt: number;
  /** `dpop_jkt` of the authorization request (RFC 9449 section 10): the code is redeemed only with a proof by that key. */
  jkt?: string;
  /** The id of the user's grant to the application it was issued under (./grants.ts); absent on codes from before grants were kept. */
  grantId?: string;
  /** An OpenID Connect sign-in (`openid` granted): what the ID token of this code says of it. */
  openid?: OpenIdSignIn;
}

/** What ID tokens say of the sign-in behind a code and the refresh tokens that descend from it. */
export interface OpenIdSignIn {
  /** Epoch seconds the user signed in (`auth_time`). */
  authTime: number;
  /** The `sid` of the tokengate session signed in. */
  sid: string;
  /** The authorization request's `nonce`, exactly as sent (the code's ID token alone carries it). */
  nonce?: string;
  /** The e-mail address the user signed in with, when the user source keeps no users (`http`). */
  email?: string;
}

/** Authorization codes, keyed by the code's digest, until their expiry. */
export interface AuthorizationCodes {
  save(digest: string, record: AuthorizationCodeRecord): Promise<void>;
  /** Atomic single use: the first caller gets firstUse true; later ones (replays) false. */
  consume(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null>;
}

export class MemoryAuthorizationCodes implements AuthorizationCodes {
  private readonly codes = new ExpiringMap<{ record: AuthorizationCodeRecord; used: boolean }>();

  async save(digest: string, record: AuthorizationCodeRecord): Promise<void> {
    this.codes.set(digest, { record: structuredClone(record), used: false }, record.expiresAt);
  }

  async consume(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null> {
    return consume(this.codes.get(digest));
  }

  sweep(now: number): void {
    this.codes.sweep(now);
  }
}

/** Keys: `code:<digest>` HASH r=JSON, used=1 once used, TTL (single use, replay visible). */
export class RedisAuthorizationCodes implements AuthorizationCodes {
  constructor(private readonly door: RedisDoor) {
    door.defineScript('saveRecord', SAVE_RECORD_SCRIPT);
    door.defineScript('consume', CONSUME_SCRIPT);
  }

  async save(digest: string, record: AuthorizationCodeRecord): Promise<void> {
    if (record.expiresAt <= Date.now()) return;
    await this.door.write('saveRecord', this.key(digest), 'hash', JSON.stringify(record), record.expiresAt);
  }

  async consume(digest: string): Promise<Consumed<AuthorizationCodeRecord> | null> {
    return consumed<AuthorizationCodeRecord>(await this.door.write('consume', this.key(digest)));
  }

  private key(digest: string): string {
    return this.door.key(`code:${digest}`);
  }
}
