import { isMetadataClient } from '../client-metadata/client-id.js';
import type { ApplicationRecord, GrantRecord } from '../store/store.js';

/**
 * Remembered consent: when a signed-in user's earlier approval spares them the consent page.
 *
 * The rule (Doorkeeper's for an application already authorized with those scopes, with the
 * exception RFC 8252 section 8.6 and RFC 9700 section 2.1 make for clients whose identity cannot
 * be assured, as node-oidc-provider makes it for native clients): the page is skipped only when
 * 1. the user has a grant to the application that covers every scope and every resource asked for,
 * 2. the request does not ask for the page (`prompt=consent`), and
 * 3. the application's identity can be assured for this request: a confidential application
 *    (it redeems the code with its secret) sending the user back to a web address. A public
 *    client (no secret: a browser or device app, and every client known by its metadata
 *    document), and any request whose redirect URI is a loopback address or a custom scheme (a
 *    native app's, where any app on the device may register the same, RFC 8252 sections 7.1 and
 *    7.3, and whose secret, shipped in every copy, is no secret, section 8.5), is shown the page
 *    every time, with what the user approved before.
 * A request for more than the grant shows the page for the difference; approving it grows the grant.
 */

/** Why the consent page is shown. */
export type ConsentReason =
  /** No grant: the user never approved this application (or disconnected it). */
  | 'no_grant'
  /** The request asks for scopes or resources the grant does not cover. */
  | 'more_requested'
  /** The application asked for the page (`prompt=consent`). */
  | 'prompt_consent'
  /** Covered, but the application's identity cannot be assured (rule 3): it is never skipped silently. */
  | 'client_not_assured';

export interface ConsentQuestion {
  application: ApplicationRecord;
  /** The request's redirect URI (already checked as registered). */
  redirectUri: string;
  /** The scopes and the resources (audience) the request would be granted. */
  scopes: readonly string[];
  audience: readonly string[];
  /** The user's grant to the application, if any. */
  grant: GrantRecord | null;
  /** `prompt` asks for the consent page. */
  promptConsent: boolean;
}

export type ConsentAnswer =
  | { required: false; grant: GrantRecord }
  | {
      required: true;
      reason: ConsentReason;
      /**
       * What a request that allows no page (`prompt=none`) is answered with (OpenID Connect Core
       * 1.0 section 3.1.2.6): `consent_required` when the approval itself is missing,
       * `interaction_required` when it is there but the client is asked every time (as
       * node-oidc-provider answers for native clients).
       */
      promptNone: 'CONSENT_REQUIRED' | 'INTERACTION_REQUIRED';
      grant: GrantRecord | null;
      /** What the request asks for beyond the grant (everything without one): what the page presents as new. */
      newScopes: string[];
      newResources: string[];
    };

/** Whether the consent page must be shown for this request: the one place the rule above is decided. */
export function consentRequired(question: ConsentQuestion): ConsentAnswer {
  const { grant } = question;
  const newScopes = question.scopes.filter((scope) => grant === null || !grant.scopes.includes(scope));
  const newResources = question.audience.filter((resource) => grant === null || !grant.resources.includes(resource));
  const ask = (reason: ConsentReason): ConsentAnswer => ({
    required: true,
    reason,
    promptNone: reason === 'client_not_assured' ? 'INTERACTION_REQUIRED' : 'CONSENT_REQUIRED',
    grant,
    newScopes,
    newResources,
  });
  if (grant === null) return ask('no_grant');
  if (newScopes.length > 0 || newResources.length > 0) return ask('more_requested');
  if (question.promptConsent) return ask('prompt_consent');
  if (!clientIdentityAssured(question.application, question.redirectUri)) return ask('client_not_assured');
  return { required: false, grant };
}

/**
 * A confidential application (its secret redeems the code) sending the user back to a web
 * address; never a public client, a client known by its metadata document, or a redirect URI on
 * a loopback address or with a custom scheme (a native app's).
 */
export function clientIdentityAssured(application: ApplicationRecord, redirectUri: string): boolean {
  if (!application.confidential || isMetadataClient(application)) return false;
  return !isNativeRedirectUri(redirectUri);
}

/** A native app's redirect URI (RFC 8252 section 7): a custom scheme, or http on a loopback address. */
export function isNativeRedirectUri(redirectUri: string): boolean {
  const url = URL.parse(redirectUri);
  if (url === null) return true;
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return true;
  const host = url.hostname.toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost') || host === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(host);
}

/** `prompt` as OpenID Connect Core 1.0 section 3.1.2.1 gives it: space-separated values. */
export function promptAsksForConsent(prompt: string | undefined): boolean {
  return prompt !== undefined && prompt.split(' ').includes('consent');
}
