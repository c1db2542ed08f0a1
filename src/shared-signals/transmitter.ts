import { readFileSync } from 'node:fs';
import { Agent, request, type Dispatcher } from 'undici';

/** The delivery methods of SSF 1.0: push (RFC 8935) and poll (RFC 8936). */
export const DELIVERY_METHODS = { push: 'urn:ietf:rfc:8935', poll: 'urn:ietf:rfc:8936' } as const;

const REQUEST_TIMEOUT_MS = 10_000;
const MOST_ANSWER_BYTES = 4 * 1024 * 1024;

/** The transmitter could not be reached, or answered what tokengate cannot use: `reason` is for logs, the listing and the metrics' log line (never a secret). */
export class TransmitterError extends Error {
  constructor(
    readonly reason: string,
    readonly status?: number,
  ) {
    super(`the transmitter ${reason}`);
    this.name = 'TransmitterError';
  }
}

/** What tokengate reads of a transmitter's configuration metadata (SSF 1.0 section 7.1). */
export interface TransmitterMetadata {
  readonly issuer: string;
  readonly configurationEndpoint: string | null;
  readonly statusEndpoint: string | null;
  readonly verificationEndpoint: string | null;
}

/** What tokengate reads of a stream's configuration (SSF 1.0 section 8.1.1). */
export interface StreamConfiguration {
  readonly streamId: string;
  readonly deliveryMethod: string;
  /** The poll endpoint of a poll stream (the transmitter's), the push endpoint of a push stream (tokengate's). */
  readonly endpointUrl: string | null;
  readonly audience: readonly string[];
}

/** A poll request's body (RFC 8936 section 2.4). */
export interface PollRequest {
  readonly maxEvents: number;
  readonly returnImmediately: boolean;
  readonly ack: readonly string[];
  readonly setErrs: Readonly<Record<string, { err: string; description: string }>>;
}

export interface PollAnswer {
  /** The SETs by `jti`, in the order the transmitter listed them. */
  readonly sets: ReadonlyArray<readonly [string, string]>;
  readonly moreAvailable: boolean;
}

/**
 * The transmitter's endpoints as tokengate calls them: over https only (the metadata's endpoints
 * included), under the provider's CA file, with the operator's `Authorization` header on every
 * call but the metadata's, each answer bounded in time and size.
 */
export class TransmitterClient {
  private agent: Agent | null = null;
  private metadataInHand: TransmitterMetadata | null = null;

  constructor(
    private readonly configurationUrl: string,
    private readonly caFile: string,
    private readonly authorization: string,
  ) {}

  /** The transmitter's metadata, fetched once and kept (it names the endpoints, which do not move while a stream lives). */
  async metadata(): Promise<TransmitterMetadata> {
    if (this.metadataInHand !== null) return this.metadataInHand;
    const document = asObject(await this.call('GET', this.configurationUrl, undefined, false), 'metadata');
    if (typeof document.issuer !== 'string') throw new TransmitterError('metadata has no issuer');
    this.metadataInHand = {
      issuer: document.issuer,
      configurationEndpoint: endpoint(document.configuration_endpoint),
      statusEndpoint: endpoint(document.status_endpoint),
      verificationEndpoint: endpoint(document.verification_endpoint),
    };
    return this.metadataInHand;
  }

  /** Creates a stream (SSF 1.0 section 8.1.1.1). */
  async createStream(configuration: Record<string, unknown>): Promise<StreamConfiguration> {
    const url = await this.endpointOf('configurationEndpoint');
    return readStreamConfiguration(await this.call('POST', url, configuration));
  }

  /** Reads one stream (section 8.1.1.2); null when the transmitter has no stream of that id. */
  async readStream(streamId: string): Promise<StreamConfiguration | null> {
    const url = withQuery(await this.endpointOf('configurationEndpoint'), streamId);
    try {
      return readStreamConfiguration(await this.call('GET', url));
    } catch (error) {
      if (error instanceof TransmitterError && error.status === 404) return null;
      throw error;
    }
  }

