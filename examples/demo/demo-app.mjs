// @ts-check
/**
 * The demo's application: what a ticketing app does with tokengate, in one page. It signs a
 * user in with the authorization code flow (PKCE, state bound to this browser), shows the code
 * it received, exchanges it at the token endpoint and calls /api/public/me through the gateway
 * with the user token, and shows each answer. It signs in as any public application registered
 * with its callback URL, which it finds through tokengate's admin API (a demo's shortcut: a real
 * application knows its own client_id).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

const STATE_COOKIE = 'demo_state';
const PENDING_TTL_MS = 10 * 60 * 1000;

/**
 * @typedef {{ client_id: string, name: string, confidential: boolean, redirect_uris: string[] }} Application
 * @typedef {{ clientId: string, verifier: string, expiresAt: number }} PendingSignIn
 * @typedef {{ status: number, headers?: Record<string, string>, html: string }} Page
 */

/**
 * @param {{ callbackUrl: string, publicUrl: string, opsUrl: string, adminToken?: string }} options
 *   callbackUrl: this app's redirect URI as the browser reaches it; publicUrl and opsUrl: where
 *   this process reaches tokengate's listeners.
 */
export function createDemoApp({ callbackUrl, publicUrl, opsUrl, adminToken = '' }) {
  /** @type {Map<string, PendingSignIn>} sign-ins in progress, by state */
  const pending = new Map();

  /** @returns {Promise<{ authorization_endpoint: string, token_endpoint: string, issuer: string }>} */
  async function metadata() {
    const response = await fetch(new URL('/.well-known/oauth-authorization-server', publicUrl));
    if (!response.ok) throw new Error(`tokengate's metadata answered ${response.status}`);
    return /** @type {any} */ (await response.json());
  }

  /** @returns {Promise<Application[]>} the public applications that may send users back here */
  async function applications() {
    const response = await fetch(new URL('/admin/applications', opsUrl), { headers: adminToken === '' ? {} : { authorization: `Bearer ${adminToken}` } });
    if (!response.ok) throw new Error(`tokengate's admin API answered ${response.status}`);
    const { applications } = /** @type {{ applications: Application[] }} */ (await response.json());
    return applications.filter((application) => !application.confidential && application.redirect_uris.includes(callbackUrl));
  }

  /** @returns {Promise<Page>} */
  async function home() {
    const found = await applications();
    const choices =
      found.length === 0
        ? `<p>No public application sends users back to <code>${escape(callbackUrl)}</code> yet. Register one:</p>
<pre>npx tokengate apps create --name "Fan app" --public --redirect-uri ${escape(callbackUrl)}</pre>
<p>and reload this page.</p>`
        : `<ul class="choices">${found.map((application) => `<li><a href="/sign-in?client_id=${encodeURIComponent(application.client_id)}">Sign in with ${escape(application.name)}</a></li>`).join('')}</ul>`;
    return page(
      200,
      'tokengate demo',
      `<h1>tokengate demo</h1>
<p>This page plays a ticketing app. Signing in runs the OAuth authorization code flow with tokengate: its sign-in and consent pages, then back here with a code, which this app exchanges for tokens and uses on the user API.</p>
${choices}`,
    );
  }

  /**
   * @param {URL} url
   * @returns {Promise<Page>}
   */
  async function signIn(url) {
    const clientId = url.searchParams.get('client_id');
    if (clientId === null || clientId === '') return page(400, 'No application', '<p>Choose an application on the <a href="/">demo page</a>.</p>');
    const state = randomBytes(32).toString('base64url');
    const verifier = randomBytes(32).toString('base64url');
    pending.set(state, { clientId, verifier, expiresAt: Date.now() + PENDING_TTL_MS });
    const authorize = new URL((await metadata()).authorization_endpoint);
    for (const [name, value] of Object.entries({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: callbackUrl,
      scope: 'public',
      state,
      code_challenge: createHash('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
    }))
      authorize.searchParams.set(name, value);
    return {
      status: 303,
      // The state goes back to this browser only: a callback from another browser (a code an attacker injects) does not match it.
      headers: { location: authorize.href, 'set-cookie': `${STATE_COOKIE}=${state}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${PENDING_TTL_MS / 1000}` },
      html: '',
    };
  }

  /**
   * @param {URL} url
   * @param {string | undefined} cookieHeader
   * @returns {Promise<Page>}
   */
  async function callback(url, cookieHeader) {
    const state = url.searchParams.get('state') ?? '';
    const signIn = pending.get(state);
    if (signIn === undefined || signIn.expiresAt < Date.now() || cookieOf(cookieHeader, STATE_COOKIE) !== state) {
      return page(
        400,
        'Not a sign-in of this browser',
        '<h1>Not a sign-in of this browser</h1><p>This callback\'s <code>state</code> matches no sign-in started here in this browser, so its code is not used. <a href="/">Start again</a>.</p>',
      );
    }
    pending.delete(state);
    const clear = { 'set-cookie': `${STATE_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0` };
    const error = url.searchParams.get('error');
    if (error !== null) {
      return {
        ...page(
          200,
          'Not signed in',
          `<h1>Not signed in</h1><p>tokengate answered <code>${escape(error)}</code>: ${escape(url.searchParams.get('error_description') ?? '')}</p><p><a href="/">Back</a></p>`,
        ),
        headers: clear,
      };
    }
    const code = url.searchParams.get('code') ?? '';
    const { token_endpoint: tokenEndpoint, issuer } = await metadata();
    const exchange = await fetch(tokenEndpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code,
        redirect_uri: callbackUrl,
        client_id: signIn.clientId,
        code_verifier: signIn.verifier,
      }),
    });
    const tokens = /** @type {Record<string, unknown>} */ (await exchange.json());
    const accessToken = typeof tokens.access_token === 'string' ? tokens.access_token : null;
    const shownTokens = { ...tokens, ...(typeof tokens.refresh_token === 'string' ? { refresh_token: '(received; not shown)' } : {}) };
    let steps = `<h2>1. The authorization code</h2>
<p>tokengate sent the browser back here with <code>?code=…&amp;state=…</code>; the state is the one this browser's sign-in started with.</p>
<pre class="value" id="code">${escape(code)}</pre>
<h2>2. Exchanged at the token endpoint</h2>
<p><code>POST ${escape(tokenEndpoint)}</code> with the code, the PKCE verifier and the client id answered <strong id="token-status">${exchange.status}</strong>:</p>
<pre id="token-response">${escape(JSON.stringify(shownTokens, null, 2))}</pre>`;
    if (accessToken !== null) {
      const me = new URL('/api/public/me', issuer);
      const answer = await fetch(me, { headers: { authorization: `Bearer ${accessToken}` } });
      steps += `<h2>3. The user API, through the gateway</h2>
<p><code>GET ${escape(me.href)}</code> with the access token answered <strong id="me-status">${answer.status}</strong>:</p>
<pre id="me-response">${escape(await answer.text())}</pre>
<p>Try it yourself (this demo shows the token; a real app keeps it to itself):</p>
<pre>curl -s ${escape(new URL('/api/public/tickets', issuer).href)} -H "Authorization: Bearer ${escape(accessToken)}"</pre>`;
    }
    return { ...page(200, 'Signed in', `<h1>Signed in</h1>${steps}<p><a href="/">Back to the demo page</a></p>`), headers: clear };
  }

  return createServer(async (request, response) => {
    const url = new URL(request.url ?? '/', callbackUrl);
    /** @type {Page} */
    let answer;
    try {
      if (request.method !== 'GET') answer = page(405, 'Method not allowed', '<p>This demo only answers GET.</p>');
      else if (url.pathname === '/') answer = await home();
      else if (url.pathname === '/sign-in') answer = await signIn(url);
      else if (url.pathname === new URL(callbackUrl).pathname) answer = await callback(url, request.headers.cookie);
      else answer = page(404, 'Not found', '<p>Nothing here: see the <a href="/">demo page</a>.</p>');
    } catch (error) {
      answer = page(
        502,
        'tokengate did not answer',
        `<h1>tokengate did not answer</h1><p>${escape(/** @type {Error} */ (error).message)}. Is <code>npm run demo</code> still running?</p>`,
      );
    }
    response
      .writeHead(answer.status, {
        'content-type': 'text/html; charset=utf-8',
        'cache-control': 'no-store',
        'referrer-policy': 'no-referrer',
        'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; frame-ancestors 'none'",
        ...answer.headers,
      })
      .end(answer.html);
  });
}

/**
 * @param {number} status
 * @param {string} title
 * @param {string} body trusted HTML: every value in it is escaped by the caller
 * @returns {Page}
 */
function page(status, title, body) {
  return {
    status,
    html: `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${escape(title)} · tokengate demo</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem}pre{background:#f3f3f3;padding:.75rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all}.choices a{font-size:1.15rem}</style>
</head><body>${body}</body></html>`,
  };
}

/** @param {string} text */
function escape(text) {
  return text.replace(/[&<>"']/g, (character) => `&#${character.charCodeAt(0)};`);
}

/**
 * @param {string | undefined} header
 * @param {string} name
 */
function cookieOf(header, name) {
  for (const part of (header ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return value.join('=');
  }
  return undefined;
}
