import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { tokenDigest } from '../../src/token/token-value.js';
import { basicAuthorization, type TestApplication } from './instance.js';
import { authorizePath, FormClient, formFields } from './issuer.js';
import { CUT, HUNG, HUNG_MS, REVOCATION_SETTLE_MS, type SoakLedger } from './soak-ledger.js';
import { ROUTES, type SoakDeployment, type SoakSidecar } from './soak-deployment.js';
import { sleep } from './wait.js';

/**
 * The chaos soak's clients: every kind of request a deployment serves, each in a loop of its
 * own until `running()` turns false, every answer put in the ledger with what its credential
 * was (test/support/soak-ledger.ts).
 */

interface TokenState {
  state: 'valid' | 'uncertain' | 'revoked';
  revokedAt: number;
  /** The grant it belongs to (authorization code and refresh tokens); null for client_credentials. */
  family: string | null;
}

/** Every token the soak was given, by value, and the valid ones to pick from. */
class Tokens {
  readonly all = new Map<string, TokenState>();
  readonly valid: string[] = [];
  readonly revoked: string[] = [];

  add(token: string, family: string | null = null): void {
    this.all.set(token, { state: 'valid', revokedAt: 0, family });
    this.valid.push(token);
    // Recent tokens are the ones a client uses; older ones stay in `all` for the final check.
    if (this.valid.length > 400) this.valid.splice(0, this.valid.length - 400);
  }

  /** A revocation is on its way: the token is judged again only once it is answered. */
  doubt(token: string): void {
    const state = this.all.get(token);
    if (state !== undefined) state.state = 'uncertain';
    const index = this.valid.indexOf(token);
    if (index >= 0) this.valid.splice(index, 1);
  }

  markRevoked(token: string, at: number): void {
    const state = this.all.get(token);
    if (state === undefined) return;
    state.state = 'revoked';
    state.revokedAt = at;
    this.revoked.push(token);
  }

  family(family: string): string[] {
    return [...this.all].filter(([, state]) => state.family === family && state.state === 'valid').map(([token]) => token);
  }

  /** What a token is for a request sent at `sentMs`: revoked only once its revocation settled. */
  judge(token: string, sentMs: number): 'valid' | 'revoked' | 'unknown' | null {
    const state = this.all.get(token);
    if (state === undefined) return 'unknown';
    if (state.state === 'valid') return 'valid';
    if (state.state === 'revoked' && sentMs >= state.revokedAt + REVOCATION_SETTLE_MS) return 'revoked';
    return null;
  }
}

interface Reply {
  status: number;
  body: string;
}

async function send(url: string, init: RequestInit = {}): Promise<Reply> {
  try {
    const response = await fetch(url, { ...init, redirect: 'manual', signal: AbortSignal.timeout(HUNG_MS) });
    return { status: response.status, body: await response.text() };
  } catch (error) {
    return { status: (error as Error).name === 'TimeoutError' ? HUNG : CUT, body: '' };
  }
}

function pick<T>(values: readonly T[]): T | undefined {
  return values.length === 0 ? undefined : values[Math.floor(Math.random() * values.length)];
}

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();

export class SoakTraffic {
  readonly tokens = new Tokens();
  private readonly presented = new Set<string>();
  private readonly chains: Array<{ family: string; refresh: string; spent: string[] }> = [];

  constructor(
    private readonly deployment: SoakDeployment,
    private readonly ledger: SoakLedger,
    private readonly running: () => boolean,
  ) {}

  private sidecar(): SoakSidecar {
    return pick(this.deployment.sidecars)!;
  }

  private async loop(pauseMs: number, step: () => Promise<void>): Promise<void> {
    while (this.running()) {
      await step();
      await sleep(pauseMs);
    }
  }

  /** Every client loop; resolves once all have stopped. */
  run(): Promise<void[]> {
    return Promise.all([
      this.loop(40, () => this.issueClientCredentials()),
      this.loop(5, () => this.presentAtGateway()),
      this.loop(5, () => this.presentAtGateway()),
      this.loop(20, () => this.askDecisionListener()),
      this.loop(150, () => this.revokeOne()),
      this.loop(50, () => this.authorizationCodeFlow()),
      this.loop(50, () => this.refreshOne()),
      this.loop(20, () => this.dpopClient()),
      this.loop(60, () => this.metered(ROUTES.limited, this.deployment.limitedApplication, 'limited')),
      this.loop(150, () => this.metered(ROUTES.quota, this.deployment.quotaApplication, 'quota')),
      this.loop(1_000, () => this.scrape()),
    ]);
  }

