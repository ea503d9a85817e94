import * as fs from 'fs';
import * as path from 'path';

// What images/Dockerfile says each image runs: the test images (product-images.ts) and the
// controller benchmark run the same node flags, environment and program, so that what they
// measure is what ships.

const THIS_TREE = path.join(__dirname, '..', '..', 'images', 'Dockerfile');

/** Each stage's name (`AS`), the stage or image it is built FROM, and its instructions' lines. */
function stages(text: string): Map<string, { from: string; lines: string[] }> {
  const found = new Map<string, { from: string; lines: string[] }>();
  let current: string[] = [];
  for (const line of text.split('\n')) {
    const from = /^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      current = [];
      if (from[2]) found.set(from[2], { from: from[1], lines: current });
    } else {
      current.push(line);
    }
  }
  return found;
}

/**
 * The exec-form ENTRYPOINT of a Dockerfile's stage `target` (the last one in it), or an error
 * naming the stage. `text` is the Dockerfile, images/Dockerfile of this tree by default.
 */
export function entrypointOf(target: string, text = fs.readFileSync(THIS_TREE, 'utf8')): string[] {
  let entrypoint: string[] | undefined;
  for (const line of stages(text).get(target)?.lines ?? []) {
    const ep = /^ENTRYPOINT\s+(\[.*\])\s*$/.exec(line);
    if (ep) entrypoint = JSON.parse(ep[1]);
  }
  if (!entrypoint) throw new Error(`images/Dockerfile has no exec-form ENTRYPOINT in stage ${target}`);
  return entrypoint;
}

/**
 * The variables the ENV lines of stage `target` and of the stages it is built from set (the
 * base image's own are not known here). Only the `ENV KEY=value ...` form, without quotes or
 * continued lines: anything else is an error naming the line, not a variable silently missed.
 */
export function environmentOf(target: string, text = fs.readFileSync(THIS_TREE, 'utf8')): Record<string, string> {
  const all = stages(text);
  if (!all.has(target)) throw new Error(`images/Dockerfile has no stage ${target}`);
  const chain: string[][] = [];
  for (let stage = all.get(target); stage; stage = all.get(stage.from)) chain.unshift(stage.lines);
  const env: Record<string, string> = {};
  for (const line of chain.flat()) {
    const instruction = /^ENV\s+(.*)$/i.exec(line);
    if (!instruction) continue;
    for (const pair of instruction[1].trim().split(/\s+/)) {
      const kv = /^([A-Za-z_][A-Za-z0-9_]*)=([^"'\\]*)$/.exec(pair);
      if (!kv) throw new Error(`images/Dockerfile: cannot read "${line.trim()}" (only ENV KEY=value ... without quotes or continued lines)`);
      env[kv[1]] = kv[2];
    }
  }
  return env;
}

/** The node flags of a stage's `node ... <program>.js` ENTRYPOINT (those between node and the program). */
export function nodeFlagsOf(target: string, text?: string): string[] {
  const [node, ...rest] = entrypointOf(target, text);
  if (node !== 'node') throw new Error(`the ENTRYPOINT of stage ${target} does not start node: ${node}`);
  return rest.slice(0, -1);
}
