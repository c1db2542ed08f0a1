import type { IssuerConfig } from '../../config/schema.js';
import type { Counters } from '../../store/store.js';
import { addressKey } from '../../http/client-address.js';
import { tokenDigest } from '../../token/token-value.js';

/**
 * Failed logins counted per account and per client address in the store, so every sidecar
 * shares the count; an IPv6 address by its /64, as the connection limits count it. An attempt is counted before the password is checked: parallel guesses
 * cannot all slip under the limit while the first ones are still being hashed. What turns out
 * not to be a failure is taken back: a success clears the account's count and returns the
 * address's one; an attempt the user source could not judge returns both.
 */
export interface LoginAttempt {
  succeeded(): Promise<void>;
  /** The user source could not answer: the attempt does not count. */
  undecided(): Promise<void>;
}

export class LoginThrottle {
  private readonly windowMs: number;

  constructor(
    private readonly counters: Counters,
    private readonly limits: Readonly<IssuerConfig['loginThrottle']>,
  ) {
    this.windowMs = Math.max(1, limits.windowSeconds * 1000);
  }

  /** Counts the attempt; null when the address or the account is over its limit (then the password must not be checked). */
  async begin(email: string, address: string): Promise<LoginAttempt | null> {
    const addressCounter = `login-address:${addressKey(address)}`;
    if ((await this.counters.increment(addressCounter, this.windowMs)) > this.limits.maxAttemptsPerAddress) return null;
    // The account key is a digest: e-mail addresses do not belong in store key names.
    const accountKey = `login-account:${tokenDigest(email.toLowerCase())}`;
    if ((await this.counters.increment(accountKey, this.windowMs)) > this.limits.maxAttemptsPerAccount) return null;
    return {
      succeeded: async () => {
        await Promise.all([this.counters.reset(accountKey), this.counters.decrement(addressCounter)]);
      },
      undecided: async () => {
        await Promise.all([this.counters.decrement(accountKey), this.counters.decrement(addressCounter)]);
      },
    };
  }
}
