import type { ConfigProblem } from '../config/problem.js';
import type { Config, SharedSignalsConfig } from '../config/schema.js';
import { normalizePath } from '../http/path.js';
import { isHttpsUrl } from '../identity-providers/config-checks.js';

/** The shortest `pushAuthorization` taken: it is the transmitter's only credential here. */
const SHORTEST_PUSH_AUTHORIZATION = 16;

/**
 * Load-time checks of each `identityProviders[].sharedSignals`: unique names; https for the
 * transmitter's metadata and a poll endpoint (what tokengate fetches over the network, like the
 * key set); a push receiver's credential; what each way of getting a stream needs (a stream
 * tokengate creates needs `transmitterAuthorization`, a poll stream the operator made needs its
 * `pollUrl`); an audience to check events against; and, while a provider pushes, no gateway
 * route over the push endpoint.
 */
export function checkSharedSignals(config: Pick<Config, 'identityProviders' | 'issuer' | 'server' | 'routes'>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const names = new Map<string, number>();
  config.identityProviders.forEach((provider, index) => {
    const signals = provider.sharedSignals;
    if (signals === undefined) return;
    const at = (key: string) => `identityProviders[${index}].sharedSignals.${key}`;
    const previous = names.get(signals.name.toLowerCase());
    if (previous !== undefined) problems.push({ path: at('name'), message: `"${signals.name}" is the name of identityProviders[${previous}]'s receiver too` });
    else names.set(signals.name.toLowerCase(), index);
    problems.push(...checkReceiver(signals, config, at));
  });
  if (config.identityProviders.some((provider) => provider.sharedSignals?.delivery === 'push')) problems.push(...routesOverPushEndpoint(config.routes));
  return problems;
}

function checkReceiver(signals: SharedSignalsConfig, config: Pick<Config, 'issuer' | 'server'>, at: (key: string) => string): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (!isHttpsUrl(signals.configurationUrl))
    problems.push({ path: at('configurationUrl'), message: `expected an https URL, got "${signals.configurationUrl}"` });
  if (signals.pollUrl !== '' && !isHttpsUrl(signals.pollUrl))
    problems.push({ path: at('pollUrl'), message: `expected an https URL, got "${signals.pollUrl}"` });
  if (signals.pushEndpointUrl !== '' && !isAbsoluteHttpUrl(signals.pushEndpointUrl))
    problems.push({ path: at('pushEndpointUrl'), message: `expected an absolute http(s) URL, got "${signals.pushEndpointUrl}"` });
  if (signals.audience === '' && config.issuer.issuerUrl === '' && config.server.port === 0)
    problems.push({ path: at('audience'), message: 'required while issuer.issuerUrl cannot be derived (server.port is 0): the aud the events must name' });
  const manages = signals.transmitterAuthorization !== '';
  if (signals.streamId === '' && !manages)
    problems.push({
      path: at('streamId'),
      message: 'give the id of the stream you made at the transmitter, or transmitterAuthorization for tokengate to create one',
    });
  if (signals.delivery === 'push') {
    if (signals.pushAuthorization.length < SHORTEST_PUSH_AUTHORIZATION)
      problems.push({
        path: at('pushAuthorization'),
        message: `required for push delivery, ${SHORTEST_PUSH_AUTHORIZATION} characters or more: the Authorization header the transmitter sends (from the environment: \${VAR})`,
      });
    if (signals.pollUrl !== '') problems.push({ path: at('pollUrl'), message: 'only for delivery: poll' });
  } else {
    if (!manages && signals.pollUrl === '')
      problems.push({
        path: at('pollUrl'),
        message: 'required for a poll stream the operator made (without transmitterAuthorization tokengate cannot read the stream)',
      });
    if (signals.pushAuthorization !== '') problems.push({ path: at('pushAuthorization'), message: 'only for delivery: push' });
  }
  return problems;
}

/** A route whose prefix covers the push endpoint, or lies under it, would take or shadow its requests. */
function routesOverPushEndpoint(routes: Config['routes']): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  routes.forEach((route, index) => {
    const path = normalizePath(route.path);
    if (typeof path !== 'string') return;
    const prefix = path.length > 1 ? path.replace(/\/+$/, '') : path;
    if (prefix === '/' || '/ssf/events'.startsWith(`${prefix}/`) || prefix === '/ssf/events' || prefix.startsWith('/ssf/events/'))
      problems.push({
        path: `routes[${index}].path`,
        message: `"${route.path}" overlaps the shared signals push endpoint /ssf/events/<name> on the same listener`,
      });
  });
  return problems;
}

function isAbsoluteHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return (url.protocol === 'https:' || url.protocol === 'http:') && url.username === '' && url.password === '' && url.hash === '';
  } catch {
    return false;
  }
}
