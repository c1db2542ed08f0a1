import { hashPassword } from '../../src/issuer/passwords.js';
import type { ApplicationRecord, Store } from '../../src/store/store.js';

export function application(overrides: Partial<ApplicationRecord> = {}): ApplicationRecord {
  return {
    clientId: 'box-office',
    name: 'Box Office',
    secretDigest: 'not-used-here',
    redirectUris: ['https://app.example/cb'],
    scopes: ['public'],
    confidential: true,
    createdAt: Date.now(),
    ...overrides,
  };
}

export async function createUser(store: Store, id: string, email: string, password: string): Promise<void> {
  const created = await store.users.create({ id, email: email.toLowerCase(), passwordHash: await hashPassword(password), createdAt: Date.now() });
  if (!created) throw new Error(`user ${email} exists already`);
}

export interface PageResponse {
  status: number;
  headers: Headers;
  text: string;
  /** The Location header, if any. */
  location: string | null;
}

/**
 * A browser stand-in over real HTTP: keeps the cookies it is given (per name, as a browser
 * would for one path), never follows redirects by itself, reads hidden form fields.
 */
export class FormClient {
  readonly cookies = new Map<string, string>();

  constructor(
    readonly baseUrl: string,
    private readonly extraHeaders: Record<string, string> = {},
  ) {}

  async get(path: string): Promise<PageResponse> {
    return this.send(path, { method: 'GET' });
  }

  async post(path: string, form: Record<string, string | string[]>): Promise<PageResponse> {
    const body = new URLSearchParams();
    for (const [name, value] of Object.entries(form)) for (const item of [value].flat()) body.append(name, item);
    return this.send(path, { method: 'POST', body, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  }

  /** Follows a same-site redirect the way a browser would (303 -> GET). */
  async follow(response: PageResponse): Promise<PageResponse> {
    if (response.location === null) throw new Error(`no redirect (status ${response.status})`);
    const target = new URL(response.location, this.baseUrl);
    if (target.origin !== new URL(this.baseUrl).origin) throw new Error(`redirect leaves the site: ${response.location}`);
    return this.get(target.pathname + target.search);
  }

  cookieHeader(): string {
    return [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }

  private async send(path: string, init: RequestInit): Promise<PageResponse> {
    const headers = new Headers({ ...this.extraHeaders, ...(init.headers as Record<string, string> | undefined) });
    if (this.cookies.size > 0) headers.set('cookie', this.cookieHeader());
    const response = await fetch(new URL(path, this.baseUrl), { ...init, headers, redirect: 'manual' });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const [name, ...rest] = pair!.split('=');
      const value = rest.join('=');
      if (/expires=Thu, 01 Jan 1970/i.test(line) || /max-age=0/i.test(line) || value === '') this.cookies.delete(name!.trim());
      else this.cookies.set(name!.trim(), value);
    }
    return { status: response.status, headers: response.headers, text: await response.text(), location: response.headers.get('location') };
  }
}

/**
 * A person at the authorization page: opens `path` (an authorization request), signs in with
 * `email` and `password`, and approves on the consent page. Returns the consent page and where
 * the approval sends the browser (the application's redirect URI, with the code).
 */
export async function signInAndApprove(browser: FormClient, path: string, email: string, password: string): Promise<{ consent: PageResponse; location: URL }> {
  const login = await browser.get(path);
  if (login.status !== 200) throw new Error(`the authorization page answered ${login.status}: ${login.text.slice(0, 500)}`);
  const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email, password });
  const consent = await browser.follow(signedIn);
  if (consent.status !== 200) throw new Error(`the consent page answered ${consent.status}`);
  const approved = await browser.post('/oauth/authorize/decision', { ...formFields(consent.text), decision: 'approve' });
  return { consent, location: new URL(approved.location!) };
}

/**
 * The same, when the user may have approved the application before: after sign-in a remembered
 * grant may send the code back at once, without the consent page (consent null then).
 */
export async function signInAndAuthorize(
  browser: FormClient,
  path: string,
  email: string,
  password: string,
): Promise<{ consent: PageResponse | null; location: URL }> {
  const login = await browser.get(path);
  if (login.status !== 200) throw new Error(`the authorization page answered ${login.status}: ${login.text.slice(0, 500)}`);
  const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(login.text), email, password });
  const next = await browser.follow(signedIn);
  if (next.status === 302) return { consent: null, location: new URL(next.location!) };
  if (next.status !== 200) throw new Error(`the consent page answered ${next.status}`);
  const approved = await browser.post('/oauth/authorize/decision', { ...formFields(next.text), decision: 'approve' });
  return { consent: next, location: new URL(approved.location!) };
}

/** The value of a hidden input in a page. */
export function hiddenField(html: string, name: string): string {
  const match = new RegExp(`<input type="hidden" name="${name}" value="([^"]*)">`).exec(html);
  if (match === null) throw new Error(`no hidden field ${name} in the page`);
  return match[1]!;
}

/** The form fields a page's form (by action) carries, hidden ones included. */
export function formFields(html: string): { csrf_token: string; request_id: string } {
  return { csrf_token: hiddenField(html, 'csrf_token'), request_id: hiddenField(html, 'request_id') };
}

export function authorizePath(parameters: Record<string, string | string[]>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(parameters)) for (const item of [value].flat()) query.append(name, item);
  return `/oauth/authorize?${query.toString()}`;
}
