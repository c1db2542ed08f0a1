import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, posix, resolve } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { IDENTITY_HEADERS } from '../examples/ticketing-api/server.mjs';
import { buildTokengate } from '../src/app.js';
import { isLoopback } from '../src/config/load.js';
import { parseConfig } from '../src/load-config.js';
import type { Config } from '../src/config/schema.js';
import { configWarnings } from '../src/config/warnings.js';
import { startTokengate } from './support/instance.js';
import { ROOT, codeBlocks, readDocument, sectionOf, shellCommands } from './support/markdown.js';
import { freePort } from './support/ports.js';
import { createTestRedisStore, uniquePrefix } from './support/redis.js';
import { copyRepository } from './support/repository.js';

/**
 * The container examples, read the way Docker Compose and Kubernetes would use them and checked
 * against what they name: the Dockerfiles, the example services, and tokengate's own config
 * loader (each config must pass parseConfig with the environment its container gets). The keys
 * come from the command docs/operations.md gives. No container engine runs here: `docker compose
 * config` (or `docker-compose config`) runs where a Compose client is installed.
 */

const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const VERSION = (JSON.parse(read('package.json')) as { version: string }).version;
/** Variables tokengate reads itself, beside the ones its config file names; NODE_ENV and NODE_OPTIONS are node's. */
const PROCESS_VARIABLES = new Set(
  [...read('src/main.ts').matchAll(/process\.env\.([A-Z_]+)/g), ...read('src/cli/command.ts').matchAll(/process\.env\.([A-Z_]+)/g)]
    .map((match) => match[1]!)
    .concat('NODE_ENV', 'NODE_OPTIONS'),
);

type Environment = Record<string, string>;

interface Dockerfile {
  /** ENV of the final stage. */
  env: Environment;
  args: Environment;
  expose: number[];
  healthcheck: string[] | null;
  /** Sources of the final stage's and the build stages' COPY lines that come from the context. */
  copied: string[];
  cmd: string[] | null;
}

function readDockerfile(file: string): Dockerfile {
  const lines = read(file)
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  const dockerfile: Dockerfile = { env: {}, args: {}, expose: [], healthcheck: null, copied: [], cmd: null };
  for (const line of lines) {
    const [instruction, ...rest] = line.split(/\s+/);
    const argument = rest.join(' ');
    if (instruction === 'FROM') dockerfile.env = {};
    if (instruction === 'ENV')
      for (const [, name, quoted, plain] of argument.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(?:"([^"]*)"|(\S*))/g)) dockerfile.env[name!] = quoted ?? plain!;
    if (instruction === 'ARG') dockerfile.args[argument.split('=')[0]!] = argument.slice(argument.indexOf('=') + 1);
    if (instruction === 'EXPOSE') dockerfile.expose = argument.split(/\s+/).map(Number);
    if (instruction === 'HEALTHCHECK') dockerfile.healthcheck = JSON.parse(argument.slice(argument.indexOf('CMD ') + 4)) as string[];
    if (instruction === 'CMD') dockerfile.cmd = JSON.parse(argument) as string[];
    if (instruction === 'COPY' && !argument.includes('--from=')) dockerfile.copied.push(...rest.filter((word) => !word.startsWith('--')).slice(0, -1));
  }
  return dockerfile;
}

/** The `${NAME}` and `${NAME:-default}` variables of a config text, and which have no default. */
function variablesOf(text: string): { all: Set<string>; required: Set<string> } {
  const matches = [...text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}/g)];
  return { all: new Set(matches.map((match) => match[1]!)), required: new Set(matches.filter((match) => match[2] === undefined).map((match) => match[1]!)) };
}

