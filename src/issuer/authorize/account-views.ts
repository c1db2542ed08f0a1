import { html, type SafeHtml } from './html.js';
import { formatDate, type Page } from './views.js';

/** One application the user connected, as the account page lists it. */
export interface Connection {
  clientId: string;
  /** The application's registered name; for a client known by its metadata document, its host (its own name is only a claim). */
  name: string;
  /** Where it sends the user back: the hosts of its redirect URIs (a custom scheme as itself), or its document's host. */
  hosts: string[];
  /** It is known by its metadata document (`clientId` is the document's URL), not registered. */
  documentClient: boolean;
  /** What it may do, in words. */
  scopes: string[];
  approvedAt: number;
  lastUsedAt: number;
}

/**
 * The account page: the applications connected to the signed-in user's account, each with a
 * Disconnect form, and sign-out. Every form carries the session's CSRF token.
 */
export function accountPage(input: { serviceName: string; email: string; csrfToken: string; connections: Connection[]; notice?: string }): Page {
  const csrf = html`<input type="hidden" name="csrf_token" value="${input.csrfToken}">`;
  return {
    status: 200,
    title: 'Connected applications',
    body: html`<h1 id="title">Connected applications</h1>
<div class="account"><span>Signed in as <strong>${input.email}</strong></span>
<form method="post" action="/oauth/account/sign-out">${csrf}<button class="link" type="submit">Sign out</button></form></div>
${input.notice === undefined ? '' : html`<p class="notice" role="status">${input.notice}</p>\n`}<p class="lead">These applications can use your ${input.serviceName} account. Disconnecting one ends its access at once: it must ask you again.</p>
${
  input.connections.length === 0
    ? html`<p>No application is connected to your account.</p>`
    : html`<ul class="connections">
${input.connections.map((connection, index) => connectionItem(connection, `connection-${index + 1}`, csrf))}</ul>`
}`,
  };
}

/** `headingId`: by position, unique on the page whatever characters client ids hold. */
function connectionItem(connection: Connection, headingId: string, csrf: SafeHtml): SafeHtml {
  const date = (epochMs: number) => html`<time datetime="${new Date(epochMs).toISOString()}">${formatDate(epochMs)}</time>`;
  return html`<li class="connection" aria-labelledby="${headingId}">
<h2 id="${headingId}">${connection.name}</h2>
<p class="muted">${connection.documentClient ? html`Not registered with this service: identified by its address ${connection.clientId}` : connection.hosts.join(', ')}</p>
<p class="can">It can:</p>
<ul class="scopes">
${connection.scopes.map((scope) => html`<li>${scope}</li>\n`)}</ul>
<dl class="dates"><dt>Approved</dt><dd>${date(connection.approvedAt)}</dd><dt>Last used</dt><dd>${date(connection.lastUsedAt)}</dd></dl>
<form method="post" action="/oauth/account/disconnect">${csrf}<input type="hidden" name="client_id" value="${connection.clientId}"><button class="button secondary" type="submit">Disconnect<span class="visually-hidden"> ${connection.name}</span></button></form>
</li>
`;
}

/** After sign-out: nothing of the session is left, only the way back in. */
export function signedOutPage(serviceName: string): Page {
  return {
    status: 200,
    title: 'Signed out',
    body: html`<h1 id="title">You are signed out</h1>
<p class="lead">You signed out of ${serviceName}. The applications you connected keep their access; to end one's, sign in and disconnect it.</p>
<p><a class="button secondary" href="/oauth/account">Sign in again</a></p>`,
  };
}
