import { eachAtMost, independentRuns } from '../../src/runtime/action-runs';

// The order in which the adapter carries out a pass's actions: runs of independent writes at
// once, everything else one after the other, in the planner's order.

const write = (node: string) => ({ kind: 'writeNode', node });
const create = (node: string) => ({ kind: 'createJob', job: { node } });
const other = (kind: string) => ({ kind });
const show = (runs: { kind: string; node?: string; job?: { node: string } }[][]) =>
  runs.map(run => run.map(a => `${a.kind}${a.node ?? a.job?.node ? ` ${a.node ?? a.job?.node}` : ''}`).join(' + '));

test.each<[string, { kind: string }[], string[]]>([
  ['a rollout\'s pass: node writes together, then the cleanup and the Event alone, then the new Jobs together',
    [write('a'), write('b'), other('deleteSucceededJobs'), other('event'), create('c'), create('d')],
    ['writeNode a + writeNode b', 'deleteSucceededJobs', 'event', 'createJob c + createJob d']],
  ['a node\'s gate goes before its uninstall starts (I1): different runs, in order',
    [write('a'), create('a')], ['writeNode a', 'createJob a']],
  ['two actions of one kind on one node stay in order', [write('a'), write('a'), write('b')], ['writeNode a', 'writeNode a + writeNode b']],
  ['a Job removed before the Job that supersedes it (another kind between creations)',
    [other('deleteJob'), create('a'), other('deleteJob'), create('b')], ['deleteJob', 'createJob a', 'deleteJob', 'createJob b']],
  ['kinds that are never run at once', [other('addFinalizer'), other('applyRuntimeClass'), other('applyRuntimeClass')], ['addFinalizer', 'applyRuntimeClass', 'applyRuntimeClass']],
  ['nothing', [], []],
])('%s', (_what, actions, expected) => {
  const runs = independentRuns(actions);
  expect(show(runs as any)).toEqual(expected);
  // Every action once, in the planner's order.
  expect(runs.flat()).toEqual(actions);
});

test('eachAtMost: at most the limit at once, every item done, and the first error after all have settled', async () => {
  let running = 0;
  let most = 0;
  const done: number[] = [];
  const items = Array.from({ length: 20 }, (_, i) => i);
  const work = eachAtMost(items, 8, async i => {
    running++;
    most = Math.max(most, running);
    await new Promise(r => setTimeout(r, 5 + (i % 3)));
    running--;
    done.push(i);
    if (i === 3 || i === 11) throw new Error(`item ${i} failed`);
  });
  await expect(work).rejects.toThrow('item 3 failed');
  expect(most).toBe(8);
  expect(done.sort((a, b) => a - b)).toEqual(items);
});
