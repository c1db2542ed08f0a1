import type { ConfigProblem } from '../config/problem.js';
import type { Config } from '../config/schema.js';

/** A policy name: what RateLimit-Policy quotes, a metric label and a Redis key part. */
const POLICY_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
/** Not a policy name: `tokengate apps update --rate-limit default` gives an application its routes' policies back. */
export const ROUTE_POLICY = 'default';

/** Load-time checks of `rateLimits` and the routes' `rateLimit`: names that are well formed and exist. */
export function checkRateLimits(config: Pick<Config, 'rateLimits' | 'routes'>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const name of Object.keys(config.rateLimits)) {
    if (!POLICY_NAME.test(name)) {
      problems.push({ path: `rateLimits.${name}`, message: `"${name}" must be 1 to 64 letters, digits, "-" and "_", starting with a letter or digit` });
    } else if (name === ROUTE_POLICY) {
      problems.push({ path: `rateLimits.${name}`, message: `"${ROUTE_POLICY}" is reserved: it gives an application its routes' own policies back` });
    }
  }
  config.routes.forEach((route, index) => {
    if (route.rateLimit !== undefined && !Object.hasOwn(config.rateLimits, route.rateLimit)) {
      const known = Object.keys(config.rateLimits);
      problems.push({
        path: `routes[${index}].rateLimit`,
        message: `"${route.rateLimit}" is not a policy of rateLimits (${known.length === 0 ? 'none is defined' : `defined: ${known.join(', ')}`})`,
      });
    }
  });
  return problems;
}
