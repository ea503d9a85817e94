import { POLICY } from './planner-world';
import {
  CREATED_UNSEEN_MS, CreatedJob, judgeJob, judgeJobs, NO_WRITES, ObservedInstallerJob, ObservedRequest, POD_RESULT_WAIT_MS,
} from '../../src/runtime/job-judgement';
import { recordKeys } from '../../src/runtime/node-record';
import { FINALIZER, jobName, planPass, PassInput, revisionOf } from '../../src/runtime/planner';
import { Action, JobView, NodeView, ShimObject } from '../../src/runtime/types';

// Table tests of the planner's judgement of installer Jobs: the facts the adapter observed
// (a Job and its pods, a request in a node record, the controller's own writes the caches do
// not show yet) and the pass's `now` in, the Jobs as the planner reasons about them out.

const T0 = Date.parse('2026-11-25T00:00:00Z');
const at = (offsetMs: number) => new Date(T0 + offsetMs).toISOString();

/** A Job whose pod runs, created a minute before T0. */
const IDENTITY = { name: 'rcm-spin-i-1', shimUid: 'u1', node: 'n1', operation: 'install' as const, handler: 'spin', revision: 'r1', attempt: 1, batch: 'b1' };
const RUNNING: ObservedInstallerJob = { kind: 'job', ...IDENTITY, succeeded: false, createdAt: at(-60_000), pods: 1, podsEnded: 0, started: true };
/** Its Failed condition, set at T0. */
const FAILED = { failed: { reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit', at: at(0) } };
/** Its pod ended at T0 with this termination message. */
const ENDED = (message: string) => ({ terminated: { message, finishedAt: at(0) }, podsEnded: 1 });
const report = (r: object) => ENDED(JSON.stringify(r));

describe('an installer Job, judged at the pass\'s now', () => {
  test.each<[string, Partial<ObservedInstallerJob>, number, Partial<JobView>]>([
    ['no condition yet: running', {}, 1_000, { phase: 'running', started: true }],
    ['succeeded: done, at its completion', { succeeded: true, completedAt: at(0), ...report({ outcome: 'installed' }) }, 1_000,
      { phase: 'succeeded', finishedAt: at(0), result: { outcome: 'installed', reason: undefined, message: undefined } }],
    ['failed with the installer\'s result: failed, for the installer\'s reason', { ...FAILED, ...report({ outcome: 'failed', reason: 'ChecksumMismatch', message: 'sha256 differs' }) }, 1_000,
      { phase: 'failed', finishedAt: at(0), result: { outcome: 'failed', reason: 'ChecksumMismatch', message: 'sha256 differs' } }],
    ['failed, its pod still running in the cache: waits for the result within the wait', FAILED, POD_RESULT_WAIT_MS - 1, { phase: 'running' }],
    ['failed, no pod in the cache yet (BackoffLimitExceeded: there was one): waits too', { ...FAILED, pods: 0, started: false }, POD_RESULT_WAIT_MS - 1,
      { phase: 'running', started: false }],
    ['failed, the wait over without a result: failed, for the Job\'s own reason', FAILED, POD_RESULT_WAIT_MS,
      { phase: 'failed', finishedAt: at(0), result: { reason: 'InstallerFailed', message: 'BackoffLimitExceeded: Job has reached the specified backoff limit' } }],
    ['failed by its deadline before any pod: no result can come, judged at once',
      { failed: { reason: 'DeadlineExceeded', message: 'Job was active longer than specified deadline', at: at(0) }, pods: 0, started: false }, 1_000,
      { phase: 'failed', result: { reason: 'InstallerFailed', message: 'DeadlineExceeded: Job was active longer than specified deadline' } }],
    ['failed, its pod ended without running its container: judged at once, for the container\'s reason',
      { ...FAILED, podsEnded: 1, waiting: { reason: 'CreateContainerError', message: 'transport is closing' } }, 1_000,
      { phase: 'failed', result: { reason: 'InstallerFailed', message: 'CreateContainerError: transport is closing' } }],
    ['failed, the installer wrote no JSON: its last lines are the message', { ...FAILED, ...ENDED('fetching\npanic: boom\n') }, 1_000,
      { phase: 'failed', result: { reason: 'InstallerFailed', message: 'fetching panic: boom' } }],
    ['failed, yet the installer reported success (containerd lost the exit status): succeeded', { ...FAILED, ...report({ outcome: 'installed', message: 'handler spin installed' }) }, 1_000,
      { phase: 'succeeded', reportedSuccess: true, finishedAt: at(0) }],
    ['an install reported unchanged: succeeded too', { ...FAILED, ...report({ outcome: 'unchanged' }) }, 1_000, { phase: 'succeeded', reportedSuccess: true }],
    ['an uninstall reported uninstalled: succeeded', { ...FAILED, operation: 'uninstall', ...report({ outcome: 'uninstalled' }) }, 1_000,
      { phase: 'succeeded', reportedSuccess: true }],
    ['an uninstall that reports an install\'s outcome: failed', { ...FAILED, operation: 'uninstall', ...report({ outcome: 'installed' }) }, 1_000, { phase: 'failed' }],
  ])('%s', (_what, facts, nowOffset, expected) => {
    // GIVEN what the caches show of the Job and its pods
    const observed = { ...RUNNING, ...facts };
    // WHEN the planner judges it at `now`
    const view = judgeJob(observed, T0 + nowOffset);
    // THEN it is running, succeeded or failed, with why
    expect(view).toMatchObject({ name: 'rcm-spin-i-1', node: 'n1', attempt: 1, batch: 'b1', createdAt: at(-60_000), ...expected });
    if (expected.reportedSuccess === undefined) expect(view.reportedSuccess).toBeUndefined();
  });
});

describe('a pass judges the facts it was given before, again, only where the clock matters', () => {
  test('GIVEN the same facts of a Job without a failure WHEN two passes judge them THEN the second gives the first one\'s view', () => {
    const facts: ObservedInstallerJob = { ...RUNNING };
    const [first] = judgeJobs([facts], NO_WRITES, T0).views;
    const [second] = judgeJobs([facts], NO_WRITES, T0 + 3_600_000).views;
    expect(second).toBe(first);
    expect(second).toEqual(judgeJob(facts, T0 + 3_600_000));
  });

  test('GIVEN the same facts of a failed Job WHEN the wait for its pod\'s result ends between two passes THEN the second judges it anew', () => {
    const facts: ObservedInstallerJob = { ...RUNNING, ...FAILED };
    expect(judgeJobs([facts], NO_WRITES, T0 + 1_000).views[0]).toMatchObject({ phase: 'running' });
    expect(judgeJobs([facts], NO_WRITES, T0 + POD_RESULT_WAIT_MS).views[0]).toMatchObject({ phase: 'failed', result: { reason: 'InstallerFailed' } });
  });
});

describe('what this controller wrote that the caches do not show yet', () => {
  const request = { name: 'rcm-spin-i-2', node: 'n2', operation: 'install' as const, handler: 'spin', revision: 'r1', attempt: 1, batch: 'b2', artifact: { location: 'https://e.com/spin.tgz', sha256: 'a'.repeat(64) } };
  const created: CreatedJob = { job: request, shimUid: 'u1', at: at(0) };
  const cached: ObservedInstallerJob = { ...RUNNING, name: request.name, node: 'n2', started: false, pods: 0 };

  test.each<[string, ObservedInstallerJob[], number, string[], string[]]>([
    ['created, the cache does not show it: counted, running and not started', [], 1_000, ['rcm-spin-i-2:running:false'], []],
    ['still unseen at the end of the grace: counted', [], CREATED_UNSEEN_MS, ['rcm-spin-i-2:running:false'], []],
    ['unseen for longer: left to the cache, and settled', [], CREATED_UNSEEN_MS + 1, [], ['rcm-spin-i-2']],
    ['the cache shows it: the cache\'s Job counts, and the created one is settled', [cached], 1_000, ['rcm-spin-i-2:running:false'], ['rcm-spin-i-2']],
  ])('%s', (_what, observed, nowOffset, views, settled) => {
    // GIVEN a Job this controller created at T0, and what the cache shows
    // WHEN a pass judges at `now`
    const judged = judgeJobs(observed, { created: [created], deleted: [] }, T0 + nowOffset);
    // THEN the Jobs it counts, and the writes the adapter may forget
    expect(judged.views.map(v => `${v.name}:${v.phase}:${v.started}`)).toEqual(views);
    expect(judged.settled).toEqual({ created: settled, deleted: [] });
  });

  test('a created Job counts as the Job it will be: this Shim\'s, on its node, with its artifact\'s hash', () => {
    const [view] = judgeJobs([], { created: [created], deleted: [] }, T0).views;
    const identity = { name: 'rcm-spin-i-2', shimUid: 'u1', node: 'n2', operation: 'install', handler: 'spin', revision: 'r1', attempt: 1, batch: 'b2' };
    expect(view).toEqual({ ...identity, phase: 'running', started: false, sha256: 'a'.repeat(64) });
  });

  test('a deleted Job is left out while the cache still shows it, and settled once it does not', () => {
    // GIVEN a Job this controller deleted
    const writes = { created: [], deleted: [RUNNING.name] };
    // WHEN the cache still shows it THEN it does not count, and the deletion is not settled
    expect(judgeJobs([RUNNING], writes, T0)).toEqual({ views: [], settled: { created: [], deleted: [] } });
    // WHEN the cache no longer shows it THEN the deletion is settled
    expect(judgeJobs([], writes, T0)).toEqual({ views: [], settled: { created: [], deleted: [RUNNING.name] } });
  });

  test('a withdrawn request is left out while the node record still shows it, and settled once it does not', () => {
    // GIVEN a request the controller withdrew (install mode NodeAgent)
    const withdrawn: ObservedRequest = {
      kind: 'request',
      node: 'n1',
      admitted: { name: 'rcm-spin-i-3', shimUid: 'u1', operation: 'install', handler: 'spin', revision: 'r1', attempt: 1, batch: 'b3', createdAt: at(0), request: { command: 'install', handler: 'spin' } },
    };
    const writes = { created: [], deleted: ['rcm-spin-i-3'] };
    expect(judgeJobs([withdrawn], writes, T0)).toEqual({ views: [], settled: { created: [], deleted: [] } });
    expect(judgeJobs([], writes, T0).settled.deleted).toEqual(['rcm-spin-i-3']);
    // AND one not withdrawn is judged as a Job
    expect(judgeJobs([withdrawn], NO_WRITES, T0 + 1_000).views).toMatchObject([{ name: 'rcm-spin-i-3', node: 'n1', phase: 'running', started: false }]);
  });
});

describe('a pass: the planner judges the facts with its own now, then plans', () => {
  const shim: ShimObject = {
    metadata: { name: 'spin', uid: 'u1', generation: 1, finalizers: [FINALIZER] },
    spec: {
      fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin.tgz' } },
      runtimeClass: { name: 'spin', handler: 'spin' },
      rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } },
    },
  };
  const revision = revisionOf(shim.spec);
  const node = (name: string): NodeView => ({ name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64' }, annotations: {}, ready: true, schedulable: true, bootID: 'b1' });
  const pass = (now: number, more: Partial<PassInput>) => planPass({
    shim, nodes: [node('a'), node('b')], observed: [], otherShims: [], runtimeClasses: [], retry: POLICY, now: new Date(now).toISOString(), ...more,
  });
  const creates = (actions: Action[]) => actions.filter(a => a.kind === 'createJob').map(a => (a as Extract<Action, { kind: 'createJob' }>).job.node);
  const onA = { name: jobName('spin', 'a', 'install', 'spin', revision, 1), node: 'a', operation: 'install' as const, handler: 'spin', revision, attempt: 1, batch: String(T0) };

  test('a Job created on a that the cache does not show yet holds the one slot; after the grace it is started again', () => {
    // GIVEN spin rolling one node at a time, and the Job it created on a at T0 not in the cache
    const writes = { created: [{ job: onA, shimUid: 'u1', at: at(0) }], deleted: [] };
    // WHEN a pass runs a second later THEN it counts that Job: no second Job, on b or a
    const soon = pass(T0 + 1_000, { writes });
    expect(creates(soon.actions)).toEqual([]);
    expect(soon.jobs).toMatchObject([{ name: onA.name, phase: 'running', started: false }]);
    expect(soon.settled.created).toEqual([]);
    // WHEN the cache still does not show it after the grace THEN a's Job is asked for again (the same name), and the write is settled
    const late = pass(T0 + CREATED_UNSEEN_MS + 1, { writes });
    expect(creates(late.actions)).toEqual(['a']);
    expect(late.settled.created).toEqual([onA.name]);
  });

  test('a failed Job waiting for its pod\'s result is no failure yet; after the wait it is recorded on the node', () => {
    // GIVEN a's install Job failed at T0, its pod still running in the cache
    const failed: ObservedInstallerJob = { ...RUNNING, ...FAILED, name: onA.name, node: 'a', revision, batch: onA.batch };
    const failureKey = recordKeys('spin').failure;
    const failureWritten = (actions: Action[]) => actions.some(a => a.kind === 'writeNode' && a.node === 'a' && typeof a.annotations[failureKey] === 'string');
    // WHEN a pass runs within the wait THEN the Job still runs and nothing is recorded
    const within = pass(T0 + POD_RESULT_WAIT_MS - 1, { observed: [failed] });
    expect(within.jobs).toMatchObject([{ phase: 'running' }]);
    expect(failureWritten(within.actions)).toBe(false);
    // WHEN a pass runs after it THEN the failure is recorded on a
    const after = pass(T0 + POD_RESULT_WAIT_MS, { observed: [failed] });
    expect(after.jobs).toMatchObject([{ phase: 'failed', result: { reason: 'InstallerFailed' } }]);
    expect(failureWritten(after.actions)).toBe(true);
  });
});
