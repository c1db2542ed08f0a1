import { Agent, request } from 'undici';
import type { TokengateContext } from '../context.js';
import { isMetadataClientId } from '../client-metadata/client-id.js';
import type { LogoutEvent } from '../issuer/logout.js';
import type { OpenIdAlgorithm } from '../openid/index.js';
import type { ApplicationRecord } from '../store/store.js';
import { signLogoutToken, type LogoutSubject } from './logout-token.js';

/**
 * OpenID Connect Back-Channel Logout 1.0: a logout token POSTed to each application that
 * registered a `backchannel_logout_uri`, when what it knew of a user ends. All of it runs in the
 * background: the user's page never waits on an application's server, however slow or dead.
 * Each attempt is bounded; a failed one (no answer in time, no connection, a 5xx, 408 or 429) is
 * tried again after a growing pause; a 4xx says the application refused the token, which the
 * same token again would not change.
 */

/** One attempt: connection, headers and body together. */
const ATTEMPT_TIMEOUT_MS = 5_000;
/** The pauses before the second, third and fourth attempts; all within the token's lifetime (./logout-token.ts). */
const RETRY_PAUSES_MS = [1_000, 4_000, 16_000];

/** One logout token on its way to one application. */
interface Delivery {
  clientId: string;
  userId: string;
  reason: LogoutEvent['kind'];
  uri: string;
  token: string;
}

const channels = new WeakMap<TokengateContext, BackChannel>();

/** Tells the applications concerned, in the background; returns at once. */
export function tellApplications(context: TokengateContext, ended: LogoutEvent): void {
  let channel = channels.get(context);
  if (channel === undefined) {
    channel = new BackChannel(context);
    channels.set(context, channel);
  }
  channel.tell(ended);
}

/** Stops every delivery under way (an instance closing): attempts are aborted, no retry is started. */
export async function closeBackChannel(context: TokengateContext): Promise<void> {
  await channels.get(context)?.close();
  channels.delete(context);
}

class BackChannel {
  // Its own connections: a slow application's never hold up another client of this process.
  private readonly agent = new Agent({ connect: { timeout: ATTEMPT_TIMEOUT_MS }, headersTimeout: ATTEMPT_TIMEOUT_MS, bodyTimeout: ATTEMPT_TIMEOUT_MS });
  private readonly stopping = new AbortController();
  private readonly underWay = new Set<Promise<void>>();

  constructor(private readonly context: TokengateContext) {}

  tell(ended: LogoutEvent): void {
    if (this.stopping.signal.aborted) return;
    const work = this.deliveriesFor(ended)
      .then((deliveries) => Promise.all(deliveries.map((delivery) => this.deliver(delivery))))
      .then(
        () => {},
        (error: unknown) =>
          this.context.log.warn({ reason: ended.kind, userId: ended.userId, err: error }, 'back-channel logout not sent: its logout tokens could not be made'),
      )
      .finally(() => this.underWay.delete(work));
    this.underWay.add(work);
  }

  async close(): Promise<void> {
    this.stopping.abort();
    await Promise.allSettled([...this.underWay]);
    await this.agent.close();
  }

  /** The logout tokens to send: none while OpenID Connect is off (there is no key to sign them with). */
  private async deliveriesFor(ended: LogoutEvent): Promise<Delivery[]> {
    const openid = this.context.openid;
    if (openid === null) return [];
    const sid = ended.sessionKey === undefined ? undefined : openid.sessionId(ended.sessionKey);
    const applications = ended.kind === 'session-ended' ? await this.connectedApplications(ended.userId) : await this.listening([ended.clientId]);
    const deliveries: Delivery[] = [];
    for (const application of applications) {
      const subject = subjectFor(application, ended, ended.userId, sid);
      if (subject === null) {
        this.context.log.info(
          { clientId: application.clientId, userId: ended.userId, reason: ended.kind, outcome: 'not_sent' },
          'back-channel logout not sent: the application requires sid, and no session is known',
        );
        continue;
      }
      const alg = signingAlgorithmOf(application);
      const token = await signLogoutToken(openid, { issuer: openid.issuer, clientId: application.clientId, subject, alg });
      deliveries.push({ clientId: application.clientId, userId: ended.userId, reason: ended.kind, uri: application.backchannelLogoutUri!, token });
    }
    return deliveries;
  }

