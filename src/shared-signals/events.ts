import { TokengateError } from '../errors.js';

const CAEP = 'https://schemas.openid.net/secevent/caep/event-type/';
const RISC = 'https://schemas.openid.net/secevent/risc/event-type/';
const SSF = 'https://schemas.openid.net/secevent/ssf/event-type/';

/** The event types tokengate acts on, by their short name (the `type` label of its metrics): what a stream it creates asks for. */
export const EVENT_TYPES = {
  'session-revoked': `${CAEP}session-revoked`,
  'credential-change': `${CAEP}credential-change`,
  'assurance-level-change': `${CAEP}assurance-level-change`,
  'token-claims-change': `${CAEP}token-claims-change`,
  'account-disabled': `${RISC}account-disabled`,
  'account-enabled': `${RISC}account-enabled`,
  'account-purged': `${RISC}account-purged`,
  'credential-compromise': `${RISC}credential-compromise`,
  'sessions-revoked': `${RISC}sessions-revoked`,
  verification: `${SSF}verification`,
  'stream-updated': `${SSF}stream-updated`,
} as const;

export type EventName = keyof typeof EVENT_TYPES | 'other';

const NAMES = new Map<string, EventName>(Object.entries(EVENT_TYPES).map(([name, uri]) => [uri, name as EventName]));

/** The stream statuses of SSF 1.0 section 8.1.2. */
export const STREAM_STATUSES = ['enabled', 'paused', 'disabled'] as const;
export type StreamStatus = (typeof STREAM_STATUSES)[number];

/** What an event asks of tokengate. */
export type EventEffect =
  /** Every token of the subject revoked; `disable`: and the provider's assertions for it refused until it is enabled. */
  | { readonly effect: 'revoke'; readonly disable: boolean }
  | { readonly effect: 'enable' }
  /** Understood, and it narrows nothing tokengate issued. */
  | { readonly effect: 'none'; readonly why: string }
  | { readonly effect: 'verification'; readonly state: string | null }
  | { readonly effect: 'stream-updated'; readonly status: StreamStatus; readonly reason: string | null }
  /** A type tokengate does not act on: acknowledged and counted. */
  | { readonly effect: 'unknown' };

/** What a provider's events are read against: which claims' change narrows what a token allows. */
export interface EventPolicy {
  /** `narrowingClaims` and the provider's `userClaim`. */
  readonly narrowingClaims: ReadonlySet<string>;
}

/** The short name of an event type URI (`other` for a type tokengate does not act on). */
export function eventName(type: string): EventName {
  return NAMES.get(type) ?? 'other';
}

/**
 * What one event means here. Revoking is the answer wherever the event may narrow what the
 * subject may do and tokengate cannot tell that it does not: a change it cannot read (no
 * `change_type`, no `change_direction`, no `claims`) revokes, because a token left alive after
 * the provider narrowed access is the failure this receiver exists to prevent, and a token
 * revoked needlessly costs one new assertion.
 */
export function interpretEvent(name: EventName, payload: Record<string, unknown>, policy: EventPolicy): EventEffect {
  switch (name) {
    case 'session-revoked':
    case 'credential-compromise':
    case 'sessions-revoked':
      return { effect: 'revoke', disable: false };
    case 'credential-change':
      // A credential added (create) narrows nothing; one revoked, updated or deleted may be how an intruder got in.
      return payload.change_type === 'create' ? { effect: 'none', why: 'a credential was added' } : { effect: 'revoke', disable: false };
    case 'assurance-level-change':
      return payload.change_direction === 'increase' ? { effect: 'none', why: 'the assurance level rose' } : { effect: 'revoke', disable: false };
    case 'token-claims-change':
      return claimsNarrow(payload.claims, policy) ? { effect: 'revoke', disable: false } : { effect: 'none', why: 'no claim tokengate reads changed' };
    case 'account-disabled':
    case 'account-purged':
      return { effect: 'revoke', disable: true };
    case 'account-enabled':
      return { effect: 'enable' };
    case 'verification':
      return { effect: 'verification', state: typeof payload.state === 'string' ? payload.state : null };
    case 'stream-updated':
      return streamUpdated(payload);
    case 'other':
      return { effect: 'unknown' };
  }
}

function claimsNarrow(claims: unknown, policy: EventPolicy): boolean {
  if (typeof claims !== 'object' || claims === null || Array.isArray(claims)) return true;
  return Object.keys(claims).some((claim) => policy.narrowingClaims.has(claim));
}

function streamUpdated(payload: Record<string, unknown>): EventEffect {
  const status = payload.status;
  if (typeof status !== 'string' || !(STREAM_STATUSES as readonly string[]).includes(status))
    throw new TokengateError('SET_INVALID_REQUEST', { description: 'The stream-updated event has no status of enabled, paused or disabled.' });
  return { effect: 'stream-updated', status: status as StreamStatus, reason: typeof payload.reason === 'string' ? payload.reason.slice(0, 200) : null };
}

/** Whether the event is about a subject (and so needs one): the stream's own events are not. */
export function concernsSubject(effect: EventEffect): boolean {
  return effect.effect === 'revoke' || effect.effect === 'enable';
}
