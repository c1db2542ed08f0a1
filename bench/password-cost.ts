import { hashPassword, SCRYPT_PARAMETERS, verifyPassword, type ScryptParameters } from '../src/issuer/passwords.js';

/**
 * `node --import tsx bench/password-cost.ts` (docs/issuer.md): the CPU one sign-in's password
 * check costs, at the old setting (N=2^15) and the current one (N=2^17), alternated in rounds
 * so that both see the same machine load; the medians of CPU time (user + system) and of wall
 * time are printed, and the ratio. One verification at a time: the cost of one sign-in.
 */

const ROUNDS = 7;
const SETTINGS: Array<[string, ScryptParameters]> = [
  ['N=2^15, r=8, p=1', { N: 2 ** 15, r: 8, p: 1 }],
  ['N=2^17, r=8, p=1', SCRYPT_PARAMETERS],
];

async function measure(encoded: string): Promise<{ cpuMs: number; wallMs: number }> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  if (!(await verifyPassword('correct horse battery', encoded))) throw new Error('the password did not verify');
  const used = process.cpuUsage(cpu);
  return { cpuMs: (used.user + used.system) / 1000, wallMs: performance.now() - start };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const hashes = await Promise.all(SETTINGS.map(([, parameters]) => hashPassword('correct horse battery', parameters)));
const samples = SETTINGS.map(() => ({ cpu: [] as number[], wall: [] as number[] }));
for (let round = 0; round < ROUNDS; round += 1) {
  for (const [index, encoded] of hashes.entries()) {
    const { cpuMs, wallMs } = await measure(encoded);
    samples[index]!.cpu.push(cpuMs);
    samples[index]!.wall.push(wallMs);
  }
}
const rows = SETTINGS.map(([label], index) => ({ label, cpu: median(samples[index]!.cpu), wall: median(samples[index]!.wall) }));
for (const row of rows) console.log(`${row.label}: ${row.cpu.toFixed(0)} ms CPU, ${row.wall.toFixed(0)} ms wall per verification (median of ${ROUNDS})`);
console.log(`ratio: ${(rows[1]!.cpu / rows[0]!.cpu).toFixed(2)}x CPU`);
console.log(`rss after: ${(process.memoryUsage().rss / 1024 / 1024).toFixed(0)} MiB`);