  private tokenRequest(
    sidecar: SoakSidecar,
    application: TestApplication,
    fields: Record<string, string>,
    headers: Record<string, string> = {},
  ): Promise<Reply> {
    return send(`${sidecar.publicUrl}/oauth/token`, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        authorization: basicAuthorization(application.clientId, application.clientSecret!),
        ...headers,
      },
      body: form(fields),
    });
  }

  /** A client_credentials token of `application`, or null when none was issued. */
  async clientCredentials(application: TestApplication, what = 'issue client_credentials'): Promise<string | null> {
    const sentMs = this.ledger.now();
    const reply = await this.tokenRequest(this.sidecar(), application, { grant_type: 'client_credentials', scope: 'public' });
    this.ledger.record(what, reply.status, sentMs, [200]);
    return reply.status === 200 ? (JSON.parse(reply.body) as { access_token: string }).access_token : null;
  }

  private async issueClientCredentials(): Promise<void> {
    const token = await this.clientCredentials(this.deployment.application);
    if (token !== null) this.tokens.add(token);
  }

  /** A valid token mostly, sometimes a revoked or an unknown one. */
  private chooseToken(): string | undefined {
    const roll = Math.random();
    if (roll < 0.12 && this.tokens.revoked.length > 0) return pick(this.tokens.revoked.slice(-200));
    if (roll < 0.2) return this.deployment.minter.mint();
    return pick(this.tokens.valid);
  }

  private async presentAtGateway(): Promise<void> {
    const token = this.chooseToken();
    if (token === undefined) return;
    const sidecar = this.sidecar();
    const sentMs = this.ledger.now();
    const judged = this.tokens.judge(token, sentMs);
    if (judged === null) return;
    // First time at this sidecar: its workers' caches do not hold it (a store read); later, they may.
    const seen = `${sidecar.name} ${token}`;
    const cached = this.presented.has(seen);
    this.presented.add(seen);
    const reply = await send(`${sidecar.publicUrl}${ROUTES.me}`, { headers: { authorization: `Bearer ${token}` } });
    const what = `gateway ${judged}${judged === 'valid' ? (cached ? ' again' : ' first') : ''}`;
    this.ledger.record(what, reply.status, sentMs, judged === 'valid' ? [200] : [401], judged, this.tokens.judge(token, this.ledger.now()) === judged);
  }

  private async askDecisionListener(): Promise<void> {
    const token = this.chooseToken();
    if (token === undefined) return;
    const sentMs = this.ledger.now();
    const judged = this.tokens.judge(token, sentMs);
    if (judged === null) return;
    const reply = await send(`${this.sidecar().decisionsUrl}/auth-request`, {
      headers: { authorization: `Bearer ${token}`, 'x-original-method': 'GET', 'x-original-uri': ROUTES.me },
    });
    this.ledger.record(
      `decision ${judged}`,
      reply.status,
      sentMs,
      judged === 'valid' ? [200] : [401],
      judged,
      this.tokens.judge(token, this.ledger.now()) === judged,
    );
  }

  private async revokeOne(): Promise<void> {
    // Client_credentials tokens only: the families of the others are the refresh client's to end.
    const candidates = this.tokens.valid.filter((token) => this.tokens.all.get(token)!.family === null);
    if (candidates.length < 30) return;
    const token = pick(candidates)!;
    this.tokens.doubt(token);
    const { application } = this.deployment;
    const sentMs = this.ledger.now();
    const reply = await send(`${this.sidecar().publicUrl}/oauth/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basicAuthorization(application.clientId, application.clientSecret!) },
      body: form({ token }),
    });
    this.ledger.record('revoke', reply.status, sentMs, [200]);
    if (reply.status === 200) this.tokens.markRevoked(token, this.ledger.now());
  }

  /**
   * The authorization page, signing in when the browser has no session there, then consent and
   * approval: a code. Every other request asks for the consent page again (`prompt=consent`); the
   * others are answered at once from the user's remembered grant (a 302 with the code).
   */
  private async authorizationCode(browser: FormClient): Promise<string | null> {
    const { application, user } = this.deployment;
    this.askConsent = !this.askConsent;
    const path = authorizePath({
      client_id: application.clientId,
      redirect_uri: application.redirectUri,
      response_type: 'code',
      state: 'soak',
      scope: 'public',
      ...(this.askConsent ? { prompt: 'consent' } : {}),
    });
    let sentMs = this.ledger.now();
    let page = await browser.get(path).catch(() => ({ status: CUT, text: '', location: null }));
    this.ledger.record('authorization page', page.status, sentMs, [200, 302]);
    if (page.status === 302) return codeOf(page.location);
    if (page.status !== 200) return null;
    if (page.text.includes('/oauth/authorize/login')) {
      sentMs = this.ledger.now();
      const signedIn = await browser.post('/oauth/authorize/login', { ...formFields(page.text), email: user.email, password: user.password }).catch(() => null);
      this.ledger.record('sign-in', signedIn?.status ?? CUT, sentMs, [303]);
      if (signedIn?.status !== 303) return null;
      sentMs = this.ledger.now();
      page = await browser.follow(signedIn).catch(() => ({ status: CUT, text: '', location: null }));
      this.ledger.record('authorization page', page.status, sentMs, [200, 302]);
      if (page.status === 302) return codeOf(page.location);
      if (page.status !== 200) return null;
    }
    sentMs = this.ledger.now();
    const approved = await browser.post('/oauth/authorize/decision', { ...formFields(page.text), decision: 'approve' }).catch(() => null);
    this.ledger.record('consent', approved?.status ?? CUT, sentMs, [302, 303]);
    return codeOf(approved?.location);
  }

  private askConsent = false;
  private readonly browsers = new Map<string, FormClient>();
  private presentTwice = false;

  /** A code, presented to one sidecar, or to both at once (one of them must lose). */
  private async authorizationCodeFlow(): Promise<void> {
    const sidecar = this.sidecar();
    const browser = this.browsers.get(sidecar.name) ?? new FormClient(sidecar.publicUrl);
    this.browsers.set(sidecar.name, browser);
    const code = await this.authorizationCode(browser);
    if (code === null) return;
    this.presentTwice = !this.presentTwice;
    const targets = this.presentTwice ? this.deployment.sidecars : [this.sidecar()];
    const sentMs = this.ledger.now();
    const replies = await Promise.all(
      targets.map((target) =>
        this.tokenRequest(target, this.deployment.application, {
          grant_type: 'authorization_code',
          code,
          redirect_uri: this.deployment.application.redirectUri,
        }),
      ),
    );
    for (const reply of replies) {
      this.ledger.record(this.presentTwice ? 'code presented twice' : 'code', reply.status, sentMs, this.presentTwice ? [200, 400] : [200]);
      if (reply.status !== 200) continue;
      this.ledger.use('codes', code);
      // A code presented twice revokes its grant: its tokens are not used further.
      if (this.presentTwice) continue;
      const body = JSON.parse(reply.body) as { access_token: string; refresh_token: string };
      this.tokens.add(body.access_token, code);
      this.chains.push({ family: code, refresh: body.refresh_token, spent: [] });
    }
  }

  /** Rotates a grant's refresh token; every third time replays a spent one instead, which ends the grant. */
  private async refreshOne(): Promise<void> {
    const chain = this.chains.shift();
    if (chain === undefined) return;
    const { application } = this.deployment;
    if (chain.spent.length > 0 && chain.spent.length % 3 === 0) {
      const family = this.tokens.family(chain.family);
      for (const token of family) this.tokens.doubt(token);
      const replayed = pick(chain.spent)!;
      const sentMs = this.ledger.now();
      const reply = await this.tokenRequest(this.sidecar(), application, { grant_type: 'refresh_token', refresh_token: replayed });
      this.ledger.record('refresh token replayed', reply.status, sentMs, [400]);
      if (reply.status === 200) this.ledger.use('refreshTokens', replayed);
      if (reply.status === 400) for (const token of family) this.tokens.markRevoked(token, this.ledger.now());
      return;
    }
    const sentMs = this.ledger.now();
    const reply = await this.tokenRequest(this.sidecar(), application, { grant_type: 'refresh_token', refresh_token: chain.refresh });
    this.ledger.record('refresh', reply.status, sentMs, [200]);
    // Without an answer the refresh token may or may not be spent: that grant is left alone.
    if (reply.status !== 200) return;
    this.ledger.use('refreshTokens', chain.refresh);
    const body = JSON.parse(reply.body) as { access_token: string; refresh_token: string };
    this.tokens.add(body.access_token, chain.family);
    this.chains.push({ family: chain.family, refresh: body.refresh_token, spent: [...chain.spent, chain.refresh] });
  }

  private readonly dpopTokens: Array<{ token: string; keys: { privateKey: CryptoKey; jwk: JWK } }> = [];

  private async proof(keys: { privateKey: CryptoKey; jwk: JWK }, htm: string, htu: string, token?: string): Promise<string> {
    return new SignJWT({ htm, htu, jti: randomUUID(), ...(token === undefined ? {} : { ath: tokenDigest(token) }) })
      .setProtectedHeader({ alg: 'ES256', typ: 'dpop+jwt', jwk: keys.jwk })
      .setIssuedAt()
      .sign(keys.privateKey);
  }

  /** Issues a DPoP-bound token now and then; otherwise presents one with a fresh proof, and every fifth time that proof again. */
  private async dpopClient(): Promise<void> {
    const sidecar = this.sidecar();
    if (this.dpopTokens.length === 0 || Math.random() < 0.1) {
      const { publicKey, privateKey } = await generateKeyPair('ES256');
      const keys = { privateKey, jwk: await exportJWK(publicKey) };
      const sentMs = this.ledger.now();
      const reply = await this.tokenRequest(
        sidecar,
        this.deployment.application,
        { grant_type: 'client_credentials', scope: 'public' },
        {
          dpop: await this.proof(keys, 'POST', `${sidecar.publicUrl}/oauth/token`),
        },
      );
      this.ledger.record('issue DPoP-bound', reply.status, sentMs, [200]);
      if (reply.status === 200) this.dpopTokens.push({ token: (JSON.parse(reply.body) as { access_token: string }).access_token, keys });
      if (this.dpopTokens.length > 50) this.dpopTokens.shift();
      return;
    }
    const { token, keys } = pick(this.dpopTokens)!;
    const url = `${sidecar.publicUrl}${ROUTES.bound}`;
    const proof = await this.proof(keys, 'GET', url, token);
    const headers = { authorization: `DPoP ${token}`, dpop: proof };
    let sentMs = this.ledger.now();
    const reply = await send(url, { headers });
    this.ledger.record('gateway DPoP', reply.status, sentMs, [200], 'valid');
    if (reply.status === 200) this.ledger.use('proofs', proof);
    if (Math.random() < 0.2) {
      sentMs = this.ledger.now();
      const replay = await send(url, { headers });
      // A proof refused the first time (503: its replay mark could not be written) was not used.
      this.ledger.record('gateway DPoP proof replayed', replay.status, sentMs, reply.status === 200 ? [401] : [200, 401]);
      if (replay.status === 200) this.ledger.use('proofs', proof);
    }
  }

  /** A Prometheus scrape of a primary, which asks each of its workers (one may have just died). */
  private async scrape(): Promise<void> {
    const sentMs = this.ledger.now();
    const reply = await send(`${this.sidecar().opsUrl}/metrics`);
    this.ledger.record('metrics scrape', reply.status, sentMs, [200]);
  }

  private readonly meteredTokens = new Map<string, string>();

  /** A metered route, asked faster than its policy allows: 200 or 429. */
  private async metered(path: string, application: TestApplication, what: 'limited' | 'quota'): Promise<void> {
    let token = this.meteredTokens.get(what);
    if (token === undefined) {
      token = (await this.clientCredentials(application, `issue client_credentials (${what})`)) ?? undefined;
      if (token === undefined) return;
      this.meteredTokens.set(what, token);
    }
    const sentMs = this.ledger.now();
    const reply = await send(`${this.sidecar().publicUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });
    this.ledger.record(`gateway ${what}`, reply.status, sentMs, [200, 429], 'valid');
    if (reply.status !== 200) return;
    if (what === 'quota') this.ledger.quotaAdmitted += 1;
    else this.ledger.limitedAdmitted += 1;
  }
}

/** The code of a redirect to the application, or null. */
function codeOf(location: string | null | undefined): string | null {
  return location === null || location === undefined ? null : new URL(location).searchParams.get('code');
}
