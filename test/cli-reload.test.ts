import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startServe, tempConfigs, type ServeProcess } from './support/cli.js';
import { freePort } from './support/ports.js';
import { parseExposition } from './support/metrics.js';
import { eventually } from './support/wait.js';

/**
 * `tokengate serve` reloads its config on SIGHUP and when the file changes, the way a
 * Kubernetes ConfigMap update changes it; a broken file leaves the running config in place.
 * A route that exists answers a request without a token 401; one that does not, 404.
 */

const configs = tempConfigs();
afterAll(() => configs.remove());

let serve: ServeProcess | undefined;
afterEach(() => {
  serve?.child.kill('SIGKILL');
  serve = undefined;
});

async function configWithRoutes(...paths: string[]): Promise<string> {
  const upstream = `http://127.0.0.1:${await freePort()}`;
  const routes = paths.map((path) => `  - path: ${path}\n    upstream: ${upstream}\n`).join('');
  return `server:\n  host: 127.0.0.1\n  port: 0\nadmin:\n  port: 0\nissuer:\n  issuerUrl: http://localhost:8080\nroutes:\n${routes}`;
}

async function statusOf(url: string): Promise<number> {
  return (await fetch(url)).status;
}

/** The log lines printed so far, parsed. */
function logEntries(process: ServeProcess): Array<Record<string, unknown>> {
  return process
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('tokengate serve reloads its config', () => {
  it('on SIGHUP', async () => {
    const file = configs.write(await configWithRoutes('/api/old'));
    serve = await startServe(file);
    expect(await statusOf(`${serve.publicUrl}/api/old`)).toBe(401);
    writeFileSync(file, await configWithRoutes('/api/new'));
    serve.child.kill('SIGHUP');
    const running = serve;
    await eventually(async () => (await statusOf(`${running.publicUrl}/api/new`)) === 401, 10_000);
    expect(await statusOf(`${serve.publicUrl}/api/old`)).toBe(404);
    // The log reaches this process through a pipe, maybe after the answers above.
    await eventually(() => logEntries(running).some((entry) => entry.msg === 'config reloaded'), 10_000);
    expect(logEntries(serve)).toContainEqual(expect.objectContaining({ msg: 'reloading the config', trigger: 'SIGHUP', file }));
    expect(logEntries(serve)).toContainEqual(expect.objectContaining({ msg: 'config reloaded', applied: ['routes'], routes: 1 }));
  });

  it('when a ConfigMap update swaps its ..data symlink, and keeps the running config when the new file is broken', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'tokengate-configmap-'));
    try {
      let version = 0;
      // What the kubelet does on an update: a new timestamped directory, ..data swapped to it atomically, the old one removed.
      const publish = (content: string) => {
        version += 1;
        const name = `..2026_01_01_00_00_0${version}.${version}`;
        mkdirSync(join(directory, name));
        writeFileSync(join(directory, name, 'tokengate.yaml'), content);
        symlinkSync(name, join(directory, '..data_tmp'));
        renameSync(join(directory, '..data_tmp'), join(directory, '..data'));
        if (version > 1) rmSync(join(directory, `..2026_01_01_00_00_0${version - 1}.${version - 1}`), { recursive: true });
      };
      publish(await configWithRoutes('/api/old'));
      symlinkSync('..data/tokengate.yaml', join(directory, 'tokengate.yaml'));
      serve = await startServe(join(directory, 'tokengate.yaml'));
      const running = serve;
      expect(await statusOf(`${running.publicUrl}/api/new`)).toBe(404);

      publish(await configWithRoutes('/api/old', '/api/new'));
      await eventually(async () => (await statusOf(`${running.publicUrl}/api/new`)) === 401, 10_000);
      await eventually(() => logEntries(running).some((entry) => entry.msg === 'config reloaded'), 10_000);
      expect(logEntries(running)).toContainEqual(expect.objectContaining({ msg: 'reloading the config', trigger: 'file' }));

      publish('routes:\n  - path: /api/newer\n    upstream: ftp://example.com\n');
      await eventually(() => logEntries(running).some((entry) => entry.msg === 'config reload failed: the running config stays'), 10_000);
      expect(logEntries(running).find((entry) => entry.msg === 'config reload failed: the running config stays')).toMatchObject({
        level: 50,
        problems: [{ path: 'routes[0].upstream', line: 3, message: '"ftp://example.com" must be http or https' }],
      });
      expect(await statusOf(`${running.publicUrl}/api/new`)).toBe(401);
      expect(await statusOf(`${running.publicUrl}/api/newer`)).toBe(404);
      const reloads = parseExposition(await (await fetch(`${running.opsUrl}/metrics`)).text()).filter(
        (sample) => sample.name === 'tokengate_config_reloads_total',
      );
      expect(reloads.map((sample) => [sample.labels.result, sample.value])).toEqual([
        ['success', 1],
        ['failure', 1],
      ]);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});
