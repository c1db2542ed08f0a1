import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { dirname, resolve } from 'node:path';

export type ConfigTrigger = 'SIGHUP' | 'file';

export interface WatchOptions {
  /** How long the file must stay unchanged before it is read: an editor or a ConfigMap update is several events. */
  debounceMs?: number;
  /** A watch that could not be set up or broke (the file still reloads on SIGHUP). */
  onError?: (error: Error) => void;
}

/** Long enough to take a ConfigMap swap or an editor's save as one change, short enough to feel immediate. */
const DEBOUNCE_MS = 250;

/**
 * Calls `onChange` when the config file should be reloaded: on SIGHUP, and when the file's
 * content changes. It watches the file itself (written in place, or a single file mounted into a
 * container) and its directory, where a replaced file shows up: an editor saving through a
 * rename, or a Kubernetes ConfigMap update, which swaps the `..data` symlink that the file's own
 * symlink goes through (the old file is never written to again). Events are many and say
 * little, so after each quiet spell the file is read and compared with the content last seen:
 * only a real change calls `onChange`, and a file that is missing for a moment (being replaced)
 * is waited for. Returns the function that stops watching.
 */
export function watchConfig(file: string, onChange: (trigger: ConfigTrigger) => void, options: WatchOptions = {}): () => void {
  const path = resolve(file);
  const debounceMs = options.debounceMs ?? DEBOUNCE_MS;
  const onError = options.onError ?? (() => {});
  let seen = contentOf(path);
  let timer: NodeJS.Timeout | undefined;
  let fileWatcher: FSWatcher | null = null;

  const check = () => {
    timer = undefined;
    // A replaced file is a new inode: the old watch saw its last event.
    watchFile();
    const content = contentOf(path);
    if (content === null || content === seen) return;
    seen = content;
    onChange('file');
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(check, debounceMs);
  };
  const watchFile = () => {
    fileWatcher?.close();
    fileWatcher = null;
    try {
      fileWatcher = watch(path, schedule);
      fileWatcher.on('error', schedule);
    } catch {
      // Missing for now: the directory's watch sees it come back.
    }
  };

  let directoryWatcher: FSWatcher | null = null;
  try {
    directoryWatcher = watch(dirname(path), schedule);
    directoryWatcher.on('error', onError);
  } catch (error) {
    onError(error as Error);
  }
  watchFile();

  const onSignal = () => {
    seen = contentOf(path);
    onChange('SIGHUP');
  };
  process.on('SIGHUP', onSignal);

  return () => {
    clearTimeout(timer);
    fileWatcher?.close();
    directoryWatcher?.close();
    process.off('SIGHUP', onSignal);
  };
}

function contentOf(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}
