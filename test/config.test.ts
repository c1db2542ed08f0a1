import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfigFile, parseConfig } from '../src/load-config.js';
import { configWarnings } from '../src/config/warnings.js';
import { configHash } from '../src/config/reload.js';
import { ConfigSchema } from '../src/config/schema.js';
import { parse as parseYaml } from 'yaml';

function problemsOf(text: string, env: Record<string, string> = {}): Array<{ path: string; message: string; line?: number }> {
  try {
    parseConfig(text, 'test.yaml', env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).problems;
  }
  throw new Error('expected the config to be refused');
}

const route = (extra = '') => `routes:\n  - path: /api/public/me\n    upstream: http://127.0.0.1:3001\n${extra}`;

describe('config loading', () => {
  it('names a listener host that is no host name or IP address (found by the loader property: the issuer URL derived from it threw)', () => {
    for (const host of ['9007199254740992', 'a b', 'example.com:80', 'user@example.com', 'example.com/x']) {
      expect(problemsOf(`server:\n  host: "${host}"\n`), host).toEqual([
        { path: 'server.host', line: 2, message: `expected a host name or IP address to listen on, got ${JSON.stringify(host)}` },
      ]);
    }
    expect(problemsOf('admin:\n  host: "a b"\n')).toContainEqual(expect.objectContaining({ path: 'admin.host', line: 2 }));
    for (const host of ['0.0.0.0', '::', '::1', 'localhost', 'Sidecar.Internal', '10.0.0.7'])
      expect(() => parseConfig(`server:\n  host: "${host}"\n`, 'test.yaml', {})).not.toThrow();
  });

  it('names the YAML problem of an alias without its anchor, an alias bomb, or a value that contains itself (found by the loader property)', () => {
    expect(problemsOf('server: *nowhere\n')).toEqual([{ path: '', message: expect.stringMatching(/^invalid YAML: Unresolved alias .*: nowhere$/) }]);
    const bomb = [
      'a: &a [x, x, x, x, x, x, x, x, x]',
      ...'bcdef'.split('').map((name, index) => `${name}: &${name} [${Array(9).fill(`*${'abcde'[index]}`).join(', ')}]`),
    ].join('\n');
    expect(problemsOf(bomb)).toEqual([{ path: '', message: expect.stringMatching(/^invalid YAML: Excessive alias count/) }]);
    expect(problemsOf('routes: &routes\n  - path: /a\n    upstream: http://127.0.0.1:1\n    scopes: *routes\n')).toEqual([
      { path: 'routes[0].scopes', line: 4, message: 'contains itself through a YAML alias (an *alias inside the &anchor it names)' },
    ]);
  });

  it('bounds what would crash at start or misfire: a cache of a billion entries, a timeout past what a timer holds', () => {
    expect(problemsOf('cache:\n  maxEntries: 1000000000\n')).toEqual([
      { path: 'cache.maxEntries', line: 2, message: expect.stringContaining('from 1 to 10000000') },
    ]);
    expect(problemsOf('cache:\n  negativeMaxEntries: 1000000000\n')).toContainEqual(expect.objectContaining({ path: 'cache.negativeMaxEntries' }));
    expect(problemsOf('dpop:\n  replayCacheEntries: 1000000000\n')).toContainEqual(expect.objectContaining({ path: 'dpop.replayCacheEntries' }));
    expect(problemsOf('store:\n  commandTimeoutMs: 2147483648\n')).toEqual([
      { path: 'store.commandTimeoutMs', line: 2, message: expect.stringContaining('to 2147483647') },
    ]);
    expect(() => parseConfig('store:\n  commandTimeoutMs: 2147483647\ncache:\n  maxEntries: 10000000\n', 'test.yaml', {})).not.toThrow();
  });

  it('accepts the shipped configs', () => {
    for (const file of ['config/tokengate.yaml', 'config/tokengate.redis.yaml']) {
      const config = loadConfigFile(file, {});
      expect(config.routes.length).toBeGreaterThan(0);
    }
  });

  it('writes out every section of the schema in the embedded default, as docs/configuration.md says', () => {
    const written = Object.keys(parseYaml(readFileSync('config/tokengate.yaml', 'utf8')) as Record<string, unknown>);
    expect(written.sort()).toEqual(Object.keys(ConfigSchema.properties).sort());
  });

  it('fills every default and freezes the result', () => {
    const config = parseConfig('{}', 'empty.yaml', {});
    expect(config.server.port).toBe(8080);
    expect(config.store.driver).toBe('memory');
    expect(config.cache.maxEntries).toBe(100_000);
    expect(config.issuer.accessTokenTtl).toBe(7200);
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.server)).toBe(true);
    expect(() => {
      (config.server as { port: number }).port = 1;
    }).toThrow(TypeError);
  });

  it('substitutes ${VAR} and ${VAR:-default} in values, converting to the expected type', () => {
    const config = parseConfig('server:\n  port: ${PORT}\n  host: ${HOST:-0.0.0.0}\nstore:\n  keyPrefix: "a$$b:"\n', 'env.yaml', { PORT: '8181' });
    expect(config.server.port).toBe(8181);
    expect(config.server.host).toBe('0.0.0.0');
    expect(config.store.keyPrefix).toBe('a$b:');
  });

  it('substitutes values only: an environment value cannot add structure', () => {
    const config = parseConfig('logging:\n  level: info\nstore:\n  keyPrefix: ${PREFIX}\n', 'env.yaml', { PREFIX: 'x\nadmin:\n  host: 0.0.0.0' });
    expect(config.store.keyPrefix).toBe('x\nadmin:\n  host: 0.0.0.0');
    expect(config.admin.host).toBe('127.0.0.1');
  });

  it('reports every problem at once, each with its key path and line', () => {
    const problems = problemsOf(
      ['server:', '  port: abc', '  hots: x', 'store:', '  driver: redsi', 'cache:', '  ttlSeconds: -1', route('    tokn: user\n    token: usr\n')].join('\n'),
    );
    expect(problems).toEqual([
      { path: 'server.port', line: 2, message: 'expected an integer, got "abc"' },
      { path: 'server.hots', line: 3, message: expect.stringContaining('unknown key') },
      { path: 'store.driver', line: 5, message: 'expected one of memory, redis, got "redsi"' },
      { path: 'cache.ttlSeconds', line: 7, message: 'expected an integer >= 0, got -1' },
      { path: 'routes[0].tokn', line: 11, message: expect.stringContaining('unknown key') },
      { path: 'routes[0].token', line: 12, message: 'expected one of user, application, any, got "usr"' },
    ]);
  });

  it('names the missing environment variable and the key that needs it', () => {
    expect(problemsOf('admin:\n  token: ${ADMIN_TOKEN}\n')).toEqual([
      { path: 'admin.token', line: 2, message: expect.stringContaining('environment variable ADMIN_TOKEN is not set') },
    ]);
  });

  it('refuses an admin listener off loopback without a token, and short tokens', () => {
    expect(problemsOf('admin:\n  host: 0.0.0.0\n')).toEqual([{ path: 'admin.token', line: 2, message: expect.stringContaining('not loopback') }]);
    expect(problemsOf('admin:\n  token: short\n')[0]).toMatchObject({ path: 'admin.token', message: 'must be at least 16 characters' });
    expect(parseConfig('admin:\n  host: 0.0.0.0\n  token: ${T}\n', 't.yaml', { T: 'a-long-enough-admin-token' }).admin.host).toBe('0.0.0.0');
  });

  it('refuses server.trustProxy: true, naming the key, the file and why; takes a hop count or a list of addresses and ranges', () => {
    expect(() => parseConfig('server:\n  trustProxy: true\n', 'proxied.yaml', {})).toThrow(
      /^proxied\.yaml has 1 problem:\n {2}- server\.trustProxy \(line 2\): true is refused: .*leftmost, which the client writes itself/,
    );
    // An environment variable says "true" too.
    expect(problemsOf('server:\n  trustProxy: ${TRUST}\n', { TRUST: 'true' })).toEqual([
      { path: 'server.trustProxy', line: 2, message: expect.stringContaining('true is refused') },
    ]);
    expect(problemsOf('server:\n  trustProxy: [10.0.0.0/8, not-an-address, 10.0.0.0/99]\n')).toEqual([
      { path: 'server.trustProxy[1]', line: 2, message: expect.stringContaining('expected an IP address, a CIDR range') },
      { path: 'server.trustProxy[2]', line: 2, message: expect.stringContaining('expected an IP address, a CIDR range') },
    ]);
    expect(parseConfig('server:\n  trustProxy: 2\n', 't.yaml', {}).server.trustProxy).toBe(2);
    expect(parseConfig('server:\n  trustProxy: [10.0.0.0/8, "2001:db8::/32", loopback]\n', 't.yaml', {}).server.trustProxy).toEqual([
      '10.0.0.0/8',
      '2001:db8::/32',
      'loopback',
    ]);
    expect(parseConfig('server:\n  trustProxy: false\n', 't.yaml', {}).server.trustProxy).toBe(false);
  });

  it('checks routes at load time: upstream URLs, non-canonical prefixes, duplicates, per-kind upstreams', () => {
    const problems = problemsOf(`routes:
  - path: /api/public/me
    upstream: ftp://x
  - path: /api/public/me/
    upstream: http://a
  - path: /api/../x
    upstream: http://a?q=1
  - path: /api/x
  - path: /api/y
    token: any
    upstreams:
      user: http://u
`);
    expect(problems.map((problem) => problem.path)).toEqual([
      'routes[0].upstream',
      'routes[1].path',
      'routes[2].path',
      'routes[2].upstream',
      'routes[3].upstream',
      'routes[4].upstreams.application',
    ]);
  });

  it('checks cross-key rules: default scopes must be known scopes, redis needs a redis URL', () => {
    const problems = problemsOf('issuer:\n  scopes: [public]\n  defaultScopes: [public, admin]\nstore:\n  driver: redis\n  url: http://localhost\n');
    expect(problems.map((problem) => problem.path).sort()).toEqual(['issuer.defaultScopes[1]', 'store.url']);
  });

  it('reports invalid YAML, duplicate keys and a non-mapping document with a line', () => {
    expect(problemsOf('server: [\n')[0]!.message).toMatch(/^invalid YAML/);
    expect(problemsOf('server:\n  port: 1\n  port: 2\n')[0]).toMatchObject({ line: 3, message: expect.stringContaining('unique') });
    expect(problemsOf('- a\n- b\n')[0]!.message).toContain('expected a mapping');
  });

  it('names the file in the message, and a missing file says what to do', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tokengate-config-'));
    try {
      const file = join(dir, 'broken.yaml');
      writeFileSync(file, 'server:\n  port: 99999\n');
      expect(() => loadConfigFile(file, {})).toThrow(`${file} has 1 problem:\n  - server.port (line 2): expected an integer from 0 to 65535, got 99999`);
      expect(() => loadConfigFile(join(dir, 'missing.yaml'), {})).toThrow(/does not exist; pass an existing YAML file with --config/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('issuer.issuerUrl', () => {
  const issuerUrlOf = (server: string, issuer = '') => parseConfig(`server: { ${server} }\n${issuer}`, 'issuer.yaml', {}).issuer.issuerUrl;

  it('follows the public listener when unset: http://<host>:<port>, localhost for a wildcard or loopback host', () => {
    expect(issuerUrlOf('port: 8181')).toBe('http://localhost:8181');
    expect(issuerUrlOf('host: 0.0.0.0, port: 8080')).toBe('http://localhost:8080');
    expect(issuerUrlOf('host: "::", port: 8080')).toBe('http://localhost:8080');
    expect(issuerUrlOf('host: 127.0.0.2, port: 9000')).toBe('http://localhost:9000');
    expect(issuerUrlOf('host: "::1", port: 9000')).toBe('http://localhost:9000');
    expect(issuerUrlOf('host: 10.0.0.5, port: 8080')).toBe('http://10.0.0.5:8080');
    expect(issuerUrlOf('host: "fd00::5", port: 8080')).toBe('http://[fd00::5]:8080');
    expect(issuerUrlOf('host: gateway.internal, port: 80')).toBe('http://gateway.internal');
  });

  it('is kept as given when set', () => {
    expect(issuerUrlOf('port: 8181', 'issuer: { issuerUrl: "https://auth.example.com" }')).toBe('https://auth.example.com');
  });

  it('cannot follow a listener on port 0 (a free port picked at start): the issuer must name its URL, a pure gateway need not', () => {
    expect(problemsOf('server: { port: 0 }\n')).toEqual([{ path: 'issuer.issuerUrl', line: 1, message: expect.stringContaining('server.port is 0') }]);
    expect(issuerUrlOf('port: 0', 'issuer: { enabled: false }')).toBe('');
    expect(issuerUrlOf('port: 0', 'issuer: { issuerUrl: "http://localhost:8080" }')).toBe('http://localhost:8080');
  });
});

describe('config warnings', () => {
  const warningsOf = (text: string) => configWarnings(parseConfig(text, 'warnings.yaml', {}));

  it('warn when the issuer URL names this machine on another port than the public listener', () => {
    expect(warningsOf('server: { port: 8181 }\nissuer: { issuerUrl: "http://localhost:8080" }\n')).toEqual([
      expect.stringMatching(
        /^issuer\.issuerUrl \(http:\/\/localhost:8080\) names port 8080 on this machine, but the public listener is on port 8181 \(server\.port\)/,
      ),
    ]);
    expect(warningsOf('server: { port: 8443 }\nissuer: { issuerUrl: "https://127.0.0.1" }\n')).toEqual([expect.stringContaining('names port 443')]);
    expect(warningsOf('server: { port: 8181 }\nissuer: { issuerUrl: "http://[::1]:8080" }\n')).toEqual([expect.stringContaining('names port 8080')]);
  });

  it('stay quiet for a derived URL, a matching port, another host, a pure gateway, or a listener on port 0', () => {
    expect(warningsOf('server: { port: 8181 }\n')).toEqual([]);
    expect(warningsOf('server: { port: 8181 }\nissuer: { issuerUrl: "http://127.0.0.1:8181/" }\n')).toEqual([]);
    expect(warningsOf('server: { port: 8181 }\nissuer: { issuerUrl: "https://auth.example.com" }\n')).toEqual([]);
    expect(warningsOf('server: { port: 8181 }\nissuer: { enabled: false, issuerUrl: "http://localhost:8080" }\n')).toEqual([]);
    expect(warningsOf('server: { port: 0 }\nissuer: { issuerUrl: "http://localhost:8080" }\n')).toEqual([]);
  });

  it('warn when a full cache would not fit the heap the process was given', () => {
    const config = parseConfig('cache: { maxEntries: 400000 }\n', 'warnings.yaml', {});
    // What node reports with the image's --max-old-space-size=128: the old generation and 48 MB of young one.
    const smallHeap = 176 * 1024 * 1024;
    expect(configWarnings(config, smallHeap)).toEqual([
      expect.stringMatching(
        /^cache\.maxEntries \(400000\) and cache\.negativeMaxEntries \(10000\) need about 149 MB of heap .* --max-old-space-size=199 or more/,
      ),
    ]);
    expect(configWarnings(config, 4096 * 1024 * 1024)).toEqual([]);
    // The shipped cache sizes fit the image's heap, as does no cache at all.
    expect(configWarnings(parseConfig('{}\n', 'warnings.yaml', {}), smallHeap)).toEqual([]);
    expect(configWarnings(parseConfig('cache: { enabled: false, maxEntries: 400000 }\n', 'warnings.yaml', {}), smallHeap)).toEqual([]);
  });

  it('are none for the shipped configs', () => {
    for (const file of ['config/tokengate.yaml', 'config/tokengate.redis.yaml']) expect(configWarnings(loadConfigFile(file, {}))).toEqual([]);
  });
});

describe('store topologies', () => {
  const issuer = 'issuer:\n  issuerUrl: http://localhost:8080\n';

  it('reads each topology into what the store connects to, with the replicas a write waits for', async () => {
    const { redisConnection, replicasToWaitFor } = await import('../src/store/redis-topology.js');
    const load = (store: string) => parseConfig(`${issuer}store:\n  driver: redis\n${store}`, 'test.yaml', { PASSWORD: 'from-the-environment' }).store;

    const standalone = load('  url: rediss://:secret@redis.example:6380\n');
    expect(redisConnection(standalone)).toEqual({
      topology: { kind: 'standalone', url: 'rediss://:secret@redis.example:6380' },
      tls: { enabled: false, caFile: '' },
    });
    expect(replicasToWaitFor(standalone, redisConnection(standalone).topology)).toBe(0);

    const sentinel = load(
      '  sentinel:\n    sentinels: ["10.0.0.1:26379", "sentinel-2:26379"]\n    masterName: main\n    password: ${PASSWORD}\n  password: ${PASSWORD}\n',
    );
    expect(redisConnection(sentinel)).toMatchObject({
      topology: { kind: 'sentinel', sentinels: ['10.0.0.1:26379', 'sentinel-2:26379'], masterName: 'main', sentinelPassword: 'from-the-environment' },
      password: 'from-the-environment',
    });
    expect(replicasToWaitFor(sentinel, redisConnection(sentinel).topology)).toBe(1);

    const cluster = load(
      '  cluster:\n    nodes: ["redis-0:6379"]\n    natMap: { "10.1.0.5:6379": "127.0.0.1:7000" }\n    scaleReads: all\n  waitForReplicas: 2\n  tls:\n    enabled: true\n',
    );
    expect(redisConnection(cluster)).toMatchObject({
      topology: { kind: 'cluster', nodes: ['redis-0:6379'], natMap: { '10.1.0.5:6379': '127.0.0.1:7000' }, scaleReads: 'all' },
      tls: { enabled: true, caFile: '' },
    });
    expect(replicasToWaitFor(cluster, redisConnection(cluster).topology)).toBe(2);
  });

  it('refuses two topologies at once, an incomplete one, and addresses that are not host:port, naming each key', () => {
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  url: redis://a:6379\n  cluster:\n    nodes: ["b:6379"]\n`)).toEqual([
      {
        path: 'store.cluster',
        line: 7,
        message:
          'store.url and store.cluster are both set: choose one topology (store.url for one server, store.sentinel for Redis Sentinel, store.cluster for Redis Cluster)',
      },
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  sentinel:\n    sentinels: ["a:26379", "b"]\n`)).toEqual([
      { path: 'store.sentinel.sentinels[1]', line: 6, message: 'expected host:port, got "b"' },
      { path: 'store.sentinel.masterName', line: 6, message: 'required with store.sentinel.sentinels: the name the sentinels monitor the master under' },
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  sentinel:\n    masterName: main\n`).map((problem) => problem.path)).toEqual([
      'store.sentinel.sentinels',
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  cluster:\n    nodes: ["a:6379", "b:99999"]\n    natMap: { "c": "d:1" }\n`)).toEqual([
      { path: 'store.cluster.nodes[1]', line: 6, message: 'expected host:port, got "b:99999"' },
      { path: 'store.cluster.natMap.c', line: 7, message: 'expected "host:port": host:port, got "c": "d:1"' },
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  keyPrefix: "{tg}:"\n  cluster:\n    nodes: ["a:6379"]\n`)).toEqual([
      { path: 'store.keyPrefix', line: 5, message: expect.stringContaining('hash tag') },
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  url: redis://a:6379\n  password: x\n`)).toEqual([
      { path: 'store.password', line: 6, message: expect.stringContaining('put it in the URL') },
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  url: http://a:6379\n`).map((problem) => problem.message)).toEqual([
      'expected a redis:// or rediss:// URL',
    ]);
    expect(problemsOf(`${issuer}store:\n  driver: redis\n  tls:\n    enabled: true\n    caFile: /no/such/ca.pem\n`)).toEqual([
      { path: 'store.tls.caFile', line: 7, message: 'no such file: /no/such/ca.pem' },
    ]);
  });

  it('leaves the topology keys alone with the memory store', () => {
    expect(parseConfig(`${issuer}store:\n  url: redis://a:6379\n  cluster:\n    nodes: ["b:6379"]\n`, 'test.yaml', {}).store.driver).toBe('memory');
  });
});

describe('identityProviders', () => {
  const provider = (fields: string) =>
    `identityProviders:\n  - issuer: https://login.company.example\n    jwksUrl: https://login.company.example/jwks\n${fields}`;

  it('accepts a provider over https with asymmetric algorithms, and fills its defaults', () => {
    const [entry] = parseConfig(provider(''), 'test.yaml', {}).identityProviders;
    expect(entry).toEqual({
      issuer: 'https://login.company.example',
      jwksUrl: 'https://login.company.example/jwks',
      caFile: '',
      algorithms: ['RS256', 'ES256'],
      userClaim: 'email',
      jitUsers: false,
      maxAssertionLifetimeSeconds: 300,
      keyRefreshCooldownSeconds: 30,
    });
  });

  it('refuses a key set in the clear, HMAC or none, a missing CA file, a provider listed twice, and users not kept in the store', () => {
    const problems = problemsOf(
      `issuer:\n  users:\n    source: http\n    url: https://users.example/check\n` +
        `identityProviders:\n  - issuer: https://login.company.example\n    jwksUrl: http://login.company.example/jwks\n    algorithms: [RS256, HS256, none]\n    caFile: /no/such/ca.pem\n` +
        `  - issuer: https://login.company.example\n    jwksUrl: https://login.company.example/jwks\n`,
    );
    expect(problems.map(({ path, message }) => ({ path, message }))).toEqual([
      { path: 'identityProviders', message: expect.stringContaining('issuer.users.source "store"') },
      { path: 'identityProviders[0].jwksUrl', message: 'expected an https URL, got "http://login.company.example/jwks"' },
      { path: 'identityProviders[0].algorithms[1]', message: expect.stringContaining('got "HS256"') },
      { path: 'identityProviders[0].algorithms[2]', message: expect.stringContaining('got "none"') },
      { path: 'identityProviders[0].caFile', message: 'no such file: /no/such/ca.pem' },
      { path: 'identityProviders[1].issuer', message: '"https://login.company.example" is listed more than once' },
    ]);
  });
});

describe('identityProviders[].sharedSignals', () => {
  const provider = (signals: string, extra = '') =>
    `identityProviders:\n  - issuer: https://login.company.example\n    jwksUrl: https://login.company.example/jwks\n    sharedSignals:\n${signals}${extra}`;
  const push =
    '      name: company\n      configurationUrl: https://login.company.example/.well-known/ssf-configuration\n      pushAuthorization: ${SSF_PUSH}\n      streamId: s-1\n';

  it('takes a push receiver on a stream the operator made, its secret from the environment, and fills its defaults', () => {
    const [entry] = parseConfig(provider(push), 'test.yaml', { SSF_PUSH: 'Bearer 0123456789abcdef' }).identityProviders;
    expect(entry!.sharedSignals).toEqual({
      name: 'company',
      configurationUrl: 'https://login.company.example/.well-known/ssf-configuration',
      delivery: 'push',
      audience: '',
      pushAuthorization: 'Bearer 0123456789abcdef',
      pushEndpointUrl: '',
      transmitterAuthorization: '',
      streamId: 's-1',
      pollUrl: '',
      events: [],
      narrowingClaims: ['scope', 'resource', 'groups', 'roles', 'entitlements'],
      maxEventAgeSeconds: 86_400,
      pollIntervalMs: 1_000,
      maxEvents: 100,
      statusIntervalSeconds: 300,
    });
  });

  it('refuses what a receiver cannot work with, naming each key', () => {
    const problems = problemsOf(
      provider(
        '      name: company\n      configurationUrl: http://login.company.example/.well-known/ssf-configuration\n      pushAuthorization: short\n      pollUrl: https://login.company.example/poll\n',
      ) +
        '  - issuer: https://login.other.example\n    jwksUrl: https://login.other.example/jwks\n    sharedSignals:\n' +
        '      name: Company\n      configurationUrl: https://login.other.example/ssf\n      delivery: poll\n      streamId: s-2\n      pushEndpointUrl: ftp://x\n' +
        '  - issuer: https://login.third.example\n    jwksUrl: https://login.third.example/jwks\n    sharedSignals:\n' +
        '      name: third\n      configurationUrl: https://login.third.example/ssf\n      delivery: poll\n      pollUrl: http://login.third.example/poll\n',
    );
    expect(problems.map(({ path, message }) => ({ path, message }))).toEqual([
      { path: 'identityProviders[0].sharedSignals.streamId', message: expect.stringContaining('transmitterAuthorization for tokengate to create one') },
      { path: 'identityProviders[0].sharedSignals.configurationUrl', message: expect.stringContaining('expected an https URL') },
      { path: 'identityProviders[0].sharedSignals.pushAuthorization', message: expect.stringContaining('16 characters or more') },
      { path: 'identityProviders[0].sharedSignals.pollUrl', message: 'only for delivery: poll' },
      { path: 'identityProviders[1].sharedSignals.name', message: '"Company" is the name of identityProviders[0]\'s receiver too' },
      { path: 'identityProviders[1].sharedSignals.pollUrl', message: expect.stringContaining('required for a poll stream the operator made') },
      { path: 'identityProviders[1].sharedSignals.pushEndpointUrl', message: expect.stringContaining('absolute http(s) URL') },
      { path: 'identityProviders[2].sharedSignals.streamId', message: expect.stringContaining('give the id of the stream') },
      { path: 'identityProviders[2].sharedSignals.pollUrl', message: expect.stringContaining('expected an https URL') },
    ]);
  });

  it('refuses a route over the push endpoint while a provider pushes, and not otherwise', () => {
    const routes = 'routes:\n  - path: /ssf\n    upstream: http://127.0.0.1:3001\n';
    const env = { SSF_PUSH: 'Bearer 0123456789abcdef' };
    expect(problemsOf(provider(push, routes), env)).toEqual([
      {
        path: 'routes[0].path',
        line: expect.any(Number) as unknown as number,
        message: '"/ssf" overlaps the shared signals push endpoint /ssf/events/<name> on the same listener',
      },
    ]);
    expect(() => parseConfig(routes, 'test.yaml', env)).not.toThrow();
  });

  it('leaves its secrets out of the config hash, so /metrics lets nobody test guesses of them', () => {
    const hashWith = (secret: string) => configHash(parseConfig(provider(push), 'test.yaml', { SSF_PUSH: secret }));
    expect(hashWith('Bearer 0123456789abcdef')).toBe(hashWith('Bearer fedcba9876543210'));
  });
});
