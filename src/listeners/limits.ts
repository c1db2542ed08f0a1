/** What a listener's guard is told: each part of the guard (connection limits, answer order) reads it. */

export type ListenerName = 'public' | 'ops' | 'decisions';

export interface ListenerLimits {
  /** Time a client has to send a whole request, head and body. */
  readonly requestTimeoutMs: number;
  readonly maxConnections: number;
  /** 0: no limit per address. */
  readonly maxConnectionsPerAddress: number;
  /** Methods the listener serves: the Allow header of its answer to CONNECT. */
  readonly methods: readonly string[];
}
