// A node's change set: the operations one fleet pass admits for one node, of every Shim. They
// are handed over together (one Job per operation, each naming the set and its size; in
// install mode NodeAgent one write of the node's requests), and the node's installers restart
// the container runtime once for all of them, whenever each starts: by the count the set
// declares, not by who arrives within a window.
import * as crypto from 'crypto';
import { Action, JobRequest } from './types';

/** One Shim's actions of a pass, as the planner made them. */
export interface ShimActions {
  readonly actions: Action[];
}

/**
 * The same actions, every admission naming its node's change set: `<id>/<size>`, the id a
 * digest of the set's operation names (the same admissions give the same id, after a leader
 * change too), the size how many operations the node got in this pass.
 */
export function withChangeSets<T extends ShimActions>(plans: readonly T[]): T[] {
  const byNode = new Map<string, string[]>();
  for (const p of plans) {
    for (const a of p.actions) if (a.kind === 'createJob') byNode.set(a.job.node, [...byNode.get(a.job.node) ?? [], a.job.name]);
  }
  const sets = new Map([...byNode].map(([node, names]) => [node, { id: setId(names), size: names.length }]));
  const named = (job: JobRequest): JobRequest => ({ ...job, changeSet: sets.get(job.node)! });
  return plans.map(p => ({ ...p, actions: p.actions.map(a => (a.kind === 'createJob' ? { ...a, job: named(a.job) } : a)) }));
}

function setId(names: readonly string[]): string {
  return crypto.createHash('sha256').update([...names].sort().join('\n')).digest('hex').slice(0, 12);
}
