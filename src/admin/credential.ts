import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { isBearerToken } from '../http/bearer.js';

/**
 * The admin token of an instance whose config sets no `admin.token`: made by `tokengate serve`
 * at its first start and kept in a file only its user can read, where the CLI of the same user
 * finds it. One file per user of the machine ($XDG_STATE_HOME/tokengate/admin-token): every
 * instance that user runs without `admin.token` takes the same token, whatever its config.
 */

/** Where the token is kept: `$XDG_STATE_HOME/tokengate/admin-token`, `~/.local/state/tokengate/admin-token` without it. */
export function adminTokenFile(env: Readonly<Record<string, string | undefined>> = process.env): string {
  const stateHome = env.XDG_STATE_HOME !== undefined && isAbsolute(env.XDG_STATE_HOME) ? env.XDG_STATE_HOME : join(homedir(), '.local', 'state');
  return join(stateHome, 'tokengate', 'admin-token');
}

/** Why the kept token cannot be used: the file is unreadable, readable by others, or holds no token. */
export class AdminTokenFileError extends Error {
  override name = 'AdminTokenFileError';
}

/** The token kept in `file`, or null when there is no file. Throws AdminTokenFileError for a file that must not be used. */
export function readAdminTokenFile(file: string): string | null {
  let text: string;
  try {
    // Others able to read or change it could call the admin API as the operator: refused, as ssh refuses such a key.
    const { mode, uid } = statSync(file);
    if ((mode & 0o077) !== 0) throw new AdminTokenFileError(`${file} can be read or written by others (mode ${(mode & 0o777).toString(8)}): chmod 600 it`);
    if (process.getuid !== undefined && uid !== process.getuid()) throw new AdminTokenFileError(`${file} belongs to another user`);
    text = readFileSync(file, 'utf8');
  } catch (error) {
    if (error instanceof AdminTokenFileError) throw error;
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new AdminTokenFileError(`${file} cannot be read (${(error as Error).message})`);
  }
  const token = text.trim();
  if (token.length < 16 || !isBearerToken(token))
    throw new AdminTokenFileError(`${file} holds no admin token (16 or more bearer token characters): delete it to have a new one made`);
  return token;
}

/**
 * The token kept in `file`, made first when there is none: 32 random bytes, base64url, in a
 * file of mode 0600 in a directory of mode 0700. Written whole under another name and linked
 * into place, so that two instances starting at once keep one token and never read half of it.
 */
export function readOrCreateAdminToken(file: string): string {
  const kept = readAdminTokenFile(file);
  if (kept !== null) return kept;
  const partial = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`;
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(partial, `${randomBytes(32).toString('base64url')}\n`, { mode: 0o600, flag: 'wx' });
    try {
      linkSync(partial, file);
    } catch (error) {
      // Another instance made it first: its token is the one.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
  } catch (error) {
    throw new AdminTokenFileError(`${file} cannot be written (${(error as Error).message})`);
  } finally {
    try {
      unlinkSync(partial);
    } catch {
      // never written
    }
  }
  return readAdminTokenFile(file)!;
}

/**
 * The token `tokengate serve` runs the admin API with: `admin.token` when the config sets one,
 * otherwise the one kept for this user, made at the first start (`file` says where).
 */
export function servedAdminToken(configured: string, env: Readonly<Record<string, string | undefined>> = process.env): { token: string; file: string | null } {
  if (configured !== '') return { token: configured, file: null };
  const file = adminTokenFile(env);
  return { token: readOrCreateAdminToken(file), file };
}
