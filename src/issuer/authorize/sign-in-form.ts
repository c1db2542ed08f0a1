import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Secrets } from '../../store/secrets.js';
import type { AuthorizationParameters } from './request.js';

/**
 * The sign-in form carries its authorization request itself, so that showing the sign-in page
 * stores nothing: an anonymous GET /oauth/authorize, however large or however many, costs the
 * store and the heap nothing. The request travels MAC'd (HMAC-SHA256 under a key every sidecar
 * shares through the store's secrets), with the time it stops being accepted; the page's CSRF
 * token is an HMAC of the browser's session cookie value under the same key (a signed
 * double-submit cookie): a cross-site page can neither read that cookie nor compute the token.
 * The request's parameters are capped in size before they get here (./request.ts), and are
 * checked again in full when the form comes back. A sign-in form shown for the account page
 * carries no request, only where it leads back to.
 */

const SECRET_NAME = 'sign-in-form-key';
const REQUEST_PURPOSE = 'tokengate sign-in request\n';
const CSRF_PURPOSE = 'tokengate sign-in csrf\n';

/** Where a signed-in user goes next: back to an authorization request, or to the account page. */
export type SignInTarget = { authorization: AuthorizationParameters } | { account: true };

/** The sealed form: an authorization request as `parameters` (the form's first shape), or `account`. */
interface SealedTarget {
  parameters?: AuthorizationParameters;
  account?: true;
  /** Unix milliseconds after which the form is refused. */
  expiresAt: number;
}

export class SignInForms {
  private key: Promise<Buffer> | undefined;

  constructor(
    /** The store's secrets, read when first needed (a reload may replace the store). */
    private readonly secrets: () => Secrets,
    private readonly lifetimeMs: number,
  ) {}

  /** The target as the form's hidden field: `payload.mac`, both base64url. */
  async seal(target: SignInTarget, now = Date.now()): Promise<string> {
    const expiresAt = now + this.lifetimeMs;
    const sealed: SealedTarget = 'authorization' in target ? { parameters: target.authorization, expiresAt } : { account: true, expiresAt };
    const payload = Buffer.from(JSON.stringify(sealed)).toString('base64url');
    return `${payload}.${await this.mac(REQUEST_PURPOSE, payload)}`;
  }

  /** The target this deployment sealed, when it has not expired; null otherwise. */
  async open(value: string | undefined, now = Date.now()): Promise<SignInTarget | null> {
    if (value === undefined) return null;
    const dot = value.indexOf('.');
    if (dot === -1) return null;
    const payload = value.slice(0, dot);
    if (!sameDigest(value.slice(dot + 1), await this.mac(REQUEST_PURPOSE, payload))) return null;
    // Only a payload this deployment wrote gets here.
    const sealed = JSON.parse(Buffer.from(payload, 'base64url').toString()) as SealedTarget;
    if (sealed.expiresAt <= now) return null;
    if (sealed.account === true) return { account: true };
    return sealed.parameters === undefined ? null : { authorization: sealed.parameters };
  }

  /** The CSRF token of a sign-in form shown to the browser holding `cookieValue`. */
  csrfToken(cookieValue: string): Promise<string> {
    return this.mac(CSRF_PURPOSE, cookieValue);
  }

  async csrfTokenMatches(cookieValue: string, presented: string | undefined): Promise<boolean> {
    return presented !== undefined && sameDigest(presented, await this.csrfToken(cookieValue));
  }

  private async mac(purpose: string, value: string): Promise<string> {
    this.key ??= this.secrets()
      .getOrCreate(SECRET_NAME, randomBytes(32).toString('base64url'))
      .then((encoded) => Buffer.from(encoded, 'base64url'))
      // A store that failed once is asked again next time.
      .catch((error: unknown) => {
        this.key = undefined;
        throw error;
      });
    return createHmac('sha256', await this.key)
      .update(purpose)
      .update(value)
      .digest('base64url');
  }
}

/** Constant time whatever the lengths: both sides hashed first. */
function sameDigest(presented: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(presented), digest(expected));
}
