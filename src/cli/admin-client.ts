import { loadConfigFile } from '../load-config.js';
import { AdminTokenFileError, adminTokenFile, readAdminTokenFile } from '../admin/credential.js';
import { ADMIN_PREFIX } from '../admin/paths.js';
import { CommandError } from './command.js';

/** The admin API of the instance a config file describes, as the CLI reaches it. */
export interface AdminClient {
  readonly url: string;
  request<T>(method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<T>;
}

const REQUEST_TIMEOUT_MS = 10_000;

export function adminClientFor(configFile: string): AdminClient {
  const { admin } = loadConfigFile(configFile);
  if (admin.port === 0) {
    throw new CommandError(`${configFile} sets admin.port to 0 (a free port picked at start), so the CLI cannot find the admin API; give it a fixed port`);
  }
  const url = `http://${connectableHost(admin.host)}:${admin.port}${ADMIN_PREFIX}`;
  const token = admin.token !== '' ? admin.token : keptToken(configFile);
  return {
    url,
    async request<T>(method: string, path: string, body?: unknown): Promise<T> {
      const headers: Record<string, string> = { authorization: `Bearer ${token}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      let response: Response;
      try {
        response = await fetch(`${url}${path}`, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
      } catch (error) {
        throw new CommandError(`cannot reach the admin API at ${url} (${reasonOf(error)}): is tokengate serve running with this config?`);
      }
      const text = await response.text();
      const payload = parseJson(text);
      if (!response.ok) {
        const description = typeof payload?.error_description === 'string' ? payload.error_description : `HTTP ${response.status}`;
        const hint =
          response.status === 401
            ? admin.token !== ''
              ? " (set admin.token, e.g. through TOKENGATE_ADMIN_TOKEN, to the instance's admin token)"
              : ` (the token kept in ${adminTokenFile()} is not this instance's: it runs as another user or with its own admin.token; set admin.token, e.g. through TOKENGATE_ADMIN_TOKEN)`
            : '';
        throw new CommandError(`the admin API refused: ${description}${hint}`);
      }
      return payload as T;
    },
  };
}

/** The token `tokengate serve` keeps for this user when its config sets no admin.token (src/admin/credential.ts). */
function keptToken(configFile: string): string {
  const file = adminTokenFile();
  let token: string | null;
  try {
    token = readAdminTokenFile(file);
  } catch (error) {
    if (error instanceof AdminTokenFileError)
      throw new CommandError(`${configFile} sets no admin.token, and the admin token kept for this user cannot be used: ${error.message}`);
    throw error;
  }
  if (token === null) {
    throw new CommandError(
      `${configFile} sets no admin.token, and there is no admin token at ${file}: tokengate serve makes it there at its first start without admin.token (as this user), or set admin.token (e.g. through TOKENGATE_ADMIN_TOKEN)`,
    );
  }
  return token;
}

/** A listener bound to every interface is reached on the loopback; an IPv6 literal needs brackets. */
function connectableHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

function reasonOf(error: unknown): string {
  const cause = (error as { cause?: { code?: string } }).cause;
  if (cause?.code !== undefined) return cause.code === 'ECONNREFUSED' ? 'connection refused' : cause.code;
  return (error as Error).name === 'TimeoutError' ? `no answer in ${REQUEST_TIMEOUT_MS / 1000} s` : (error as Error).message;
}

function parseJson(text: string): Record<string, unknown> | null {
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch {
    return null;
  }
}
