import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggerOptions } from '../src/observability/logger.js';
import { startUpstream, type Upstream } from './support/gateway.js';
import { freePort } from './support/ports.js';
import { startTokengate, type RunningTokengate } from './support/instance.js';

/** A tokengate logging at `level` into `lines`, with a user route to a live upstream and one to a dead port. */
async function loggingGateway(level: string, upstream: Upstream, lines: string[]): Promise<RunningTokengate> {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const deadPort = await freePort();
  return startTokengate(`gateway-logs-${level}`, {
    logger: pino(loggerOptions(level), sink),
    config: {
      routes: [
        { path: '/api/public/me', upstream: upstream.url },
        { path: '/api/public/tickets', upstream: `http://127.0.0.1:${deadPort}` },
      ],
    },
  });
}

const refusals = (lines: string[]) =>
  lines.map((line) => JSON.parse(line) as { level: number; reason?: string; msg: string }).filter((entry) => entry.reason !== undefined);

describe('gateway refusal logs', () => {
  let upstream: Upstream;
  beforeAll(async () => {
    upstream = await startUpstream();
  });
  afterAll(async () => {
    await upstream.close();
  });

  it('keep a flood of forged tokens out of an info-level log, but log store and upstream failures at warn', async () => {
    const lines: string[] = [];
    const gateway = await loggingGateway('info', upstream, lines);
    try {
      for (let index = 0; index < 50; index += 1) {
        const forged = randomBytes(32).toString('base64url');
        expect((await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${forged}` } })).status).toBe(401);
      }
      expect((await fetch(`${gateway.baseUrl}/api/public/me`)).status).toBe(401);
      const token = await gateway.issue();
      expect((await fetch(`${gateway.baseUrl}/api/public/tickets`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(502);
      expect(refusals(lines)).toEqual([expect.objectContaining({ level: 40, reason: 'upstream_unreachable', msg: 'upstream did not answer' })]);
      // Every refusal is still counted by reason.
      const metrics = await gateway.tokengate.context.metrics.gatewayRequests.get();
      const forged = metrics.values.find((value) => value.labels.reason === 'forged_token');
      expect(forged?.value).toBe(50);
    } finally {
      await gateway.close();
    }
  });

  it('log each client-caused refusal with its reason at debug', async () => {
    const lines: string[] = [];
    const gateway = await loggingGateway('debug', upstream, lines);
    try {
      await fetch(`${gateway.baseUrl}/api/public/me`, { headers: { authorization: `Bearer ${randomBytes(32).toString('base64url')}` } });
      await fetch(`${gateway.baseUrl}/api/public/me`);
      expect(refusals(lines)).toEqual([
        expect.objectContaining({ level: 20, reason: 'forged_token', msg: 'gateway refused the request' }),
        expect.objectContaining({ level: 20, reason: 'token_missing', msg: 'gateway refused the request' }),
      ]);
    } finally {
      await gateway.close();
    }
  });
});
