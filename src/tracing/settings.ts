import type { ConfigCheck, ConfigProblem, Environment } from '../config/problem.js';
import { LONGEST_TIMER_MS, type TracingConfig } from '../config/schema.js';

/**
 * The `tracing` section with OpenTelemetry's standard environment variables applied over it: a
 * platform that injects OTEL_* into every container configures tokengate as it does any other
 * service, and the environment wins over the file. `tokengate check` and the start both read it
 * here, so a bad value is refused before anything runs, by the name it was given.
 */

export type Sampler = TracingConfig['sampler'];
export type Protocol = TracingConfig['protocol'];

export interface TracingSettings {
  readonly serviceName: string;
  readonly resourceAttributes: Readonly<Record<string, string>>;
  readonly sampler: Sampler;
  readonly samplerRatio: number;
  /** The full URL spans are posted to. */
  readonly url: string;
  readonly protocol: Protocol;
  readonly headers: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  readonly scheduledDelayMs: number;
}

const SAMPLERS: readonly Sampler[] = ['parentbased_traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'traceidratio', 'always_on', 'always_off'];
const PROTOCOLS: readonly Protocol[] = ['http/protobuf', 'http/json'];

/** The settings tracing runs with, null when it is off, or every problem of the section and the environment. */
export function tracingSettings(section: TracingConfig, env: Environment): { settings: TracingSettings | null; problems: ConfigProblem[] } {
  const problems: ConfigProblem[] = [];
  const fromEnv = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value === undefined || value === '' ? undefined : value;
  };
  const refuse = (name: string, message: string, path: string): void => {
    problems.push({ path, message: `${name} (environment) ${message}` });
  };

  const exporter = fromEnv('OTEL_TRACES_EXPORTER');
  if (exporter !== undefined && exporter !== 'otlp' && exporter !== 'none')
    refuse('OTEL_TRACES_EXPORTER', `must be otlp or none, got ${JSON.stringify(exporter)}`, 'tracing.enabled');
  const disabled = fromEnv('OTEL_SDK_DISABLED')?.toLowerCase() === 'true' || exporter === 'none';
  const enabled = !disabled && (section.enabled || exporter === 'otlp');

  const sampler = fromEnv('OTEL_TRACES_SAMPLER') ?? section.sampler;
  if (!SAMPLERS.includes(sampler as Sampler))
    refuse('OTEL_TRACES_SAMPLER', `must be one of ${SAMPLERS.join(', ')}, got ${JSON.stringify(sampler)}`, 'tracing.sampler');

  const samplerRatio = number('OTEL_TRACES_SAMPLER_ARG', fromEnv('OTEL_TRACES_SAMPLER_ARG'), section.samplerRatio, 'tracing.samplerRatio', 0, 1, false);

  const protocol = fromEnv('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? fromEnv('OTEL_EXPORTER_OTLP_PROTOCOL') ?? section.protocol;
  if (!PROTOCOLS.includes(protocol as Protocol)) {
    const name = fromEnv('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
    if (protocol === 'grpc') refuse(name, 'asks for grpc: tokengate exports OTLP over HTTP only (http/protobuf or http/json)', 'tracing.protocol');
    else refuse(name, `must be http/protobuf or http/json, got ${JSON.stringify(protocol)}`, 'tracing.protocol');
  }

  const url = exportUrl(section, fromEnv, problems);
  const timeoutMs = number(
    fromEnv('OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT' : 'OTEL_EXPORTER_OTLP_TIMEOUT',
    fromEnv('OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') ?? fromEnv('OTEL_EXPORTER_OTLP_TIMEOUT'),
    section.timeoutMs,
    'tracing.timeoutMs',
    1,
    LONGEST_TIMER_MS,
    true,
  );
  const maxQueueSize = number(
    'OTEL_BSP_MAX_QUEUE_SIZE',
    fromEnv('OTEL_BSP_MAX_QUEUE_SIZE'),
    section.maxQueueSize,
    'tracing.maxQueueSize',
    1,
    Number.MAX_SAFE_INTEGER,
    true,
  );
  const maxExportBatchSize = number(
    'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    fromEnv('OTEL_BSP_MAX_EXPORT_BATCH_SIZE'),
    section.maxExportBatchSize,
    'tracing.maxExportBatchSize',
    1,
    Number.MAX_SAFE_INTEGER,
    true,
  );
  if (maxExportBatchSize > maxQueueSize) {
    problems.push({ path: 'tracing.maxExportBatchSize', message: `must not exceed tracing.maxQueueSize (${maxQueueSize}), got ${maxExportBatchSize}` });
  }
  const scheduledDelayMs = number(
    'OTEL_BSP_SCHEDULE_DELAY',
    fromEnv('OTEL_BSP_SCHEDULE_DELAY'),
    section.scheduledDelayMs,
    'tracing.scheduledDelayMs',
    1,
    Number.MAX_SAFE_INTEGER,
    true,
  );

  const resourceAttributes = {
    ...section.resourceAttributes,
    ...keyValues('OTEL_RESOURCE_ATTRIBUTES', fromEnv('OTEL_RESOURCE_ATTRIBUTES'), 'tracing.resourceAttributes'),
  };
  const serviceName = fromEnv('OTEL_SERVICE_NAME') ?? resourceAttributes['service.name'] ?? section.serviceName;
  const headers = {
    ...section.headers,
    ...keyValues('OTEL_EXPORTER_OTLP_HEADERS', fromEnv('OTEL_EXPORTER_OTLP_HEADERS'), 'tracing.headers'),
    ...keyValues('OTEL_EXPORTER_OTLP_TRACES_HEADERS', fromEnv('OTEL_EXPORTER_OTLP_TRACES_HEADERS'), 'tracing.headers'),
  };

  if (problems.length > 0 || !enabled) return { settings: null, problems };
  return {
    settings: {
      serviceName,
      resourceAttributes,
      sampler: sampler as Sampler,
      samplerRatio,
      url,
      protocol: protocol as Protocol,
      headers,
      timeoutMs,
      maxQueueSize,
      maxExportBatchSize,
      scheduledDelayMs,
    },
    problems,
  };

  function number(name: string, text: string | undefined, fallback: number, path: string, minimum: number, maximum: number, integer: boolean): number {
    if (text === undefined) return fallback;
    const value = Number(text);
    if (!Number.isFinite(value) || value < minimum || value > maximum || (integer && !Number.isInteger(value))) {
      const range = maximum === Number.MAX_SAFE_INTEGER ? `at least ${minimum}` : `from ${minimum} to ${maximum}`;
      refuse(name, `must be ${integer ? 'an integer' : 'a number'} ${range}, got ${JSON.stringify(text)}`, path);
      return fallback;
    }
    return value;
  }

  /** `key1=value1,key2=value2`, values percent-encoded (the W3C Baggage form the OTel variables use). A value is never quoted back: headers carry API keys. */
  function keyValues(name: string, text: string | undefined, path: string): Record<string, string> {
    const pairs: Record<string, string> = {};
    if (text === undefined) return pairs;
    for (const [index, entry] of text.split(',').entries()) {
      const equals = entry.indexOf('=');
      const key = equals === -1 ? '' : entry.slice(0, equals).trim();
      if (key === '') {
        refuse(name, `entry ${index + 1} is not key=value`, path);
        continue;
      }
      try {
        pairs[decodeURIComponent(key)] = decodeURIComponent(entry.slice(equals + 1).trim());
      } catch {
        refuse(name, `entry ${index + 1} (${JSON.stringify(key)}) is not valid percent-encoding`, path);
      }
    }
    return pairs;
  }
}

/** The traces URL: the signal's own endpoint as given, else the base endpoint with `/v1/traces`. */
function exportUrl(section: TracingConfig, fromEnv: (name: string) => string | undefined, problems: ConfigProblem[]): string {
  const own = fromEnv('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const base = fromEnv('OTEL_EXPORTER_OTLP_ENDPOINT');
  const [name, path, url] =
    own !== undefined
      ? ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (environment)', 'tracing.tracesEndpoint', own]
      : section.tracesEndpoint !== '' && base === undefined
        ? ['tracing.tracesEndpoint', 'tracing.tracesEndpoint', section.tracesEndpoint]
        : base !== undefined
          ? ['OTEL_EXPORTER_OTLP_ENDPOINT (environment)', 'tracing.endpoint', joinTracesPath(base)]
          : ['tracing.endpoint', 'tracing.endpoint', joinTracesPath(section.endpoint)];
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    problems.push({ path, message: `${name} must be an http:// or https:// URL, got ${JSON.stringify(withoutCredentials(url))}` });
    return url;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    problems.push({ path, message: `${name} must be an http:// or https:// URL, got ${JSON.stringify(withoutCredentials(url))}` });
  }
  return url;
}

function joinTracesPath(base: string): string {
  return base.endsWith('/') ? `${base}v1/traces` : `${base}/v1/traces`;
}

/** A URL as a message may quote it: its user and password (a collector's credentials) left out. */
function withoutCredentials(url: string): string {
  return url.replace(/\/\/[^/@]*@/, '//***@');
}

/** The `tracing` section and the OTEL_* environment, checked when the config loads (`tokengate check` names each problem). */
export const checkTracing: ConfigCheck = (config, env) => tracingSettings(config.tracing, env).problems;
