import { existsSync } from 'node:fs';
import type { ConfigProblem } from './problem.js';
import type { StoreConfig } from './schema.js';

const HOST_PORT = /^(\[[0-9A-Fa-f:.]+\]|[^\s:[\]/]+):([0-9]{1,5})$/;

function isHostPort(value: string): boolean {
  const match = HOST_PORT.exec(value);
  return match !== null && Number(match[2]) >= 1 && Number(match[2]) <= 65_535;
}

/**
 * The store's rules that involve more than one key: one topology (`url`, `sentinel` or
 * `cluster`), each complete, with addresses that parse. `urlGiven` says whether the file set
 * `store.url` itself (it has a default, so the loaded value cannot tell).
 */
export function checkStore(store: StoreConfig, urlGiven: boolean): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  if (store.driver !== 'redis') return problems;
  const sentinel = store.sentinel.sentinels.length > 0;
  const cluster = store.cluster.nodes.length > 0;
  const chosen = [urlGiven && 'store.url', sentinel && 'store.sentinel', cluster && 'store.cluster'].filter((key): key is string => key !== false);
  if (chosen.length > 1) {
    problems.push({
      path: chosen[1]!,
      message: `${chosen.join(' and ')} are both set: choose one topology (store.url for one server, store.sentinel for Redis Sentinel, store.cluster for Redis Cluster)`,
    });
  }
  if (!sentinel && !cluster && !/^rediss?:\/\//.test(store.url)) problems.push({ path: 'store.url', message: 'expected a redis:// or rediss:// URL' });

  store.sentinel.sentinels.forEach((address, index) => {
    if (!isHostPort(address)) problems.push({ path: `store.sentinel.sentinels[${index}]`, message: `expected host:port, got "${address}"` });
  });
  if (sentinel && store.sentinel.masterName === '') {
    problems.push({ path: 'store.sentinel.masterName', message: 'required with store.sentinel.sentinels: the name the sentinels monitor the master under' });
  }
  if (!sentinel && (store.sentinel.masterName !== '' || store.sentinel.password !== '')) {
    problems.push({ path: 'store.sentinel.sentinels', message: 'store.sentinel is set without its sentinels: list them as host:port' });
  }

  store.cluster.nodes.forEach((address, index) => {
    if (!isHostPort(address)) problems.push({ path: `store.cluster.nodes[${index}]`, message: `expected host:port, got "${address}"` });
  });
  for (const [announced, reached] of Object.entries(store.cluster.natMap)) {
    if (!isHostPort(announced) || !isHostPort(reached)) {
      problems.push({ path: `store.cluster.natMap.${announced}`, message: `expected "host:port": host:port, got "${announced}": "${reached}"` });
    }
  }
  if (!cluster && (Object.keys(store.cluster.natMap).length > 0 || store.cluster.scaleReads !== 'master')) {
    problems.push({ path: 'store.cluster.nodes', message: 'store.cluster is set without its nodes: list some as host:port' });
  }
  if (cluster && /[{}]/.test(store.keyPrefix)) {
    problems.push({
      path: 'store.keyPrefix',
      message: 'must not contain { or } with store.cluster: Redis Cluster would read them as a hash tag and put every key on one node',
    });
  }

  if (!sentinel && !cluster) {
    for (const key of ['username', 'password'] as const) {
      if (store[key] !== '')
        problems.push({
          path: `store.${key}`,
          message: `used with store.sentinel or store.cluster only: with store.url, put it in the URL (redis://user:password@host:6379)`,
        });
    }
  }
  if (store.tls.caFile !== '' && !existsSync(store.tls.caFile)) problems.push({ path: 'store.tls.caFile', message: `no such file: ${store.tls.caFile}` });
  return problems;
}
