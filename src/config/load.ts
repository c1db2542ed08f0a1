import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { Value, type ValueError } from '@sinclair/typebox/value';
import { LineCounter, parseDocument, isNode, type Document } from 'yaml';
import type { ConfigCheck, ConfigProblem, Environment } from './problem.js';
import { ConfigSchema, type Config } from './schema.js';
import { checkGatewayHeaders, checkRoutes } from './routes.js';
import { checkStore } from './store-checks.js';
import { isBearerToken } from '../http/bearer.js';
import { trustedProxyProblem } from '../http/trusted-proxies.js';
import { decodeTagKey } from '../token/token-value.js';

/** Every problem a config file has, reported at once, each naming the file and the key. */
export class ConfigError extends Error {
  constructor(
    readonly file: string,
    readonly problems: ConfigProblem[],
  ) {
    super(formatProblems(file, problems));
    this.name = 'ConfigError';
  }
}

function formatProblems(file: string, problems: ConfigProblem[]): string {
  const lines = problems.map((problem) => {
    const where = problem.path === '' ? '(top level)' : problem.path;
    const line = problem.line === undefined ? '' : ` (line ${problem.line})`;
    return `  - ${where}${line}: ${problem.message}`;
  });
  const count = problems.length === 1 ? '1 problem' : `${problems.length} problems`;
  return `${file} has ${count}:\n${lines.join('\n')}`;
}

export type { Environment };

export interface ConfigLoader {
  /** Reads, substitutes, validates and freezes a config file. Throws ConfigError. */
  loadConfigFile(file: string, env?: Environment): Readonly<Config>;
  /** Same as loadConfigFile for text already in memory; `file` names it in messages. */
  parseConfig(text: string, file: string, env?: Environment): Readonly<Config>;
}

/** The loader, with the checks of the rooms above config/ (src/load-config.ts composes them). */
export function configLoader(roomChecks: readonly ConfigCheck[]): ConfigLoader {
  const parseConfig = (text: string, file: string, env: Environment = process.env) => parseConfigText(text, file, env, roomChecks);
  return {
    parseConfig,
    loadConfigFile(file, env = process.env) {
      let text: string;
      try {
        text = readFileSync(file, 'utf8');
      } catch (error) {
        const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'the file does not exist' : `the file cannot be read (${(error as Error).message})`;
        throw new ConfigError(file, [
          { path: '', message: `${reason}; pass an existing YAML file with --config (config/tokengate.yaml is the documented default)` },
        ]);
      }
      return parseConfig(text, file, env);
    },
  };
}

function parseConfigText(text: string, file: string, env: Environment, roomChecks: readonly ConfigCheck[]): Readonly<Config> {
  const lineCounter = new LineCounter();
  const document = parseDocument(text, { lineCounter, prettyErrors: true, uniqueKeys: true });
  if (document.errors.length > 0) {
    throw new ConfigError(
      file,
      document.errors.map((error) => ({
        path: '',
        message: `invalid YAML: ${error.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '')}`,
        line: error.linePos?.[0].line,
      })),
    );
  }
  const raw = documentValue(document, file);
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ConfigError(file, [{ path: '', message: 'expected a mapping of sections (server, admin, store, issuer, cache, gateway, routes, logging)' }]);
  }

  const problems: ConfigProblem[] = [];
  const substituted = substituteEnvironment(raw, [], env, problems);
  // Read before defaults are filled in (TypeBox fills them into the object it is given).
  const storeUrlGiven = urlGiven(substituted);
  const withDefaults = Value.Default(ConfigSchema, Value.Convert(ConfigSchema, substituted));
  // A value already refused while substituting (it contains itself) is not reported again below it.
  const substitutionProblems = problems.map((problem) => problem.path);
  for (const error of Value.Errors(ConfigSchema, withDefaults)) {
    const path = keyPath(pointerSegments(error.path));
    if (!isShadowedUnionError(error) && !substitutionProblems.some((refused) => isAtOrBelow(path, refused))) problems.push({ path, message: describe(error) });
  }
  // Semantic checks run even when the shape is wrong elsewhere, so one run reports everything;
  // a section too broken to check semantically has already been reported above.
  try {
    const reported = new Set(problems.map((problem) => problem.path));
    for (const problem of checkSemantics(withDefaults as Config, storeUrlGiven, roomChecks, env)) if (!reported.has(problem.path)) problems.push(problem);
  } catch {
    // the shape errors above say what to fix first
  }
  for (const problem of problems) problem.line ??= lineOf(document, lineCounter, parseKeyPath(problem.path));
  problems.sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
  if (problems.length > 0) throw new ConfigError(file, problems);
  const config = withDefaults as Config;
  if (config.issuer.issuerUrl === '' && config.server.port !== 0) config.issuer.issuerUrl = listenerUrl(config.server);
  if (config.openidConnect.enabled) addOpenIdScopes(config.issuer);
  return deepFreeze(config);
}

