import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { createTestCa, startDocumentServer, type DocumentServer, type TestCa } from './client-metadata.js';

/** One signing key of the test's identity provider. */
export interface ProviderKey {
  readonly kid: string;
  readonly privateKey: CryptoKey;
  readonly publicJwk: JWK;
}

/** What an assertion is signed with, when a test changes it. */
export interface SigningOptions {
  /** Default: the provider's current key. */
  readonly key?: ProviderKey;
  /** Default `oauth-id-jag+jwt`. */
  readonly typ?: string;
}

/**
 * A company's identity provider as a test needs one: real ES256 keys, its key set (JWKS) on a
 * real https server under a test CA (`caFile` for tokengate's `identityProviders[].caFile`), and
 * Identity Assertion JWT Authorization Grants (ID-JAG) it signs for a user, a client and a resource.
 */
export class TestIdentityProvider {
  readonly issuer: string;
  readonly jwksUrl: string;
  private published: ProviderKey[];

  private constructor(
    readonly ca: TestCa,
    readonly server: DocumentServer,
    readonly current: ProviderKey,
  ) {
    this.issuer = `https://127.0.0.1:${server.port}/idp`;
    this.jwksUrl = `https://127.0.0.1:${server.port}/idp/jwks`;
    this.published = [current];
    this.publish();
  }

  static async start(): Promise<TestIdentityProvider> {
    const ca = createTestCa(['idp.test']);
    const server = await startDocumentServer(ca);
    return new TestIdentityProvider(ca, server, await generateProviderKey());
  }

  /** tokengate's `identityProviders` entry for this provider. */
  config(overrides: Record<string, unknown> = {}): Record<string, unknown> {
    return { issuer: this.issuer, jwksUrl: this.jwksUrl, caFile: this.ca.caFile, algorithms: ['ES256'], ...overrides };
  }

  /** How many times the key set was fetched. */
  get keySetFetches(): number {
    return this.server.requestsOf('/idp/jwks');
  }

  /** Publishes exactly these keys from now on. */
  publishKeys(keys: ProviderKey[]): void {
    this.published = keys;
    this.publish();
  }

  /** Answers 500 for the key set until keys are published again (a provider briefly down). */
  failKeySet(): void {
    this.server.route('/idp/jwks', (_request, response) => response.writeHead(500, { 'content-type': 'text/plain' }).end('down'));
  }

  /** An ID-JAG for `claims` (iss, iat, exp, jti filled in unless given), signed with the current key. */
  async assertion(claims: JWTPayload, options: SigningOptions = {}): Promise<string> {
    const key = options.key ?? this.current;
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({ iss: this.issuer, iat: now, exp: now + 120, jti: randomUUID(), ...claims })
      .setProtectedHeader({ alg: 'ES256', typ: options.typ ?? 'oauth-id-jag+jwt', kid: key.kid })
      .sign(key.privateKey);
  }

  async close(): Promise<void> {
    await this.server.close();
    this.ca.remove();
  }

  private publish(): void {
    this.server.serveJson('/idp/jwks', { keys: this.published.map((key) => key.publicJwk) }, { 'cache-control': 'max-age=300' });
  }
}

export async function generateProviderKey(): Promise<ProviderKey> {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  const kid = randomUUID();
  return { kid, privateKey, publicJwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' } };
}
