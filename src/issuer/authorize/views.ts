import { createHash } from 'node:crypto';
import type { ErrorCode, TokengateError } from '../../errors.js';
import { html, SafeHtml } from './html.js';

/**
 * The pages of the authorization endpoint: sign in, consent, error. Server-rendered, no
 * JavaScript at all, every value escaped by the `html` tag. The stylesheet is inline and
 * allowed by its hash in the Content-Security-Policy, so no inline script could run even if
 * markup were ever injected.
 */

export interface Site {
  serviceName: string;
  /** Host of the issuer, shown in the footer so the user can see where they are typing. */
  issuerHost: string;
  /** The issuer is reached over https: only then does the footer call the sign-in secure. */
  secure: boolean;
}

export interface Page {
  status: number;
  title: string;
  body: SafeHtml;
  /** Where this page's forms may lead, besides this site (CSP form-action also governs the redirect after a POST). */
  formTargets?: string[];
}

const STYLESHEET = `
:root{color-scheme:light dark;--bg:#f3f4f7;--card:#fff;--text:#1b1f2a;--muted:#5b6373;--line:#dfe2e8;--accent:#3b4fd8;--accent-text:#fff;--accent-hover:#2f41b8;--danger:#b42318;--danger-bg:#fef3f2;--focus:#1d4ed8;--chip:#eef0fd}
@media (prefers-color-scheme:dark){:root{--bg:#12141a;--card:#1c1f27;--text:#eceef3;--muted:#a3aab8;--line:#2e323d;--accent:#7c8cff;--accent-text:#0d1020;--accent-hover:#9aa6ff;--danger:#ff8a80;--danger-bg:#3a1d1d;--focus:#9ab0ff;--chip:#262a3a}}
*{box-sizing:border-box}
html{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;font-size:16px;line-height:1.5;color:var(--text);background:var(--bg)}
body{margin:0;min-height:100vh;display:flex;align-items:flex-start;justify-content:center;padding:48px 16px}
.shell{width:100%;max-width:420px}
.brand{display:flex;align-items:center;justify-content:center;gap:10px;margin-bottom:24px;font-weight:650;font-size:1.15rem;letter-spacing:-.01em}
.brand svg{width:32px;height:32px}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:32px;box-shadow:0 1px 2px rgba(16,24,40,.05),0 8px 24px rgba(16,24,40,.06)}
h1{font-size:1.45rem;line-height:1.3;margin:0 0 6px;letter-spacing:-.015em;font-weight:650}
h2{font-size:1rem;margin:24px 0 8px;font-weight:600}
.lead{margin:0 0 24px;color:var(--muted)}
.lead strong,h1 strong{color:var(--text)}
.field{margin-bottom:18px}
label{display:block;font-weight:560;margin-bottom:6px}
input[type=email],input[type=password]{width:100%;font:inherit;padding:10px 12px;border:1px solid var(--line);border-radius:8px;background:var(--card);color:var(--text)}
input[aria-invalid=true]{border-color:var(--danger)}
.field-error{margin:6px 0 0;color:var(--danger);font-size:.9rem}
.alert{margin:0 0 20px;padding:12px 14px;border-radius:8px;background:var(--danger-bg);color:var(--danger);font-weight:520;border:1px solid currentColor}
.button{display:inline-flex;align-items:center;justify-content:center;font:inherit;font-weight:600;padding:10px 18px;border-radius:8px;border:1px solid transparent;cursor:pointer;min-height:44px}
.primary{background:var(--accent);color:var(--accent-text)}
.primary:hover{background:var(--accent-hover)}
.secondary{background:transparent;color:var(--text);border-color:var(--line)}
.secondary:hover{background:var(--bg)}
.block{width:100%;margin-top:6px}
.actions{display:flex;gap:12px;justify-content:flex-end;margin-top:28px}
.actions .button{flex:1}
.link{background:none;border:0;padding:0;font:inherit;color:var(--accent);cursor:pointer;text-decoration:underline}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
input:focus-visible{outline-offset:0}
.app-badge{width:56px;height:56px;border-radius:14px;display:flex;align-items:center;justify-content:center;font-size:1.6rem;font-weight:700;background:var(--chip);color:var(--accent);margin-bottom:16px}
.account{display:flex;flex-wrap:wrap;gap:4px 8px;align-items:baseline;margin:12px 0 0;padding:10px 12px;border-radius:8px;background:var(--bg);font-size:.95rem}
.account form{margin:0 0 0 auto}
.scopes{margin:0;padding:0;list-style:none}
.scopes li{position:relative;padding:10px 0 10px 28px;border-top:1px solid var(--line)}
.scopes li:last-child{border-bottom:1px solid var(--line)}
.scopes li::before{content:"";position:absolute;left:4px;top:17px;width:10px;height:6px;border-left:2px solid var(--accent);border-bottom:2px solid var(--accent);transform:rotate(-45deg)}
.granted li::before{border-color:var(--muted)}
.note,.muted{color:var(--muted);font-size:.92rem}
.note{margin:16px 0 0}
.client-origin{margin:12px 0 0;padding:10px 12px;border-radius:8px;border:1px solid var(--line);font-size:.95rem;overflow-wrap:anywhere}
.error-icon{width:44px;height:44px;border-radius:50%;display:flex;align-items:center;justify-content:center;background:var(--danger-bg);color:var(--danger);font-weight:700;font-size:1.3rem;margin-bottom:16px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em}
.foot{margin-top:20px;text-align:center;color:var(--muted);font-size:.85rem}
.notice{margin:16px 0 0;padding:12px 14px;border-radius:8px;border:1px solid var(--line);background:var(--chip);font-weight:520}
.connections{margin:8px 0 0;padding:0;list-style:none}
.connection{padding:20px 0;border-top:1px solid var(--line)}
.connection h2{margin:0}
.connection .muted{margin:2px 0 10px;overflow-wrap:anywhere}
.can{margin:0 0 4px}
.account+.lead,.notice+.lead{margin-top:16px}
.dates{display:grid;grid-template-columns:auto 1fr;gap:2px 12px;margin:12px 0;font-size:.95rem}
.dates dt{color:var(--muted)}
.dates dd{margin:0}
a.button{text-decoration:none}
.visually-hidden{position:absolute;width:1px;height:1px;margin:-1px;padding:0;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap;border:0}
@media (max-width:480px){body{padding:24px 12px}.card{padding:24px}}
`;
const STYLESHEET_HASH = `'sha256-${createHash('sha256').update(STYLESHEET).digest('base64')}'`;
// Our own text with no markup in it; it must go out byte for byte as hashed, hence not escaped.
const STYLESHEET_MARKUP = new SafeHtml(STYLESHEET);