/** What OpenID Connect's scopes let an application know, in words, unless the config words them itself. */
const OPENID_SCOPE_DESCRIPTIONS: Readonly<Record<string, string>> = {
  openid: 'Know who you are when you sign in with your account',
  email: 'See your e-mail address',
  profile: 'See your name and profile, as far as this service knows them',
};

/** With OpenID Connect on, its scopes are the issuer's too: applications may be registered for them. */
function addOpenIdScopes(issuer: Config['issuer']): void {
  for (const scope of Object.keys(OPENID_SCOPE_DESCRIPTIONS)) if (!issuer.scopes.includes(scope)) issuer.scopes.push(scope);
  issuer.scopeDescriptions = { ...OPENID_SCOPE_DESCRIPTIONS, ...issuer.scopeDescriptions };
}

/**
 * The document as plain values. The YAML library refuses, by throwing, an alias whose anchor is
 * not set before it and more aliases than a document of this size can need (an alias bomb):
 * both are a problem of the file, not a failure of tokengate.
 */
function documentValue(document: Document, file: string): unknown {
  try {
    return document.toJS() ?? {};
  } catch (error) {
    if (!(error instanceof ReferenceError)) throw error;
    throw new ConfigError(file, [{ path: '', message: `invalid YAML: ${error.message}` }]);
  }
}

/**
 * The URL of the public listener as a client on this machine reaches it: what `issuer.issuerUrl`
 * defaults to. A wildcard or loopback host becomes `localhost`, the name browsers treat as secure
 * for development and the admin API accepts in http redirect URIs.
 */
export function listenerUrl(server: Pick<Config['server'], 'host' | 'port'>): string {
  const host = isWildcard(server.host) || isLoopback(server.host) ? 'localhost' : isIP(server.host) === 6 ? `[${server.host}]` : server.host;
  return new URL(`http://${host}:${server.port}`).origin;
}

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::';
}

const VARIABLE = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/**
 * `${VAR}` and `${VAR:-default}` in string values; `$$` is a literal `$`. Values only, never keys
 * or structure. A value that contains itself (a YAML alias to an anchor around it, `a: &a [*a]`)
 * is a problem of its key, not an endless walk.
 */
function substituteEnvironment(
  value: unknown,
  path: Array<string | number>,
  env: Environment,
  problems: ConfigProblem[],
  around: ReadonlySet<unknown> = new Set(),
): unknown {
  if (typeof value === 'object' && value !== null && around.has(value)) {
    problems.push({ path: keyPath(path), message: 'contains itself through a YAML alias (an *alias inside the &anchor it names)' });
    return undefined;
  }
  if (typeof value === 'string') {
    return value.replace(VARIABLE, (match, name: string | undefined, fallback: string | undefined) => {
      if (match === '$$') return '$';
      const found = env[name!];
      if (found !== undefined && found !== '') return found;
      if (fallback !== undefined) return fallback;
      problems.push({ path: keyPath(path), message: `environment variable ${name} is not set (write \${${name}:-default} to give a default)` });
      return '';
    });
  }
  if (typeof value !== 'object' || value === null) return value;
  const inside = new Set(around).add(value);
  if (Array.isArray(value)) return value.map((item, index) => substituteEnvironment(item, [...path, index], env, problems, inside));
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, substituteEnvironment(item, [...path, key], env, problems, inside)]));
}

/** Whether the file sets `store.url` itself (the loaded config always has one, its default). */
function urlGiven(raw: unknown): boolean {
  const store = (raw as { store?: unknown }).store;
  return typeof store === 'object' && store !== null && (store as { url?: unknown }).url !== undefined;
}

