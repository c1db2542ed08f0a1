import { html } from '../issuer/authorize/html.js';
import { formTargetOf, type Page } from '../issuer/authorize/views.js';

/**
 * The pages of RP-Initiated Logout, made like the sign-in pages (../issuer/authorize/views.ts):
 * server-rendered, no JavaScript, every value escaped, sent under the same headers and CSP.
 */

/** What the confirmation form carries back: the session's CSRF token and the request, checked again when it comes. */
export interface LogoutForm {
  csrfToken: string;
  clientId: string | null;
  postLogoutRedirectUri: string | null;
  state: string | null;
}

/**
 * "Sign out of the service?": a link another site put in front of the user (a GET) may only ask;
 * the user's answer is a POST carrying the session's CSRF token. Either answer leads back to the
 * application when it gave a registered post-logout redirect URI.
 */
export function confirmSignOutPage(input: { serviceName: string; email: string; applicationName: string | null; form: LogoutForm }): Page {
  const { form } = input;
  const back = form.postLogoutRedirectUri === null ? null : new URL(form.postLogoutRedirectUri);
  const hidden = (name: string, value: string | null) => (value === null ? '' : html`<input type="hidden" name="${name}" value="${value}">`);
  return {
    status: 200,
    title: 'Sign out',
    ...(form.postLogoutRedirectUri === null ? {} : { formTargets: [formTargetOf(form.postLogoutRedirectUri)] }),
    body: html`<h1 id="title">Sign out of ${input.serviceName}?</h1>
<p class="lead">${input.applicationName === null ? 'An application asks to sign you out.' : html`<strong>${input.applicationName}</strong> asks to sign you out.`} You are signed in as <strong>${input.email}</strong>.</p>
<p class="note">Signing out ends your session here: the next application that asks will have you sign in again.${back === null ? '' : html` After you choose, you will be sent back to <strong>${back.host}</strong>.`}</p>
<form method="post" action="/oauth/logout/confirm" class="actions">
<input type="hidden" name="csrf_token" value="${form.csrfToken}">${hidden('client_id', form.clientId)}${hidden('post_logout_redirect_uri', form.postLogoutRedirectUri)}${hidden('state', form.state)}
<button class="button secondary" type="submit" name="decision" value="stay">Stay signed in</button>
<button class="button primary" type="submit" name="decision" value="sign-out">Sign out</button>
</form>`,
  };
}

/** A sign-out request that cannot be followed: nobody is signed out, and the browser goes nowhere the request named. */
export function invalidLogoutPage(description: string): Page {
  return {
    status: 400,
    title: 'This sign-out link is not valid',
    body: html`<div class="error-icon" aria-hidden="true">!</div>
<h1 id="title">This sign-out link is not valid</h1>
<p>${description}</p>
<p>Nobody was signed out. To sign out of this service, use the button on <a href="/oauth/account">your account page</a>.</p>
<p class="muted">Error code: <code>invalid_request</code></p>`,
  };
}