  /**
   * On a session's end: the applications the user has a grant with. Not only those that received
   * an ID token in that session, which the session does not record: an application that had none
   * finds no session of that `sid` and does nothing, as the specification asks of it.
   */
  private async connectedApplications(userId: string): Promise<ApplicationRecord[]> {
    const grants = await this.context.store.grants.list(userId);
    return this.listening(grants.map((grant) => grant.clientId));
  }

  /** The registered applications among `clientIds` that gave a back-channel logout URI (a metadata document client cannot). */
  private async listening(clientIds: string[]): Promise<ApplicationRecord[]> {
    const registered = clientIds.filter((clientId) => !isMetadataClientId(clientId));
    const applications = await Promise.all(registered.map((clientId) => this.context.store.applications.get(clientId)));
    return applications.filter((application): application is ApplicationRecord => application?.backchannelLogoutUri !== undefined);
  }

  /** Attempts until one is answered 2xx, the application refuses the token, or the attempts run out. */
  private async deliver(delivery: Delivery): Promise<void> {
    const { metrics, log } = this.context;
    const facts = { clientId: delivery.clientId, userId: delivery.userId, reason: delivery.reason };
    let last = '';
    for (let attempt = 1; attempt <= RETRY_PAUSES_MS.length + 1; attempt += 1) {
      if (attempt > 1 && !(await pause(RETRY_PAUSES_MS[attempt - 2]!, this.stopping.signal))) break;
      const outcome = await this.attempt(delivery);
      if (outcome.delivered) {
        metrics.backchannelLogouts.inc({ outcome: 'sent' });
        log.info({ ...facts, outcome: 'sent', attempts: attempt, status: outcome.status }, 'back-channel logout');
        return;
      }
      last = outcome.problem;
      if (!outcome.retry) break;
    }
    metrics.backchannelLogouts.inc({ outcome: 'failed' });
    log.warn(
      { ...facts, outcome: 'failed', problem: this.stopping.signal.aborted ? `${last} (stopped: this instance is closing)` : last },
      'back-channel logout',
    );
  }

  private async attempt(delivery: Delivery): Promise<{ delivered: true; status: number } | { delivered: false; retry: boolean; problem: string }> {
    try {
      const { statusCode, body } = await request(delivery.uri, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ logout_token: delivery.token }).toString(),
        signal: AbortSignal.any([this.stopping.signal, AbortSignal.timeout(ATTEMPT_TIMEOUT_MS)]),
      });
      await body.dump();
      if (statusCode >= 200 && statusCode < 300) return { delivered: true, status: statusCode };
      const retry = statusCode >= 500 || statusCode === 408 || statusCode === 429;
      return { delivered: false, retry, problem: `answered ${statusCode}` };
    } catch (error) {
      return {
        delivered: false,
        retry: true,
        problem: (error as Error).name === 'TimeoutError' ? `no answer within ${ATTEMPT_TIMEOUT_MS} ms` : (error as Error).message,
      };
    }
  }
}

/**
 * Whom the token names. On a session's end: the user and that session. On a grant's end: the user
 * alone, since every session of theirs at the application ends with it; an application that
 * requires `sid` gets the session the user disconnected it from, and nothing when none is known
 * (the operator revoked the grant): a token it would refuse is not sent.
 */
function subjectFor(application: ApplicationRecord, ended: LogoutEvent, userId: string, sid: string | undefined): LogoutSubject | null {
  if (ended.kind === 'session-ended') return { sub: userId, sid: sid! };
  if (application.backchannelLogoutSessionRequired !== true) return { sub: userId };
  return sid === undefined ? null : { sub: userId, sid };
}

/** The algorithm its ID tokens are signed with: the logout token is verified with the same keys and code. */
function signingAlgorithmOf(application: ApplicationRecord): OpenIdAlgorithm {
  return application.idTokenSignedResponseAlg ?? 'RS256';
}

/** Waits `ms`; false when stopped first. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', stop);
      resolve(true);
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener('abort', stop, { once: true });
  });
}