function checkSemantics(config: Config, storeUrlGiven: boolean, roomChecks: readonly ConfigCheck[], env: Environment): ConfigProblem[] {
  const problems = [...checkListeners(config), ...checkTrustProxy(config), ...checkAdminToken(config)];
  if (config.server.workers !== 1 && config.store.driver === 'memory') {
    problems.push({
      path: 'server.workers',
      message: `${JSON.stringify(config.server.workers)} workers would each keep their own memory store (a token issued by one unknown to the others): set store.driver: redis, or server.workers: 1`,
    });
  }
  problems.push(
    ...checkStore(config.store, storeUrlGiven),
    ...checkIssuer(config),
    ...checkRoutes(config.routes, { issuerEnabled: config.issuer.enabled, decisionsEnabled: config.decisions.enabled }),
    ...checkGatewayHeaders(config.gateway),
  );
  for (const check of roomChecks) problems.push(...check(config, env));
  return problems;
}

/** The listeners' hosts, and no two of them on one address and port. */
function checkListeners(config: Config): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const [section, listener] of [
    ['server', config.server],
    ['admin', config.admin],
    ['decisions', config.decisions],
  ] as const) {
    if (!isHost(listener.host))
      problems.push({ path: `${section}.host`, message: `expected a host name or IP address to listen on, got ${JSON.stringify(listener.host)}` });
  }
  if (config.server.port !== 0 && config.server.port === config.admin.port && config.server.host === config.admin.host) {
    problems.push({ path: 'admin.port', message: "the ops listener cannot share the public listener's address and port" });
  }
  if (config.decisions.enabled && config.decisions.port !== 0) {
    for (const [name, listener] of [
      ['public', config.server],
      ['ops', config.admin],
    ] as const) {
      if (config.decisions.port === listener.port && config.decisions.host === listener.host) {
        problems.push({ path: 'decisions.port', message: `the decision listener cannot share the ${name} listener's address and port` });
      }
    }
  }
  return problems;
}

/**
 * `true` would believe every X-Forwarded-For entry, and take the leftmost, which the client
 * writes: any client could then pick the address its sign-ins are throttled and logged under.
 */
function checkTrustProxy(config: Config): ConfigProblem[] {
  const setting = config.server.trustProxy;
  if (setting === true) {
    return [
      {
        path: 'server.trustProxy',
        message:
          'true is refused: it believes every X-Forwarded-For entry and takes the leftmost, which the client writes itself (any client could choose the address it is throttled under). Name the proxies in front of tokengate by address or CIDR range (e.g. [10.0.0.0/8]), or give their number (e.g. 1)',
      },
    ];
  }
  if (!Array.isArray(setting)) return [];
  return setting.flatMap((entry, index) => {
    const problem = trustedProxyProblem(entry);
    return problem === null
      ? []
      : [{ path: `server.trustProxy[${index}]`, message: `expected an IP address, a CIDR range, loopback, linklocal or uniquelocal: ${problem}` }];
  });
}

function checkAdminToken(config: Config): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (config.admin.token === '' && !isLoopback(config.admin.host)) {
    problems.push({
      path: 'admin.token',
      message: `the admin listener binds to ${config.admin.host}, which is not loopback, so it needs a token: set admin.token (from the environment, e.g. \${TOKENGATE_ADMIN_TOKEN})`,
    });
  }
  if (config.admin.token !== '' && config.admin.token.length < 16) {
    problems.push({ path: 'admin.token', message: 'must be at least 16 characters' });
  } else if (config.admin.token !== '' && !isBearerToken(config.admin.token)) {
    problems.push({
      path: 'admin.token',
      message: 'must be sendable as a bearer token: letters, digits and - . _ ~ + /, optionally ending in = (e.g. openssl rand -base64 32)',
    });
  }
  return problems;
}

