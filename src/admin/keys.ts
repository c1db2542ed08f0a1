import type { FastifyInstance } from 'fastify';
import type { TokengateContext } from '../context.js';
import { TokengateError } from '../errors.js';
import type { SignedIdentity } from '../identity/index.js';
import type { OpenIdConnect } from '../openid/index.js';
import { recordAdminChange } from './admin-auth.js';

/** A signing key as the admin API shows it: never its private half. */
export interface SigningKeyView {
  kid: string;
  alg: string;
  created_at: string;
  activates_at: string;
}

const iso = (epochMs: number) => new Date(epochMs).toISOString();

/** The identity signing keys: list them, and rotate (a new key, published now, signing once every resource service can know it). */
export function registerKeyRoutes(scope: FastifyInstance, context: TokengateContext): void {
  const identity = (): SignedIdentity => {
    if (context.identity === null) throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'Signed identities are off (signedIdentity.enabled).' });
    return context.identity;
  };
  const keys = (ring: SignedIdentity['ring']): SigningKeyView[] =>
    ring.describe().map((key) => ({ kid: key.kid, alg: key.alg, created_at: iso(key.createdAt), activates_at: iso(key.activatesAt) }));

  scope.get('/keys', async function listKeys() {
    const { ring } = identity();
    await ring.refresh();
    return { keys: keys(ring) };
  });

  scope.post('/keys/rotate', async function rotateKeys(request) {
    const { ring } = identity();
    const rotation = await ring.rotate();
    recordAdminChange(request, { action: 'identity signing key rotated by the operator', kid: rotation.kid, activatesAt: iso(rotation.activatesAt) });
    return { kid: rotation.kid, created_at: iso(rotation.createdAt), activates_at: iso(rotation.activatesAt), keys: keys(ring) };
  });
}

/** The ID token signing keys (`openidConnect`): list them, and rotate every algorithm's (each new key published now, signing once every application can know it). */
export function registerOpenIdKeyRoutes(scope: FastifyInstance, context: TokengateContext): void {
  const openid = (): OpenIdConnect => {
    if (context.openid === null) throw new TokengateError('RESOURCE_NOT_FOUND', { description: 'OpenID Connect is off (openidConnect.enabled).' });
    return context.openid;
  };
  const keys = async (refresh: boolean): Promise<SigningKeyView[]> => {
    const rings = [...openid().keys.rings.values()];
    if (refresh) await Promise.all(rings.map((ring) => ring.refresh()));
    return rings.flatMap((ring) =>
      ring.describe().map((key) => ({ kid: key.kid, alg: key.alg, created_at: iso(key.createdAt), activates_at: iso(key.activatesAt) })),
    );
  };

  scope.get('/openid-keys', async function listOpenIdKeys() {
    return { keys: await keys(true) };
  });

  scope.post('/openid-keys/rotate', async function rotateOpenIdKeys(request) {
    const rotations = [];
    for (const [alg, ring] of openid().keys.rings) {
      const rotation = await ring.rotate();
      recordAdminChange(request, { action: 'ID token signing key rotated by the operator', kid: rotation.kid, alg, activatesAt: iso(rotation.activatesAt) });
      rotations.push({ kid: rotation.kid, alg, created_at: iso(rotation.createdAt), activates_at: iso(rotation.activatesAt) });
    }
    return { created: rotations, keys: await keys(false) };
  });
}
