/**
 * Summary of a V8 .cpuprofile (`node --cpu-prof`): self time by function and by source (our
 * dist/ files, each npm package, Node internals), and inclusive time by function (a function
 * counts once per sample however deep it recurses).
 */

export interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  totalMs: number;
  selfByFunction: Map<string, number>;
  selfBySource: Map<string, number>;
  inclusiveByFunction: Map<string, number>;
}

/** `name (file:line)`, with the path shortened to what identifies it. */
export function functionKey(frame: CallFrame): string {
  const name = frame.functionName === '' ? '(anonymous)' : frame.functionName;
  return frame.url === '' ? name : `${name} (${shortPath(frame.url)}:${frame.lineNumber + 1})`;
}

/** The package or part of the tree a frame belongs to: `fastify`, `dist/gateway`, `node:internal`, `(garbage collector)`. */
export function sourceKey(frame: CallFrame): string {
  const { url } = frame;
  if (url === '') return frame.functionName.startsWith('(') ? frame.functionName : '(native)';
  if (url.startsWith('node:')) return 'node:internal';
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (inPackage !== null) return inPackage[1]!;
  const inTree = /\/(dist|src|bench)\/(?:([^/]+)\/)?[^/]+$/.exec(url);
  if (inTree !== null) return inTree[2] === undefined ? inTree[1]! : `${inTree[1]}/${inTree[2]}`;
  return shortPath(url);
}

function shortPath(url: string): string {
  const path = url.replace(/^file:\/\//, '');
  const inPackage = /node_modules\/(.+)$/.exec(path);
  if (inPackage !== null) return inPackage[1]!;
  // The last dist/, src/ or bench/ in the path: the checkout itself may sit in a directory of that name.
  const inTree = /.*\/((?:dist|src|bench)\/.+)$/.exec(path);
  return inTree !== null ? inTree[1]! : path;
}

/** Summarizes the samples taken after the first `skipMs` of the profile (start-up, module loading). */
export function summarize(profile: CpuProfile, skipMs = 0): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

  const add = (map: Map<string, number>, key: string, ms: number) => map.set(key, (map.get(key) ?? 0) + ms);
  const summary: ProfileSummary = { totalMs: 0, selfByFunction: new Map(), selfBySource: new Map(), inclusiveByFunction: new Map() };
  let elapsedMs = 0;
  profile.samples.forEach((nodeId, index) => {
    const ms = (profile.timeDeltas[index] ?? 0) / 1000;
    elapsedMs += ms;
    const node = byId.get(nodeId);
    if (node === undefined || elapsedMs <= skipMs) return;
    summary.totalMs += ms;
    add(summary.selfByFunction, functionKey(node.callFrame), ms);
    add(summary.selfBySource, sourceKey(node.callFrame), ms);
    const onStack = new Set<string>();
    for (let id: number | undefined = nodeId; id !== undefined; id = parent.get(id)) {
      const frame = byId.get(id)!.callFrame;
      if (frame.functionName === '(root)') continue;
      onStack.add(functionKey(frame));
    }
    for (const key of onStack) add(summary.inclusiveByFunction, key, ms);
  });
  return summary;
}