function checkIssuer(config: Config): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (config.issuer.tokenTagKey !== '') {
    try {
      decodeTagKey(config.issuer.tokenTagKey);
    } catch (error) {
      problems.push({ path: 'issuer.tokenTagKey', message: (error as Error).message });
    }
  }
  config.issuer.defaultScopes.forEach((scope, index) => {
    if (!config.issuer.scopes.includes(scope)) {
      problems.push({ path: `issuer.defaultScopes[${index}]`, message: `"${scope}" is not in issuer.scopes` });
    }
  });
  for (const scope of Object.keys(config.issuer.scopeDescriptions)) {
    if (!config.issuer.scopes.includes(scope)) problems.push({ path: `issuer.scopeDescriptions.${scope}`, message: `"${scope}" is not in issuer.scopes` });
  }
  if (config.issuer.enabled && config.issuer.issuerUrl === '' && config.server.port === 0) {
    problems.push({
      path: 'issuer.issuerUrl',
      message:
        'server.port is 0 (a free port picked at start), so the issuer URL cannot be derived from the listener: set issuer.issuerUrl to the URL clients reach tokengate at',
    });
  } else if (config.issuer.enabled && config.issuer.issuerUrl !== '') {
    try {
      new URL(config.issuer.issuerUrl);
    } catch {
      problems.push({ path: 'issuer.issuerUrl', message: 'expected an absolute URL such as https://auth.example.com' });
    }
  }
  if (config.issuer.users.source === 'http' && !/^https?:\/\//.test(config.issuer.users.url)) {
    problems.push({ path: 'issuer.users.url', message: 'users.source is http, so users.url must be an http(s) URL' });
  }
  return problems;
}

/** An IP address, or a name a URL takes as its host as written (no port, path or credentials): the issuer URL is derived from it. */
function isHost(host: string): boolean {
  if (isIP(host) !== 0) return true;
  const url = URL.parse(`http://${host}`);
  return url !== null && url.hostname === host.toLowerCase();
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

/** A failed union of literals also reports each member: keep the one readable message. */
function isShadowedUnionError(error: ValueError): boolean {
  return error.schema.const !== undefined && error.message.startsWith('Expected');
}

function describe(error: ValueError): string {
  const got = error.value === undefined ? 'nothing' : JSON.stringify(error.value);
  const schema = error.schema;
  if (error.message === 'Unexpected property') {
    return 'unknown key (a misspelling? see the configuration reference, docs/configuration.md)';
  }
  if (Array.isArray(schema.anyOf) && schema.anyOf.every((member: { const?: unknown }) => member.const !== undefined)) {
    return `expected one of ${schema.anyOf.map((member: { const: unknown }) => String(member.const)).join(', ')}, got ${got}`;
  }
  if (error.value === undefined) return 'required key is missing';
  if (schema.type === 'integer' && typeof error.value === 'number' && Number.isInteger(error.value)) {
    const { minimum, maximum } = schema as { minimum?: number; maximum?: number };
    const range = minimum !== undefined && maximum !== undefined ? `from ${minimum} to ${maximum}` : minimum !== undefined ? `>= ${minimum}` : `<= ${maximum}`;
    return `expected an integer ${range}, got ${got}`;
  }
  if (schema.type === 'integer') return `expected an integer, got ${got}`;
  if (schema.type === 'boolean') return `expected true or false, got ${got}`;
  if (schema.type === 'array' && Array.isArray(error.value)) return `${error.message.toLowerCase()}, got ${got}`;
  if (schema.type === 'array') return `expected a list, got ${got}`;
  if (schema.type === 'object') return `expected a mapping, got ${got}`;
  if (schema.type === 'string' && typeof error.value === 'string') return `${error.message.toLowerCase()}, got ${got}`;
  if (schema.type === 'string') return `expected a string, got ${got}`;
  return `${error.message.toLowerCase()}, got ${got}`;
}

function pointerSegments(pointer: string): Array<string | number> {
  return pointer
    .split('/')
    .slice(1)
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((segment) => (/^\d+$/.test(segment) ? Number(segment) : segment));
}

function parseKeyPath(path: string): Array<string | number> {
  return path
    .split(/[.[\]]+/)
    .filter(Boolean)
    .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
}

function isAtOrBelow(path: string, ancestor: string): boolean {
  return path === ancestor || path.startsWith(`${ancestor}.`) || path.startsWith(`${ancestor}[`);
}

function keyPath(segments: ReadonlyArray<string | number>): string {
  return segments.reduce<string>((path, segment) => (typeof segment === 'number' ? `${path}[${segment}]` : path === '' ? segment : `${path}.${segment}`), '');
}

/** Line of the deepest node of `segments` that the YAML document actually has. */
function lineOf(document: Document, lineCounter: LineCounter, segments: ReadonlyArray<string | number>): number | undefined {
  for (let length = segments.length; length >= 0; length -= 1) {
    const node = length === 0 ? document.contents : document.getIn(segments.slice(0, length), true);
    if (isNode(node) && node.range) return lineCounter.linePos(node.range[0]).line;
  }
  return undefined;
}

function deepFreeze<T>(value: T): Readonly<T> {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}
