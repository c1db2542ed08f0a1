import { randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SignJWT, type CryptoKey } from 'jose';
import { request } from 'undici';
import type { ProviderKey, TestIdentityProvider } from './identity-provider.js';

/** The event type URIs by short name, as a transmitter writes them. */
export const EVENT = {
  sessionRevoked: 'https://schemas.openid.net/secevent/caep/event-type/session-revoked',
  credentialChange: 'https://schemas.openid.net/secevent/caep/event-type/credential-change',
  assuranceLevelChange: 'https://schemas.openid.net/secevent/caep/event-type/assurance-level-change',
  tokenClaimsChange: 'https://schemas.openid.net/secevent/caep/event-type/token-claims-change',
  accountDisabled: 'https://schemas.openid.net/secevent/risc/event-type/account-disabled',
  accountEnabled: 'https://schemas.openid.net/secevent/risc/event-type/account-enabled',
  accountPurged: 'https://schemas.openid.net/secevent/risc/event-type/account-purged',
  credentialCompromise: 'https://schemas.openid.net/secevent/risc/event-type/credential-compromise',
  sessionsRevoked: 'https://schemas.openid.net/secevent/risc/event-type/sessions-revoked',
  verification: 'https://schemas.openid.net/secevent/ssf/event-type/verification',
  streamUpdated: 'https://schemas.openid.net/secevent/ssf/event-type/stream-updated',
} as const;

/** How a test's SET departs from a well-formed one (an attack, or a quirk of some transmitter). */
export interface SetOptions {
  /** Default: the receiver's audience the transmitter was given. */
  readonly aud?: string | string[];
  readonly iss?: string;
  readonly jti?: string;
  /** Epoch seconds; default now. */
  readonly iat?: number;
  /** Default `secevent+jwt`. */
  readonly typ?: string;
  /** Signs with this key instead of the provider's current one (keeping the current key's `kid` unless `kid` is given). */
  readonly key?: ProviderKey;
  readonly kid?: string;
  /** `none`: unsigned; `HS256`: an HMAC keyed by `secret`. */
  readonly alg?: 'none' | 'HS256';
  readonly secret?: Uint8Array;
  /** Put in the SET beside `events` (e.g. `sub_id: undefined` to leave it out). */
  readonly claims?: Record<string, unknown>;
}

/** A SET as the transmitter made it: its `jti` and its compact serialization. */
export interface MintedSet {
  readonly jti: string;
  readonly set: string;
  /** Epoch ms when it was made: the provider's word, from which a delay is measured. */
  readonly madeAt: number;
}

/** One stream the transmitter keeps (SSF 1.0 section 8.1.1). */
export interface TestStream {
  readonly streamId: string;
  delivery: { method: string; endpoint_url?: string; authorization_header?: string };
  status: 'enabled' | 'paused' | 'disabled';
  readonly eventsRequested: string[];
  /** Polled streams: the SETs not yet acknowledged, by jti, in order. */
  readonly queue: Map<string, string>;
}

const POLL_PATH = '/ssf/poll';

/**
 * An SSF 1.0 transmitter of the test's own, on the identity provider's https server (its test
 * CA) and signing with its keys: its configuration metadata, the stream configuration, status
 * and verification endpoints (each requiring the management credential it was given), a poll
 * endpoint per RFC 8936 (acknowledgements and setErrs recorded), and push per RFC 8935.
 */
export class TestTransmitter {
  readonly configurationUrl: string;
  readonly managementAuthorization = `Bearer ${randomBytes(24).toString('base64url')}`;
  readonly streams = new Map<string, TestStream>();
  /** Every jti acknowledged by a poll, in order (one acknowledged twice appears twice). */
  readonly acknowledged: string[] = [];
  /** Every setErr a poll reported, by jti. */
  readonly setErrs = new Map<string, { err: string; description: string }>();
  /** Poll requests received, answered or not. */
  polls = 0;
  /** Status reads received. */
  statusReads = 0;
  /** Requests to a management endpoint without the management credential. */
  unauthorizedCalls = 0;
  /** While true, the poll endpoint answers 503 (the transmitter down). */
  pollOutage = false;
  /** While true, polls' acknowledgements are dropped (lost on the way): the transmitter delivers those SETs again. */
  droppingAcks = false;

  /** Whether polling needs the management credential (a transmitter may authenticate its pollers otherwise). */
  pollNeedsAuthorization = true;

