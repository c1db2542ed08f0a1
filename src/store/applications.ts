import type { RedisDoor } from './backend.js';
import { cloneOrNull } from './expiring-map.js';
import { listRecords, parse } from './redis-records.js';

export interface ApplicationRecord {
  clientId: string;
  name: string;
  /** SHA-256 (base64url) of the client secret; null for a public client. */
  secretDigest: string | null;
  redirectUris: string[];
  scopes: string[];
  confidential: boolean;
  createdAt: number;
  /** `required`: the token endpoint issues this application DPoP-bound tokens only. Absent: `allowed`. */
  dpop?: 'required' | 'allowed';
  /** Resource identifiers its tokens may be for (RFC 8707); absent or empty: every registered resource. */
  resources?: string[];
  /** The rate limit policy (tier) that meters it instead of its routes' own; absent or null: theirs. */
  rateLimit?: string | null;
  /** The operator lets it exchange its users' tokens for tokens of other resources (RFC 8693). Absent: it may not. */
  tokenExchange?: boolean;
  /** Where RP-Initiated Logout may send the user after sign-out, compared exactly (OpenID Connect RP-Initiated Logout 1.0). Absent: nowhere. */
  postLogoutRedirectUris?: string[];
  /** Where its logout tokens are POSTed (OpenID Connect Back-Channel Logout 1.0). Absent: it is not told of logouts. */
  backchannelLogoutUri?: string;
  /** It needs `sid` in every logout token (`backchannel_logout_session_required`). Absent: false. */
  backchannelLogoutSessionRequired?: boolean;
  /** The algorithm of its ID tokens (OpenID Connect Dynamic Client Registration's `id_token_signed_response_alg`). Absent: RS256. */
  idTokenSignedResponseAlg?: 'RS256' | 'ES256';
}

/** The registered applications (OAuth clients). */
export interface Applications {
  put(app: ApplicationRecord): Promise<void>;
  get(clientId: string): Promise<ApplicationRecord | null>;
  list(): Promise<ApplicationRecord[]>;
  /** Removes the record alone; `deleteApplicationAndTokens` (./deletions.ts) also revokes its tokens. False when there was none. */
  delete(clientId: string): Promise<boolean>;
}

export class MemoryApplications implements Applications {
  private readonly records = new Map<string, ApplicationRecord>();

  async put(app: ApplicationRecord): Promise<void> {
    this.records.set(app.clientId, structuredClone(app));
  }

  async get(clientId: string): Promise<ApplicationRecord | null> {
    return cloneOrNull(this.records.get(clientId));
  }

  async list(): Promise<ApplicationRecord[]> {
    return [...this.records.values()].map((app) => structuredClone(app));
  }

  async delete(clientId: string): Promise<boolean> {
    return this.records.delete(clientId);
  }
}

/** Keys: `app:<client_id>` JSON ApplicationRecord; `apps` SET of client ids. */
export class RedisApplications implements Applications {
  constructor(private readonly door: RedisDoor) {}

  async put(app: ApplicationRecord): Promise<void> {
    // Listed first: a listed id without its record is skipped, a record that is not listed would be hidden.
    await this.door.write('sadd', this.door.key('apps'), app.clientId);
    await this.door.write('set', this.recordKey(app.clientId), JSON.stringify(app));
  }

  async get(clientId: string): Promise<ApplicationRecord | null> {
    return parse<ApplicationRecord>(await this.door.read<string | null>('get', this.recordKey(clientId)));
  }

  list(): Promise<ApplicationRecord[]> {
    return listRecords<ApplicationRecord>(this.door, this.door.key('apps'), (id) => this.recordKey(id));
  }

  async delete(clientId: string): Promise<boolean> {
    const deleted = await this.door.write<number>('del', this.recordKey(clientId));
    await this.door.write('srem', this.door.key('apps'), clientId);
    return deleted === 1;
  }

  private recordKey(clientId: string): string {
    return this.door.key(`app:${clientId}`);
  }
}