/**
 * No script at all, no plugin, no base tag, no framing (clickjacking a consent page would let
 * another site trick a click on Approve); forms may only post here and, on the consent page,
 * lead on to the application's registered redirect_uri.
 */
export function contentSecurityPolicy(formTargets: readonly string[] = []): string {
  return [
    "default-src 'none'",
    `style-src ${STYLESHEET_HASH}`,
    `form-action 'self'${formTargets.map((target) => ` ${target}`).join('')}`,
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ');
}

/** The CSP source that lets a form submission end at `uri`: its origin, or its scheme for an app's custom scheme. */
export function formTargetOf(uri: string): string {
  const url = new URL(uri);
  return url.origin !== 'null' ? url.origin : url.protocol;
}

const LOGO = html`<svg viewBox="0 0 32 32" aria-hidden="true" focusable="false"><rect width="32" height="32" rx="8" fill="currentColor" opacity=".12"/><path d="M9 11.5A2.5 2.5 0 0 1 11.5 9h9a2.5 2.5 0 0 1 2.5 2.5v2a2.5 2.5 0 0 0 0 5v2a2.5 2.5 0 0 1-2.5 2.5h-9A2.5 2.5 0 0 1 9 20.5v-2a2.5 2.5 0 0 0 0-5z" fill="none" stroke="currentColor" stroke-width="2" stroke-linejoin="round"/><path d="M18 12v8" stroke="currentColor" stroke-width="2" stroke-dasharray="2 2"/></svg>`;

export function renderDocument(page: Page, site: Site): string {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex">
<title>${page.title} · ${site.serviceName}</title>
<style>${STYLESHEET_MARKUP}</style>
</head>
<body>
<div class="shell">
<header class="brand">${LOGO}<span>${site.serviceName}</span></header>
<main class="card" aria-labelledby="title">
${page.body}
</main>
<footer class="foot">${site.secure ? 'Secure sign-in' : 'Sign-in'} · ${site.issuerHost}</footer>
</div>
</body>
</html>
`.markup;
}

/** Hidden fields every form carries: the CSRF token and which pending request it answers. */
function formState(form: FormState): SafeHtml {
  return html`<input type="hidden" name="csrf_token" value="${form.csrfToken}"><input type="hidden" name="request_id" value="${form.requestId}">`;
}

export interface FormState {
  csrfToken: string;
  requestId: string;
}

export type LoginProblem = { kind: 'credentials' } | { kind: 'fields'; email?: string; password?: string };

export const INCORRECT_CREDENTIALS = 'The e-mail or password is incorrect.';

/** The application a sign-in continues to: its name, and the redirect URI its request names (already checked as registered). */
export interface SignInFor {
  name: string;
  redirectUri: string;
}

/** `application` null: the sign-in of the account page, which no application asked for. */
export function loginPage(input: { application: SignInFor | null; form: FormState; email?: string; problem?: LoginProblem }): Page {
  const { problem } = input;
  const credentials = problem?.kind === 'credentials';
  const fieldProblem = (field: 'email' | 'password') => (problem?.kind === 'fields' ? problem[field] : undefined);
  // Focus goes to the first field that needs the user: the password once the e-mail is kept.
  const focusPassword = credentials || (fieldProblem('email') === undefined && fieldProblem('password') !== undefined);
  const field = (name: 'email' | 'password', label: string, attributes: { type: string; autocomplete: string; value?: string }) => {
    const error = fieldProblem(name);
    const describedBy = [credentials ? 'login-error' : null, error !== undefined ? `${name}-error` : null].filter(Boolean).join(' ');
    return html`<div class="field">
<label for="${name}">${label}</label>
<input id="${name}" name="${name}" type="${attributes.type}" autocomplete="${attributes.autocomplete}" required${attributes.value !== undefined ? html` value="${attributes.value}"` : ''}${(name === 'password') === focusPassword ? html` autofocus` : ''}${describedBy !== '' ? html` aria-invalid="true" aria-describedby="${describedBy}"` : ''}>
${error !== undefined ? html`<p class="field-error" id="${name}-error">${error}</p>` : ''}
</div>`;
  };
  return {
    status: 200,
    title: 'Sign in',
    // A remembered approval (or an error for the application) sends the code from the sign-in's
    // redirect straight to the application: form-action must allow it, as on the consent page.
    ...(input.application === null ? {} : { formTargets: [formTargetOf(input.application.redirectUri)] }),
    body: html`<h1 id="title">Sign in</h1>
<p class="lead">${input.application === null ? 'to see the applications connected to your account' : html`to continue to <strong>${input.application.name}</strong>`}</p>
<form method="post" action="/oauth/authorize/login">
${formState(input.form)}
${credentials ? html`<p class="alert" id="login-error" role="alert">${INCORRECT_CREDENTIALS}</p>` : ''}
${field('email', 'E-mail address', { type: 'email', autocomplete: 'username', value: input.email ?? '' })}
${field('password', 'Password', { type: 'password', autocomplete: 'current-password' })}
<button class="button primary block" type="submit">Sign in</button>
</form>`,
  };
}

/** A client described by a metadata document: shown by its host first, the name it gives itself only after. */
export interface DocumentClient {
  /** Its client id, the document's URL. */
  url: string;
  host: string;
  clientName: string | null;
}

/** The user's earlier approval of the application, on a consent page shown again. */
export interface EarlierApproval {
  /** When the user last approved something for it. */
  approvedAt: number;
  /** What it may already do, in words (listed when the request asks for more). */
  scopes: string[];
  /**
   * Why the page is shown again: `more`, the request asks for more than was approved (the page
   * lists only what is new); `asked`, the application asked for the page (`prompt=consent`);
   * `every-time`, its identity cannot be assured, so it is never let through silently.
   */
  why: 'more' | 'asked' | 'every-time';
}

export function consentPage(input: {
  applicationName: string;
  /** Set for a client a metadata document describes: its page says where its description came from. */
  documentClient?: DocumentClient;
  serviceName: string;
  email: string | null;
  /** In words: everything the request asks for, or, when `earlier.why` is `more`, what is new. */
  scopes: string[];
  /** The resources to name (RFC 8707): those the application asked for by name, or the new ones; none shown when empty. */
  resources: string[];
  redirectUri: string;
  form: FormState;
  earlier?: EarlierApproval;
}): Page {
  const name = input.applicationName;
  const initial = Array.from(name.trim())[0]?.toUpperCase() ?? '?';
  const target = new URL(input.redirectUri);
  const more = input.earlier?.why === 'more';
  return {
    status: 200,
    title: `Authorize ${name}`,
    formTargets: [formTargetOf(input.redirectUri)],
    body: html`<div class="app-badge" aria-hidden="true">${initial}</div>
<h1 id="title"><strong>${name}</strong> wants ${more ? 'more access to' : 'to access'} your ${input.serviceName} account</h1>
<div class="account"><span>Signed in as <strong>${input.email ?? 'you'}</strong></span>
<form method="post" action="/oauth/authorize/switch-account">${formState(input.form)}<button class="link" type="submit">Use another account</button></form></div>
${input.documentClient === undefined ? '' : documentClientNote(input.documentClient)}${
      input.scopes.length === 0
        ? ''
        : html`<h2>${more ? html`New: this will also allow ${name} to:` : html`This will allow ${name} to:`}</h2>
<ul class="scopes">
${input.scopes.map((scope) => html`<li>${scope}</li>\n`)}</ul>
`
    }${input.resources.length === 0 ? '' : html`<p class="note">${more ? 'New: also at ' : 'Only at '}${input.resources.map((resource, index) => html`${index === 0 ? '' : ', '}<strong>${resourceLabel(resource)}</strong>`)}.</p>\n`}${input.earlier === undefined ? '' : earlierApprovalNote(name, input.earlier)}<p class="note">After you choose, you will be sent back to <strong>${target.host || target.protocol}</strong>. Approve only if you trust ${name}.</p>
<form method="post" action="/oauth/authorize/decision" class="actions">
${formState(input.form)}
<button class="button secondary" type="submit" name="decision" value="deny">Deny</button>
<button class="button primary" type="submit" name="decision" value="approve">Approve</button>
</form>`,
  };
}

/** What the user approved before, and why they are asked again. */
function earlierApprovalNote(name: string, earlier: EarlierApproval): SafeHtml {
  const when = html`<time datetime="${new Date(earlier.approvedAt).toISOString()}">${formatDate(earlier.approvedAt)}</time>`;
  if (earlier.why === 'more') {
    return html`<h2>${name} can already:</h2>
<ul class="scopes granted">
${earlier.scopes.map((scope) => html`<li>${scope}</li>\n`)}</ul>
<p class="note">You allowed that on ${when}.</p>
`;
  }
  const reason =
    earlier.why === 'asked'
      ? html`${name} asked to have you confirm it.`
      : html`You are asked each time: ${name} runs in a browser or on a device, where this service cannot tell it apart from another application posing as it.`;
  return html`<p class="note">You allowed ${name} this on ${when}. ${reason}</p>
`;
}

const DATE = new Intl.DateTimeFormat('en-GB', { day: 'numeric', month: 'long', year: 'numeric', timeZone: 'UTC' });

/** A day as a person reads it ("3 December 2026"), in UTC: the pages know nothing of the reader's time zone. */
export function formatDate(epochMs: number): string {
  return DATE.format(epochMs);
}

/**
 * Where a document client's description comes from. Its host is what the person can trust (the
 * operator allowed it; the document was fetched from it over https); its own name is a claim,
 * shown in quotes after the host, never in its place.
 */
function documentClientNote(client: DocumentClient): SafeHtml {
  return html`<p class="client-origin">Not registered with this service: it identifies itself by its address <strong>${client.url}</strong>${client.clientName === null ? '' : html`, and calls itself “${client.clientName}”`}. Approve only if you meant to connect <strong>${client.host}</strong>.</p>
`;
}

/** A resource identifier as a person reads it: host and path, the scheme left out. */
function resourceLabel(identifier: string): string {
  const url = new URL(identifier);
  return `${url.host}${url.pathname === '/' ? '' : url.pathname}`;
}

const ERROR_TITLES: Partial<Record<ErrorCode, string>> = {
  UNKNOWN_CLIENT: 'Unknown application',
  CLIENT_NOT_ALLOWED: 'This application is not allowed',
  CLIENT_METADATA_UNUSABLE: 'This application could not be verified',
  INVALID_REDIRECT_URI: 'This sign-in link is not valid',
  INVALID_REQUEST: 'This sign-in link is not valid',
  FORM_EXPIRED: 'This page has expired',
  AUTHORIZATION_REQUEST_EXPIRED: 'This sign-in request has expired',
  TOO_MANY_REQUESTS: 'Too many sign-in attempts',
  USER_SOURCE_UNAVAILABLE: 'Sign-in is temporarily unavailable',
  STORE_UNAVAILABLE: 'Sign-in is temporarily unavailable',
};

export function errorPage(failure: TokengateError): Page {
  const title = ERROR_TITLES[failure.code] ?? 'Something went wrong';
  return {
    status: failure.status,
    title,
    body: html`<div class="error-icon" aria-hidden="true">!</div>
<h1 id="title">${title}</h1>
<p>${failure.description}</p>
<p class="muted">Error code: <code>${failure.error}</code></p>`,
  };
}
