import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import { pino, type Bindings, type ChildLoggerOptions, type Logger, type LoggerOptions } from 'pino';

/**
 * Query parameters whose values are secrets. The gateway accepts `access_token` in the query
 * (RFC 6750 2.3), so request URLs are logged with these values replaced.
 */
const SECRET_PARAMETERS = [
  'access_token',
  'refresh_token',
  'code',
  'client_secret',
  'code_verifier',
  'password',
  'token',
  'state',
  // OpenID Connect's authorization request: an ID token, and the user's e-mail address.
  'id_token_hint',
  'login_hint',
];
const SECRET_IN_QUERY = new RegExp(`([?&](?:${SECRET_PARAMETERS.join('|')})=)[^&#]*`, 'gi');

export function redactUrl(url: string): string {
  return url.includes('?') ? url.replace(SECRET_IN_QUERY, '$1[REDACTED]') : url;
}

/** Paths that pino redacts wherever a log line carries them (headers and parsed bodies). */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["proxy-authorization"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers.cookie',
  '*.access_token',
  '*.refresh_token',
  '*.client_secret',
  '*.password',
  // `code` only where it can be an authorization code: `err.code` must stay readable.
  'body.code',
  'query.code',
  '*.code_verifier',
  '*.token',
  '*.id_token',
  '*.id_token_hint',
  '*.login_hint',
  'access_token',
  'refresh_token',
  'client_secret',
  'password',
];

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
    serializers: {
      req(request: FastifyRequest) {
        return {
          id: request.id,
          method: request.method,
          url: redactUrl(request.url),
          remoteAddress: request.ip,
        };
      },
    },
  };
}

export function createLogger(level: string): Logger {
  return pino(loggerOptions(level));
}

/**
 * The logger of `tokengate serve`: JSON lines on stdout for whatever collects them, or, when
 * stdout is a terminal (someone is reading), the same records made readable by pino-pretty:
 * local time, level, message and fields, without pid and hostname. The redaction runs first
 * either way.
 */
export async function createProcessLogger(level: string, stdout: { readonly isTTY?: boolean; readonly fd?: number } = process.stdout): Promise<Logger> {
  if (stdout.isTTY !== true) return createLogger(level);
  const { default: pretty } = await import('pino-pretty');
  return pino(
    loggerOptions(level),
    pretty({ destination: stdout.fd ?? 1, sync: true, colorize: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' }),
  );
}

type LogMethod = (...args: unknown[]) => void;
type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * The logger a fastify instance is given: `log` itself, except that its children, one per
 * request, are built lazily: a request's pino child (its bindings serialized, the redaction
 * compiled in) is made the first time the request logs at an enabled level. Most requests log
 * nothing, and building one per request cost more than the gateway's own checks. (A fastify
 * childLoggerFactory would do the same, but fastify validates what a custom factory returns
 * on every request.)
 */
export function fastifyLogger(log: Logger): FastifyBaseLogger {
  const root = Object.create(log) as Logger;
  root.child = ((bindings: Bindings, options?: ChildLoggerOptions) => new LazyChildLogger(log, bindings, options ?? {})) as unknown as Logger['child'];
  return root as unknown as FastifyBaseLogger;
}

class LazyChildLogger {
  #child: Logger | undefined;

  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  private get logger(): Logger {
    return (this.#child ??= this.parent.child(this.bindings, this.options));
  }

  private log(level: Level, args: unknown[]): void {
    if (this.#child !== undefined || this.parent.isLevelEnabled(level)) (this.logger[level] as LogMethod)(...args);
  }

  get level(): string {
    return (this.#child ?? this.parent).level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  isLevelEnabled(level: string): boolean {
    return (this.#child ?? this.parent).isLevelEnabled(level);
  }

  /** Lazy too: fastify gives each plugin a child logger, and each request a child of that. */
  child(bindings: Bindings, options?: ChildLoggerOptions): LazyChildLogger {
    return new LazyChildLogger(this.logger, bindings, options ?? {});
  }

  fatal(...args: unknown[]): void {
    this.log('fatal', args);
  }
  error(...args: unknown[]): void {
    this.log('error', args);
  }
  warn(...args: unknown[]): void {
    this.log('warn', args);
  }
  info(...args: unknown[]): void {
    this.log('info', args);
  }
  debug(...args: unknown[]): void {
    this.log('debug', args);
  }
  trace(...args: unknown[]): void {
    this.log('trace', args);
  }
  silent(): void {}
}