  /** `audience`: the `aud` of the SETs it makes, the receiver's audience (tokengate's issuer URL unless configured). */
  private constructor(
    readonly idp: TestIdentityProvider,
    readonly audience: string,
  ) {
    const origin = `https://127.0.0.1:${idp.server.port}`;
    this.configurationUrl = `${origin}/.well-known/ssf-configuration/idp`;
    idp.server.serveJson('/.well-known/ssf-configuration/idp', {
      spec_version: '1_0',
      issuer: idp.issuer,
      jwks_uri: idp.jwksUrl,
      delivery_methods_supported: ['urn:ietf:rfc:8935', 'urn:ietf:rfc:8936'],
      configuration_endpoint: `${origin}/ssf/stream`,
      status_endpoint: `${origin}/ssf/status`,
      verification_endpoint: `${origin}/ssf/verify`,
    });
    idp.server.route('/ssf/stream', (req, res) => void this.manage(req, res, () => this.streamEndpoint(req, res)));
    idp.server.route('/ssf/status', (req, res) => void this.manage(req, res, () => this.statusEndpoint(req, res)));
    idp.server.route('/ssf/verify', (req, res) => void this.manage(req, res, () => this.verifyEndpoint(req, res)));
    idp.server.route(
      POLL_PATH,
      (req, res) => void (this.pollNeedsAuthorization ? this.manage(req, res, () => this.pollEndpoint(req, res)) : this.pollEndpoint(req, res)),
    );
  }

  static on(idp: TestIdentityProvider, audience: string): TestTransmitter {
    return new TestTransmitter(idp, audience);
  }

  /** The poll endpoint's URL for a stream the test made itself (an operator-made stream). */
  pollUrl(streamId: string): string {
    return `https://127.0.0.1:${this.idp.server.port}${POLL_PATH}?stream_id=${encodeURIComponent(streamId)}`;
  }

  /** A stream made by hand at the transmitter (as an operator would, in its console). */
  makeStream(delivery: TestStream['delivery']): TestStream {
    const stream: TestStream = { streamId: `stream-${randomUUID()}`, delivery, status: 'enabled', eventsRequested: [], queue: new Map() };
    this.streams.set(stream.streamId, stream);
    return stream;
  }

  /** A SET of one event about `subject` (the `sub_id`), signed as `options` say. */
  async set(eventType: string, payload: Record<string, unknown>, subject: Record<string, unknown> | undefined, options: SetOptions = {}): Promise<MintedSet> {
    const jti = options.jti ?? randomUUID();
    const madeAt = Date.now();
    const claims = {
      iss: options.iss ?? this.idp.issuer,
      jti,
      iat: options.iat ?? Math.floor(madeAt / 1000),
      aud: options.aud ?? this.audience,
      ...(subject === undefined ? {} : { sub_id: subject }),
      events: { [eventType]: payload },
      ...options.claims,
    };
    const typ = options.typ ?? 'secevent+jwt';
    if (options.alg === 'none') {
      const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
      return { jti, madeAt, set: `${encode({ alg: 'none', typ })}.${encode(claims)}.` };
    }
    const signer = new SignJWT(claims);
    if (options.alg === 'HS256')
      return { jti, madeAt, set: await signer.setProtectedHeader({ alg: 'HS256', typ, kid: this.idp.current.kid }).sign(options.secret!) };
    const key = options.key ?? this.idp.current;
    return {
      jti,
      madeAt,
      set: await signer.setProtectedHeader({ alg: 'ES256', typ, kid: options.kid ?? this.idp.current.kid }).sign(key.privateKey as CryptoKey),
    };
  }

  /** Pushes a SET (RFC 8935) and reads the answer. */
  async push(
    url: string,
    set: string,
    authorization: string | null,
    contentType = 'application/secevent+jwt',
    extra: Record<string, string> = {},
  ): Promise<{ status: number; body: string }> {
    // An empty contentType sends none.
    const headers: Record<string, string> = { ...(contentType === '' ? {} : { 'content-type': contentType }), accept: 'application/json', ...extra };
    if (authorization !== null) headers.authorization = authorization;
    const response = await request(url, { method: 'POST', headers, body: set });
    return { status: response.statusCode, body: await response.body.text() };
  }

  /** Queues a SET on a polled stream. */
  enqueue(streamId: string, minted: MintedSet): void {
    this.streams.get(streamId)!.queue.set(minted.jti, minted.set);
  }

  /** Sends a SET the way the stream delivers: pushed to its endpoint, or queued for its poller. */
  async deliver(stream: TestStream, minted: MintedSet): Promise<void> {
    if (stream.delivery.method === 'urn:ietf:rfc:8936') {
      stream.queue.set(minted.jti, minted.set);
      return;
    }
    const answer = await this.push(stream.delivery.endpoint_url!, minted.set, stream.delivery.authorization_header ?? null);
    if (answer.status !== 202) throw new Error(`push answered ${answer.status}: ${answer.body}`);
  }

