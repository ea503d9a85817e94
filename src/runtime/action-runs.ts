// The order in which the adapter carries a pass's actions out. The planner's order matters
// where actions touch one node (its gate goes before its uninstall starts, I1) or follow one
// another (finished Jobs are removed after the records that hold their results); it does not
// among the node writes, or the Job creations, of different nodes, which a rollout makes by
// the hundred in one pass. Those go a few at a time instead of one after the other: on a busy
// API server each takes a round trip of its own, and a pass that waits for them one by one
// holds the next batch of the rollout back.

/** The kinds whose consecutive actions on distinct nodes are independent of one another. */
const PARALLEL_KINDS = new Set(['createJob', 'writeNode']);

/** An action's node, where its kind may run beside others of its kind. */
function nodeOf(action: { kind: string }): string | undefined {
  if (!PARALLEL_KINDS.has(action.kind)) return undefined;
  const a = action as { kind: string; node?: string; job?: { node: string } };
  return a.kind === 'createJob' ? a.job?.node : a.node;
}

/**
 * The actions in runs, in their order: a run is one action, or consecutive actions of one of
 * the independent kinds on distinct nodes, which may be carried out at once.
 */
export function independentRuns<A extends { kind: string }>(actions: readonly A[]): A[][] {
  const runs: A[][] = [];
  let run: A[] = [];
  let nodes = new Set<string>();
  for (const action of actions) {
    const node = nodeOf(action);
    const joins = node !== undefined && run.length > 0 && run[0].kind === action.kind && !nodes.has(node);
    if (!joins) {
      if (run.length > 0) runs.push(run);
      run = [];
      nodes = new Set();
    }
    run.push(action);
    if (node !== undefined) nodes.add(node);
    // An action of another kind stands alone.
    if (node === undefined) {
      runs.push(run);
      run = [];
    }
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

/**
 * Calls `fn` for each item, at most `limit` at once, and waits for all of them; then throws
 * the first error, if any (the others were still carried out: they are independent).
 */
export async function eachAtMost<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const errors: unknown[] = [];
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++];
      try {
        await fn(item);
      } catch (e) {
        errors.push(e);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (errors.length > 0) throw errors[0];
}