function readEnvFile(file: string): Environment {
  return Object.fromEntries(
    readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => /^[A-Z_][A-Z0-9_]*=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
}

function ignoredByGit(file: string): boolean {
  return spawnSync('git', ['check-ignore', '-q', file], { cwd: ROOT }).status === 0;
}

/** An image is built from a Dockerfile of this repository under this version, or pinned to a released version. */
function expectPinned(image: string): void {
  expect(image, image).toMatch(/^[a-z0-9./-]+:v?\d+(\.\d+)+$/);
}

const TOKENGATE_IMAGE = `tokengate:${VERSION}`;
const EXAMPLE_IMAGE = `tokengate-example-ticketing-api:${VERSION}`;
const IMAGE_DOCKERFILES: Record<string, string> = { [TOKENGATE_IMAGE]: 'Dockerfile', [EXAMPLE_IMAGE]: 'examples/ticketing-api/Dockerfile' };
const dockerfile = readDockerfile('Dockerfile');
const exampleDockerfile = readDockerfile('examples/ticketing-api/Dockerfile');

/** Which example API serves a route of this token kind. */
const SERVES: Record<string, string[]> = { user: ['user', 'all'], application: ['organizer', 'all'] };

/** The problems of a container's environment for a config: variables set that nothing reads, variables needed but not set. */
function environmentProblems(configText: string, given: string[], environment: Environment): { unused: string[]; missing: string[] } {
  const { all, required } = variablesOf(configText);
  return {
    unused: given.filter((name) => !all.has(name) && !PROCESS_VARIABLES.has(name)),
    missing: [...required].filter((name) => environment[name] === undefined),
  };
}

let copy: string;
beforeAll(async () => {
  // The keys, as docs/operations.md tells a user to make them, in a copy of the repository.
  copy = copyRepository('deployment-examples');
  const deployment = sectionOf(readDocument('docs/operations.md'), '### The image');
  const commands = codeBlocks(deployment, 'sh').flatMap(shellCommands);
  expect(commands.some((command) => command.includes('> examples/tokengate.env'))).toBe(true);
  const run = spawnSync('bash', ['-euo', 'pipefail', '-c', commands.join('\n')], { cwd: copy, encoding: 'utf8' });
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
}, 60_000);
afterAll(() => {
  if (copy !== undefined) rmSync(copy, { recursive: true, force: true });
});

describe('Dockerfile', () => {
  it("sizes V8's heap with node flags node accepts, and the default cache fits it", () => {
    expect(dockerfile.env.NODE_OPTIONS).toMatch(/--max-old-space-size=\d+/);
    const node = spawnSync(process.execPath, ['-p', "require('node:v8').getHeapStatistics().heap_size_limit"], {
      env: { PATH: process.env.PATH, NODE_OPTIONS: dockerfile.env.NODE_OPTIONS },
      encoding: 'utf8',
    });
    expect(node.stderr).toBe('');
    const heapLimit = Number(node.stdout);
    const oldSpaceMb = Number(/--max-old-space-size=(\d+)/.exec(dockerfile.env.NODE_OPTIONS!)![1]);
    expect(heapLimit).toBeGreaterThanOrEqual(oldSpaceMb * 1024 * 1024);
    // The limit is the old generation plus the young one (three semi-spaces: 48 MB with the image's 16 MB, 96 MB by Node 26's default).
    expect(heapLimit).toBeLessThan((oldSpaceMb + 128) * 1024 * 1024);
    const config = parseConfig(read('config/tokengate.yaml'), 'config/tokengate.yaml', dockerfile.env);
    expect(configWarnings(config, heapLimit)).toEqual([]);
    // A cache four times the default would not fit: the warning names the flag to raise.
    const larger = parseConfig(read('config/tokengate.yaml').replace('maxEntries: 100000', 'maxEntries: 400000'), 'larger.yaml', dockerfile.env);
    expect(larger.cache.maxEntries).toBe(400_000);
    expect(configWarnings(larger, heapLimit)).toEqual([expect.stringContaining('--max-old-space-size=')]);
  });

  it('serves the default config on a public listener reachable from outside, keeps the ops listener on the loopback, and exposes both', () => {
    expect(dockerfile.env.TOKENGATE_CONFIG).toBe('/etc/tokengate/tokengate.yaml');
    expect(read('Dockerfile')).toContain('COPY --chown=root:root config/tokengate.yaml /etc/tokengate/tokengate.yaml');
    const config = parseConfig(read('config/tokengate.yaml'), 'config/tokengate.yaml', dockerfile.env);
    expect(config.server).toMatchObject({ host: '0.0.0.0', port: 8080 });
    expect(config.admin).toMatchObject({ host: '127.0.0.1', port: 9090 });
    expect(config.issuer.issuerUrl).toBe('http://localhost:8080');
    expect(dockerfile.expose).toEqual([config.server.port, config.admin.port]);
    // With the variable the docs name, the ops listener moves off the loopback, and needs the token.
    expect(() => parseConfig(read('config/tokengate.yaml'), 'image', { ...dockerfile.env, TOKENGATE_ADMIN_HOST: '0.0.0.0' })).toThrow(/admin\.token/);
    expect(
      parseConfig(read('config/tokengate.yaml'), 'image', { ...dockerfile.env, TOKENGATE_ADMIN_HOST: '0.0.0.0', TOKENGATE_ADMIN_TOKEN: 'a'.repeat(32) }).admin
        .host,
    ).toBe('0.0.0.0');
  });

  it('builds from files the repository has, on a Node.js major package.json admits, the one CI tests on', () => {
    for (const source of dockerfile.copied) expect(existsSync(join(ROOT, source)), source).toBe(true);
    const engines = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node;
    const imageMajor = Number(/^node:(\d+)-bookworm-slim$/.exec(dockerfile.args.NODE_IMAGE!)?.[1]);
    expect(imageMajor).toBeGreaterThanOrEqual(Number(/^>=(\d+)\./.exec(engines)![1]));
    // .ci/run puts the image's major first on PATH, so the suite runs on what the image ships.
    if (process.env.CI === 'true') expect(Number(process.versions.node.split('.')[0])).toBe(imageMajor);
    expect(exampleDockerfile.args.NODE_IMAGE).toBe(dockerfile.args.NODE_IMAGE);
    for (const source of exampleDockerfile.copied) expect(existsSync(join(ROOT, 'examples/ticketing-api', source)), source).toBe(true);
    expect(exampleDockerfile.cmd).toEqual(['node', 'server.mjs']);
    expect(exampleDockerfile.expose).toEqual([3000]);
  });

  it('has a HEALTHCHECK that passes while the ops listener answers and fails when it does not', async () => {
    expect(dockerfile.healthcheck?.[0]).toBe('node');
    const [, ...args] = dockerfile.healthcheck!;
    // Asynchronously: the instance it checks answers from this process's event loop.
    const check = (port: number) =>
      new Promise<number | null>((resolveStatus) =>
        spawn(process.execPath, args, { env: { TOKENGATE_ADMIN_PORT: String(port) }, stdio: 'ignore' }).on('close', resolveStatus),
      );
    const running = await startTokengate('healthcheck');
    try {
      expect(await check(Number(new URL(running.opsUrl).port))).toBe(0);
    } finally {
      await running.close();
    }
    expect(await check(await freePort())).toBe(1);
  });
});

describe('examples/docker-compose.yml', () => {
  interface Service {
    image?: string;
    build?: string;
    env_file?: string;
    environment?: Environment;
    volumes?: string[];
    ports?: string[];
    depends_on?: Record<string, unknown>;
    networks?: string[];
    command?: string[];
    profiles?: string[];
  }
  const compose = parse(read('examples/docker-compose.yml')) as { services: Record<string, Service>; networks: Record<string, unknown> };
  const services = compose.services;
  const tokengate = services.tokengate!;
  const mounted = (service: Service, target: string) => service.volumes?.map((volume) => volume.split(':')).find(([, path]) => path === target)?.[0];
  const configFile = mounted(tokengate, dockerfile.env.TOKENGATE_CONFIG!)!;
  const configText = () => read(posix.join('examples', configFile));
  const keys = () => readEnvFile(join(copy, 'examples', tokengate.env_file!));
  const environment = (): Environment => ({ ...dockerfile.env, ...keys(), ...tokengate.environment });
  const config = (): Readonly<Config> => parseConfig(configText(), configFile, environment());
  const published = (service: Service) => (service.ports ?? []).map((port) => /^(?:(?<host>[\d.]+):)?(?<hostPort>\d+):(?<target>\d+)$/.exec(port)!.groups!);

  it('builds tokengate and the example API from this repository, and pins every other image', () => {
    for (const [name, service] of Object.entries(services)) {
      expect(service.image, name).toBeDefined();
      if (service.build === undefined) {
        expectPinned(service.image!);
        continue;
      }
      expect(IMAGE_DOCKERFILES[service.image!], `${name} builds ${service.image}`).toBe(
        posix.join(posix.normalize(posix.join('examples', service.build)), 'Dockerfile').replace(/^\.\//, ''),
      );
    }
  });

  it('gives tokengate a config file that loads with the environment of its container: every variable it sets read, every one needed set', () => {
    expect(existsSync(join(ROOT, 'examples', configFile))).toBe(true);
    expect(tokengate.env_file).toBe('tokengate.env');
    expect(ignoredByGit('examples/tokengate.env')).toBe(true);
    expect(Object.keys(keys()).sort()).toEqual(['TOKENGATE_ADMIN_TOKEN', 'TOKENGATE_TOKEN_TAG_KEY']);
    expect(config().issuer.tokenTagKey).toBe(keys().TOKENGATE_TOKEN_TAG_KEY);
    expect(environmentProblems(configText(), [...Object.keys(tokengate.environment!), ...Object.keys(keys())], environment())).toEqual({
      unused: [],
      missing: [],
    });
    for (const volume of Object.values(services).flatMap((service) => service.volumes ?? []))
      expect(existsSync(resolve(ROOT, 'examples', volume.split(':')[0]!)), volume).toBe(true);
  });

  it("publishes the public listener, the ops listener on the host's loopback, and lets Prometheus on the network scrape it", () => {
    const { server, admin, issuer } = config();
    expect(server.host).toBe('0.0.0.0');
    expect(isLoopback(admin.host)).toBe(false);
    expect(admin.token).toBe(keys().TOKENGATE_ADMIN_TOKEN);
    const ports = published(tokengate);
    expect(ports).toEqual([
      { host: undefined, hostPort: String(server.port), target: String(server.port) },
      { host: '127.0.0.1', hostPort: String(admin.port), target: String(admin.port) },
    ]);
    expect(issuer.issuerUrl).toBe(`http://localhost:${ports[0]!.hostPort}`);
    const prometheus = parse(read(posix.join('examples', mounted(services.prometheus!, '/etc/prometheus/prometheus.yml')!))) as {
      scrape_configs: Array<{ metrics_path: string; static_configs: Array<{ targets: string[] }> }>;
    };
    expect(prometheus.scrape_configs).toEqual([
      expect.objectContaining({ metrics_path: '/metrics', static_configs: [{ targets: [`tokengate:${admin.port}`] }] }),
    ]);
  });

  it('runs Prometheus with the alerting rules and Grafana with the dashboard in the monitoring profile, published on the loopback only', () => {
    const prometheus = services.prometheus!;
    const grafana = services.grafana!;
    for (const service of [prometheus, grafana]) {
      expect(service.profiles).toEqual(['monitoring']);
      expect(published(service).map((port) => port.host)).toEqual(['127.0.0.1']);
    }
    // Every rule file the config loads is mounted beside it, from examples/prometheus/.
    const config = parse(read(posix.join('examples', mounted(prometheus, '/etc/prometheus/prometheus.yml')!))) as { rule_files: string[] };
    expect(config.rule_files).toEqual(['tokengate-alerts.yml']);
    for (const file of config.rule_files) expect(mounted(prometheus, posix.join('/etc/prometheus', file)), file).toBe(`./prometheus/${file}`);
    // Grafana's data source is the Prometheus service on its container port; its dashboard provider reads where the dashboard is mounted.
    const provisioning = posix.join('examples', mounted(grafana, '/etc/grafana/provisioning')!);
    const { datasources } = parse(read(posix.join(provisioning, 'datasources/prometheus.yml'))) as { datasources: Array<{ type: string; url: string }> };
    expect(datasources).toEqual([expect.objectContaining({ type: 'prometheus', url: `http://prometheus:${published(prometheus)[0]!.target}` })]);
    const { providers } = parse(read(posix.join(provisioning, 'dashboards/tokengate.yml'))) as {
      providers: Array<{ type: string; options: { path: string } }>;
    };
    expect(providers).toEqual([expect.objectContaining({ type: 'file' })]);
    expect(mounted(grafana, posix.join(providers[0]!.options.path, 'tokengate.json'))).toBe('./grafana/tokengate.json');
    expect(Object.keys(grafana.depends_on ?? {})).toEqual(['prometheus']);
  });

  it('sends every route to an example API that serves it, reachable on the Compose network only, and the store to the Redis service', () => {
    const { routes, gateway, store } = config();
    for (const route of routes) {
      const upstream = new URL(route.upstream!);
      const api = services[upstream.hostname];
      expect(api, `${route.path} -> ${upstream.hostname}`).toBeDefined();
      expect(api!.image).toBe(EXAMPLE_IMAGE);
      expect(api!.environment).toMatchObject({ PORT: upstream.port, HOST: '0.0.0.0' });
      expect(SERVES[route.token]).toContain(api!.environment!.TICKETING_API);
      expect(api!.ports, `${upstream.hostname} must not be reachable around tokengate`).toBeUndefined();
    }
    expect(gateway.identityHeaders).toEqual(IDENTITY_HEADERS);
    const redis = new URL(store.url);
    expect([redis.hostname, redis.port]).toEqual(['redis', '6379']);
    expect(services.redis!.image).toMatch(/^redis:/);
    for (const [name, service] of Object.entries(services)) {
      for (const dependency of Object.keys(service.depends_on ?? {})) expect(services[dependency], `${name} depends on ${dependency}`).toBeDefined();
      expect(service.networks).toEqual(Object.keys(compose.networks));
    }
  });

  const client = ['docker compose', 'docker-compose'].find((command) => spawnSync('bash', ['-c', `${command} version`], { stdio: 'ignore' }).status === 0);
  // Skipped only outside CI: .ci/run installs a client when there is none.
  it.skipIf(client === undefined && process.env.CI !== 'true')(
    `passes ${client ?? 'a Compose client'}'s own check (config), with the keys in the environment`,
    () => {
      expect(client, "a Compose client (docker compose, or Debian's docker-compose)").toBeDefined();
      const run = spawnSync('bash', ['-c', `${client} config`], { cwd: join(copy, 'examples'), encoding: 'utf8' });
      expect(run.stderr).toBe('');
      expect(run.status).toBe(0);
      const resolved = parse(run.stdout) as { services: Record<string, { environment: Environment }> };
      expect(Object.keys(resolved.services).sort()).toEqual(Object.keys(services).sort());
      expect(resolved.services.tokengate!.environment).toMatchObject(keys());
    },
  );
});

describe('examples/kubernetes', () => {
  interface Container {
    name: string;
    image: string;
    env?: Array<{ name: string; value: string }>;
    envFrom?: Array<{ secretRef: { name: string } }>;
    ports?: Array<{ name: string; containerPort: number }>;
    readinessProbe?: { httpGet?: { path: string; port: string } };
    livenessProbe?: { httpGet?: { path: string; port: string } };
    lifecycle?: { preStop?: { exec: { command: string[] } } };
    resources?: { requests?: { cpu?: string; memory?: string }; limits?: { memory?: string } };
    volumeMounts?: Array<{ name: string; mountPath: string }>;
  }
  interface PodSpec {
    securityContext?: { runAsNonRoot?: boolean; runAsUser?: number };
    terminationGracePeriodSeconds?: number;
    containers: Container[];
    volumes?: Array<{ name: string; configMap?: { name: string } }>;
  }
  interface KubernetesObject {
    kind: string;
    metadata: { name: string; annotations?: Record<string, string> };
    spec?: {
      replicas?: number;
      selector?: unknown;
      template?: { metadata: { labels: Record<string, string>; annotations?: Record<string, string> }; spec: PodSpec };
      ports?: Array<{ name: string; port: number; targetPort: string }>;
    };
    data?: Record<string, string>;
  }
  const directory = 'examples/kubernetes';
  const kustomization = parse(read(`${directory}/kustomization.yaml`)) as { resources: string[]; secretGenerator: Array<{ name: string; envs: string[] }> };
  const objects = kustomization.resources.flatMap((file) =>
    parseAllDocuments(read(`${directory}/${file}`)).map((document) => document.toJS() as KubernetesObject),
  );
  const find = (kind: string, name: string) => objects.find((object) => object.kind === kind && object.metadata.name === name)!;
  const deployment = find('Deployment', 'ticketing-api');
  const pod = deployment.spec!.template!;
  const container = (name: string) => pod.spec.containers.find((each) => each.name === name)!;
  const sidecar = container('tokengate');
  const api = container('ticketing-api');
  const envOf = (each: Container): Environment => Object.fromEntries((each.env ?? []).map(({ name, value }) => [name, value]));
  const keys = () => readEnvFile(join(copy, directory, kustomization.secretGenerator[0]!.envs[0]!));
  const mount = sidecar.volumeMounts!.find((each) => each.mountPath === dirname(dockerfile.env.TOKENGATE_CONFIG!))!;
  const configMap = find('ConfigMap', pod.spec.volumes!.find((volume) => volume.name === mount.name)!.configMap!.name);
  const configText = configMap.data![basename(dockerfile.env.TOKENGATE_CONFIG!)]!;
  const environment = (): Environment => ({ ...dockerfile.env, ...keys(), ...envOf(sidecar) });
  const config = () => parseConfig(configText, `ConfigMap ${configMap.metadata.name}`, environment());
  const portNamed = (each: Container, name: string) => each.ports?.find((port) => port.name === name)?.containerPort;

  it('lists every manifest of its directory, and generates the Secret of keys from an env file git ignores', () => {
    const files = spawnSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', directory], { cwd: ROOT, encoding: 'utf8' })
      .stdout.split('\n')
      .filter(Boolean);
    expect(files.map((file) => basename(file)).sort()).toEqual(['kustomization.yaml', ...kustomization.resources].sort());
    expect(kustomization.secretGenerator).toEqual([{ name: 'tokengate-keys', envs: ['tokengate.env'] }]);
    expect(ignoredByGit(`${directory}/tokengate.env`)).toBe(true);
    expect(sidecar.envFrom).toEqual([{ secretRef: { name: 'tokengate-keys' } }]);
  });

  it('runs several replicas of the API with tokengate beside it, images built here, every container with resources, as a non-root user', () => {
    expect(deployment.spec!.replicas).toBeGreaterThanOrEqual(2);
    expect(pod.spec.containers.map((each) => each.name).sort()).toEqual(['ticketing-api', 'tokengate']);
    expect(sidecar.image).toBe(TOKENGATE_IMAGE);
    expect(api.image).toBe(EXAMPLE_IMAGE);
    for (const object of objects.filter((each) => each.kind === 'Deployment')) {
      const spec = object.spec!.template!.spec;
      expect(spec.securityContext, object.metadata.name).toMatchObject({ runAsNonRoot: true, runAsUser: expect.any(Number) });
      for (const each of spec.containers) {
        if (IMAGE_DOCKERFILES[each.image] === undefined) expectPinned(each.image);
        expect(each.resources, `${object.metadata.name}/${each.name}`).toMatchObject({
          requests: { cpu: expect.any(String), memory: expect.any(String) },
          limits: { memory: expect.any(String) },
        });
      }
    }
  });

  it("gives the sidecar its config from the ConfigMap, which loads with the pod's environment: every variable set read, every one needed set", () => {
    expect(statSync(join(ROOT, IMAGE_DOCKERFILES[TOKENGATE_IMAGE]!)).isFile()).toBe(true);
    expect(config().issuer.tokenTagKey).toBe(keys().TOKENGATE_TOKEN_TAG_KEY);
    expect(config().admin.token).toBe(keys().TOKENGATE_ADMIN_TOKEN);
    expect(environmentProblems(configText, [...Object.keys(envOf(sidecar)), ...Object.keys(keys())], environment())).toEqual({ unused: [], missing: [] });
    expect(config().issuer.issuerUrl).toBe(envOf(sidecar).TOKENGATE_ISSUER_URL);
  });

  it('probes the ops listener where the kubelet reaches it, on paths it answers, and points Prometheus at its /metrics', async () => {
    const { server, admin } = config();
    expect(portNamed(sidecar, 'http')).toBe(server.port);
    expect(portNamed(sidecar, 'ops')).toBe(admin.port);
    expect(isLoopback(admin.host)).toBe(false);
    expect(sidecar.readinessProbe?.httpGet).toEqual({ path: '/readyz', port: 'ops' });
    expect(sidecar.livenessProbe?.httpGet).toEqual({ path: '/healthz', port: 'ops' });
    expect(pod.metadata.annotations).toEqual({ 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(admin.port), 'prometheus.io/path': '/metrics' });

    // The paths answer on the ops listener of a tokengate built from this very config (on a test Redis prefix).
    const store = createTestRedisStore(uniquePrefix('kubernetes-probes'));
    const built = await buildTokengate(config(), { store, logger: pino({ level: 'silent' }) });
    try {
      for (const url of ['/readyz', '/healthz', '/metrics']) expect((await built.ops.inject({ url })).statusCode, url).toBe(200);
    } finally {
      await built.close();
      await store.close();
    }
  });

  it("routes every path to the API on the pod's loopback, sends the Service to tokengate, and the store to the Redis Service", () => {
    const { routes, gateway, store, server } = config();
    const apiEnvironment = envOf(api);
    expect(apiEnvironment.HOST).toBe('127.0.0.1');
    for (const route of routes) {
      expect(route.upstream).toBe(`http://127.0.0.1:${apiEnvironment.PORT}`);
      expect(SERVES[route.token]).toContain(apiEnvironment.TICKETING_API);
    }
    expect(gateway.identityHeaders).toEqual(IDENTITY_HEADERS);

    const service = find('Service', 'ticketing-api');
    expect(service.spec!.selector).toEqual(deployment.spec!.selector && (deployment.spec!.selector as { matchLabels: unknown }).matchLabels);
    expect(pod.metadata.labels).toMatchObject(service.spec!.selector as Record<string, string>);
    expect(service.spec!.ports).toEqual([{ name: 'http', port: server.port, targetPort: 'http' }]);
    expect(portNamed(api, 'http')).toBeUndefined();

    const redisUrl = new URL(store.url);
    const redisService = find('Service', redisUrl.hostname);
    const redisPort = redisService.spec!.ports!.find((port) => String(port.port) === redisUrl.port)!;
    const redisContainer = find('Deployment', 'redis').spec!.template!.spec.containers[0]!;
    expect(portNamed(redisContainer, redisPort.targetPort)).toBe(6379);
  });

  it('shows the store section for Redis Sentinel and for Redis Cluster, each loading in place of the one Redis', () => {
    const lines = configText.split('\n');
    const active = lines.indexOf('store:');
    const activeEnd = lines.findIndex((line, index) => index > active && !line.startsWith('  '));
    // Each alternative: a commented `store:` and the commented lines indented under it.
    const alternatives = lines
      .map((line, index) => (line === '# store:' ? index : -1))
      .filter((index) => index !== -1)
      .map((start) => {
        const block = ['store:'];
        for (let index = start + 1; lines[index]?.startsWith('#   '); index++) block.push(lines[index]!.slice(2));
        return block;
      });
    expect(alternatives).toHaveLength(2);
    const topologies = alternatives.map((block) => {
      const text = [...lines.slice(0, active), ...block, ...lines.slice(activeEnd)].join('\n');
      const { store } = parseConfig(text, `ConfigMap ${configMap.metadata.name}, store uncommented`, environment());
      return {
        sentinels: store.sentinel.sentinels.length,
        masterName: store.sentinel.masterName,
        nodes: store.cluster.nodes.length,
        keyPrefix: store.keyPrefix,
      };
    });
    expect(topologies).toEqual([
      { sentinels: 3, masterName: 'tokengate', nodes: 0, keyPrefix: config().store.keyPrefix },
      { sentinels: 0, masterName: '', nodes: 3, keyPrefix: config().store.keyPrefix },
    ]);
  });

  it('lets tokengate finish its requests on shutdown before the kubelet kills it', () => {
    const pause = Number(sidecar.lifecycle?.preStop?.exec.command.at(-1));
    expect(pause).toBeGreaterThan(0);
    expect(pod.spec.terminationGracePeriodSeconds).toBeGreaterThan(pause + config().server.shutdownGraceMs / 1000);
  });
});
