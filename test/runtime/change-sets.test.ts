import { withChangeSets } from '../../src/runtime/change-sets';
import { Action, JobRequest } from '../../src/runtime/types';

// A fleet pass hands each node's admissions of every Shim over as one change set: every
// admission of a node names the same set, whose size is how many the node got.

const job = (name: string, node: string): Action => ({ kind: 'createJob', job: { name, node, operation: 'install', handler: name, revision: 'r', attempt: 1, batch: 'b' } });
const setsOf = (plans: { actions: Action[] }[]) => plans.flatMap(p => p.actions.filter(a => a.kind === 'createJob').map(a => (a as { job: JobRequest }).job))
  .map(j => `${j.node} ${j.name} ${j.changeSet?.size}`);

test('six Shims, one node: one change set of six', () => {
  const plans = withChangeSets(['a', 'b', 'c', 'd', 'e', 'f'].map(s => ({ actions: [job(s, 'n1')] })));
  const jobs = plans.flatMap(p => p.actions) as { job: JobRequest }[];
  expect(new Set(jobs.map(j => j.job.changeSet?.id)).size).toBe(1);
  expect(jobs.every(j => j.job.changeSet?.size === 6)).toBe(true);
});

test('two nodes: a set each, sized by what each node got', () => {
  const plans = withChangeSets([{ actions: [job('a1', 'n1'), job('a2', 'n2')] }, { actions: [job('b1', 'n1'), { kind: 'addFinalizer' }] }]);
  expect(setsOf(plans)).toEqual(['n1 a1 2', 'n2 a2 1', 'n1 b1 2']);
});

test('the same admissions give the same id, in any order of Shims; other admissions another', () => {
  const id = (plans: { actions: Action[] }[]) => (withChangeSets(plans)[0].actions[0] as { job: JobRequest }).job.changeSet!.id;
  expect(id([{ actions: [job('a', 'n1')] }, { actions: [job('b', 'n1')] }])).toBe(id([{ actions: [job('b', 'n1')] }, { actions: [job('a', 'n1')] }]));
  expect(id([{ actions: [job('a', 'n1')] }])).not.toBe(id([{ actions: [job('a', 'n1')] }, { actions: [job('c', 'n1')] }]));
});

test('actions other than admissions are left as they are', () => {
  const actions: Action[] = [{ kind: 'deleteJob', name: 'x' }, { kind: 'addFinalizer' }];
  expect(withChangeSets([{ actions }])[0].actions).toEqual(actions);
});
