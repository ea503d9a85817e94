import * as fs from 'fs';
import * as path from 'path';

// What images/Dockerfile says each image runs: the test images (product-images.ts) and the
// controller benchmark run the same node flags and program, so that what they measure is what
// ships.

/**
 * The exec-form ENTRYPOINT of a Dockerfile's stage `target` (the last one in it), or an error
 * naming the stage. `text` is the Dockerfile, images/Dockerfile of this tree by default.
 */
export function entrypointOf(target: string, text = fs.readFileSync(path.join(__dirname, '..', '..', 'images', 'Dockerfile'), 'utf8')): string[] {
  let stage: string | undefined;
  let entrypoint: string[] | undefined;
  for (const line of text.split('\n')) {
    const from = /^FROM\s+\S+(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) stage = from[1];
    const ep = /^ENTRYPOINT\s+(\[.*\])\s*$/.exec(line);
    if (ep && stage === target) entrypoint = JSON.parse(ep[1]);
  }
  if (!entrypoint) throw new Error(`images/Dockerfile has no exec-form ENTRYPOINT in stage ${target}`);
  return entrypoint;
}

/** The node flags of a stage's `node ... <program>.js` ENTRYPOINT (those between node and the program). */
export function nodeFlagsOf(target: string, text?: string): string[] {
  const [node, ...rest] = entrypointOf(target, text);
  if (node !== 'node') throw new Error(`the ENTRYPOINT of stage ${target} does not start node: ${node}`);
  return rest.slice(0, -1);
}