  /** Reads a stream's status (section 8.1.2.1). */
  async readStatus(streamId: string): Promise<{ status: string; reason: string | null }> {
    const answer = asObject(await this.call('GET', withQuery(await this.endpointOf('statusEndpoint'), streamId)), 'status');
    if (typeof answer.status !== 'string') throw new TransmitterError('status answer has no status');
    return { status: answer.status, reason: typeof answer.reason === 'string' ? answer.reason.slice(0, 200) : null };
  }

  /** Asks for a verification event carrying `state` (section 8.1.4.2). */
  async requestVerification(streamId: string, state: string): Promise<void> {
    await this.call('POST', await this.endpointOf('verificationEndpoint'), { stream_id: streamId, state });
  }

  /** One poll (RFC 8936 section 2.4): the acknowledgements and errors of the last answer go with it. */
  async poll(url: string, body: PollRequest): Promise<PollAnswer> {
    const answer = asObject(await this.call('POST', url, body), 'poll answer');
    const sets = answer.sets === undefined ? {} : answer.sets;
    if (typeof sets !== 'object' || sets === null || Array.isArray(sets)) throw new TransmitterError('poll answer has no sets object');
    const listed = Object.entries(sets as Record<string, unknown>).filter((entry): entry is [string, string] => typeof entry[1] === 'string');
    return { sets: listed, moreAvailable: answer.moreAvailable === true };
  }

  async close(): Promise<void> {
    await this.agent?.close();
  }

  private async endpointOf(name: 'configurationEndpoint' | 'statusEndpoint' | 'verificationEndpoint'): Promise<string> {
    const url = (await this.metadata())[name];
    if (url === null) throw new TransmitterError(`metadata names no ${name.replace('Endpoint', '_endpoint')}`);
    return url;
  }

  private async call(method: 'GET' | 'POST', url: string, body?: unknown, authorized = true): Promise<unknown> {
    if (!url.startsWith('https://')) throw new TransmitterError('endpoint is not an https URL');
    const headers: Record<string, string> = { accept: 'application/json' };
    if (authorized && this.authorization !== '') headers.authorization = this.authorization;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Dispatcher.ResponseData;
    try {
      response = await request(url, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        dispatcher: this.dispatcher(),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (error) {
      throw new TransmitterError(`could not be reached (${networkReason(error)})`);
    }
    const text = await readBounded(response.body);
    if (response.statusCode === 204 || (response.statusCode >= 200 && response.statusCode < 300 && text === '')) return {};
    if (response.statusCode < 200 || response.statusCode >= 300) throw new TransmitterError(`answered ${response.statusCode}`, response.statusCode);
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new TransmitterError('answered something that is not JSON');
    }
  }

  private dispatcher(): Agent {
    this.agent ??= new Agent({ connect: this.caFile === '' ? {} : { ca: readFileSync(this.caFile) } });
    return this.agent;
  }
}

function readStreamConfiguration(answer: unknown): StreamConfiguration {
  const stream = asObject(answer, 'stream configuration');
  if (typeof stream.stream_id !== 'string' || stream.stream_id === '') throw new TransmitterError('stream configuration has no stream_id');
  const delivery = typeof stream.delivery === 'object' && stream.delivery !== null ? (stream.delivery as Record<string, unknown>) : {};
  const audience = Array.isArray(stream.aud)
    ? stream.aud.filter((value): value is string => typeof value === 'string')
    : typeof stream.aud === 'string'
      ? [stream.aud]
      : [];
  return {
    streamId: stream.stream_id,
    deliveryMethod: typeof delivery.method === 'string' ? delivery.method : '',
    endpointUrl: typeof delivery.endpoint_url === 'string' ? delivery.endpoint_url : null,
    audience,
  };
}

function asObject(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TransmitterError(`${what} is not a JSON object`);
  return value as Record<string, unknown>;
}

function endpoint(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

function withQuery(url: string, streamId: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set('stream_id', streamId);
  return parsed.toString();
}

async function readBounded(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > MOST_ANSWER_BYTES) {
      body.destroy();
      throw new TransmitterError(`answered more than ${MOST_ANSWER_BYTES} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function networkReason(error: unknown): string {
  for (let current = error; current instanceof Error; current = current.cause) {
    const code = (current as NodeJS.ErrnoException).code;
    if (code !== undefined && !code.startsWith('UND_ERR')) return code;
  }
  return error instanceof Error ? error.name : 'unreachable';
}