  /** Changes a stream's status and says so in a stream-updated event over the stream, as SSF 1.0 section 8.1.5 does. */
  async updateStatus(stream: TestStream, status: TestStream['status'], announce = true): Promise<void> {
    stream.status = status;
    if (announce)
      await this.deliver(stream, await this.set(EVENT.streamUpdated, { status, reason: 'changed by the test' }, { format: 'opaque', id: stream.streamId }));
  }

  private async manage(request: IncomingMessage, response: ServerResponse, handle: () => Promise<void>): Promise<void> {
    if (request.headers.authorization !== this.managementAuthorization) {
      this.unauthorizedCalls += 1;
      response.writeHead(401, { 'www-authenticate': 'Bearer' }).end();
      return;
    }
    await handle();
  }

  private async streamEndpoint(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const id = new URL(request.url!, 'https://transmitter').searchParams.get('stream_id');
    if (request.method === 'GET') {
      const stream = id === null ? undefined : this.streams.get(id);
      if (stream === undefined) return void response.writeHead(404).end();
      return void json(response, 200, this.describe(stream));
    }
    const body = JSON.parse(await readBody(request)) as { delivery: TestStream['delivery']; events_requested?: string[] };
    const stream: TestStream = {
      streamId: `stream-${randomUUID()}`,
      delivery: body.delivery.method === 'urn:ietf:rfc:8936' ? { method: body.delivery.method, endpoint_url: '' } : body.delivery,
      status: 'enabled',
      eventsRequested: body.events_requested ?? [],
      queue: new Map(),
    };
    if (stream.delivery.method === 'urn:ietf:rfc:8936') stream.delivery.endpoint_url = this.pollUrl(stream.streamId);
    this.streams.set(stream.streamId, stream);
    json(response, 201, this.describe(stream));
  }

  private async statusEndpoint(request: IncomingMessage, response: ServerResponse): Promise<void> {
    this.statusReads += 1;
    const stream = this.streams.get(new URL(request.url!, 'https://transmitter').searchParams.get('stream_id') ?? '');
    if (stream === undefined) return void response.writeHead(404).end();
    json(response, 200, { stream_id: stream.streamId, status: stream.status });
  }

  /** Answers 204, then sends the verification event with the state asked for (SSF 1.0 section 8.1.4.2). */
  private async verifyEndpoint(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const body = JSON.parse(await readBody(request)) as { stream_id: string; state?: string };
    const stream = this.streams.get(body.stream_id);
    if (stream === undefined) return void response.writeHead(404).end();
    response.writeHead(204).end();
    const minted = await this.set(EVENT.verification, body.state === undefined ? {} : { state: body.state }, { format: 'opaque', id: stream.streamId });
    await this.deliver(stream, minted).catch(() => undefined);
  }

  /** RFC 8936 section 2.4: acknowledgements and errors in, the unacknowledged SETs out. */
  private async pollEndpoint(request: IncomingMessage, response: ServerResponse): Promise<void> {
    this.polls += 1;
    const body = JSON.parse(await readBody(request)) as { maxEvents?: number; ack?: string[]; setErrs?: Record<string, { err: string; description: string }> };
    if (this.pollOutage) return void response.writeHead(503, { 'retry-after': '1' }).end();
    const stream = this.streams.get(new URL(request.url!, 'https://transmitter').searchParams.get('stream_id') ?? '');
    if (stream === undefined) return void response.writeHead(404).end();
    if (!this.droppingAcks) {
      for (const jti of body.ack ?? []) {
        this.acknowledged.push(jti);
        stream.queue.delete(jti);
      }
    }
    for (const [jti, error] of Object.entries(body.setErrs ?? {})) {
      this.setErrs.set(jti, error);
      stream.queue.delete(jti);
    }
    const held = stream.status === 'enabled' ? [...stream.queue] : [];
    const sent = held.slice(0, body.maxEvents ?? 100);
    json(response, 200, { sets: Object.fromEntries(sent), moreAvailable: held.length > sent.length });
  }

  private describe(stream: TestStream): Record<string, unknown> {
    return {
      stream_id: stream.streamId,
      iss: this.idp.issuer,
      aud: this.audience,
      delivery:
        stream.delivery.method === 'urn:ietf:rfc:8936' ? { method: stream.delivery.method, endpoint_url: stream.delivery.endpoint_url } : stream.delivery,
      events_supported: Object.values(EVENT),
      events_requested: stream.eventsRequested,
      events_delivered: stream.eventsRequested,
    };
  }
}

function json(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
