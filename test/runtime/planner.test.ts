import { ShimNodeLabels } from '../../src/constructs/node-labels';
import { FINALIZER, jobName, maxInFlight, plan, PlanInput, revisionOf } from '../../src/runtime/planner';
import { Action, JobView, NodeView, ShimObject } from '../../src/runtime/types';

// Table tests of the pure planner: observed state in, actions and status out.

const NOW = '2026-11-21T00:00:00Z';
const KEY = ShimNodeLabels.stateKey('spin');
const REV = ShimNodeLabels.revisionKey('spin');

function shim(spec: any = {}, meta: Partial<ShimObject['metadata']> = {}): ShimObject {
  return {
    metadata: { name: 'spin', uid: 'u1', generation: 1, creationTimestamp: '2026-01-01T00:00:00Z', finalizers: [FINALIZER], ...meta },
    spec: {
      fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin.tgz' } },
      runtimeClass: { name: 'spin', handler: 'spin' },
      ...spec,
    },
  };
}

function node(name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): NodeView {
  return { name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', ...labels }, annotations, taints: [] };
}

const rev = (s: ShimObject) => revisionOf(s.spec);
const provisioned = (name: string, s: ShimObject, extra: Record<string, string> = {}) => node(name, { [KEY]: 'provisioned', ...extra }, { [REV]: rev(s) });

function job(nodeName: string, s: ShimObject, phase: JobView['phase'], operation: JobView['operation'] = 'install', result?: JobView['result']): JobView {
  return { name: jobName('spin', nodeName, operation, rev(s)), node: nodeName, operation, revision: rev(s), phase, result };
}

function run(input: Partial<PlanInput> & { shim: ShimObject }) {
  return plan({ nodes: [], jobs: [], otherShims: [], now: NOW, ...input });
}

const kinds = (actions: Action[], kind: Action['kind']) => actions.filter(a => a.kind === kind) as any[];

describe('selection', () => {
  test.each([
    ['all nodes when there is no selector', undefined, ['a', 'b', 'c']],
    ['only matching nodes', { wasm: 'true' }, ['a', 'c']],
    ['no node matches', { wasm: 'maybe' }, []],
  ])('%s', (_what, nodeSelector, expected) => {
    const s = shim({ nodeSelector });
    const nodes = [node('a', { wasm: 'true' }), node('b'), node('c', { wasm: 'true' })];
    const { actions, status } = run({ shim: s, nodes });
    expect(kinds(actions, 'createJob').map(a => a.node)).toEqual(expected);
    expect(status.nodes).toBe(expected.length);
  });

  test('a node that stops matching is uninstalled, then cleared', () => {
    const s = shim({ nodeSelector: { wasm: 'true' } });
    const leaving = provisioned('gone', s);
    const first = run({ shim: s, nodes: [leaving] });
    expect(first.actions).toEqual(expect.arrayContaining([
      { kind: 'setNodeState', node: 'gone', state: 'uninstalling' },
      { kind: 'createJob', node: 'gone', operation: 'uninstall', revision: rev(s) },
    ]));
    const done = run({ shim: s, nodes: [node('gone', { [KEY]: 'uninstalling' })], jobs: [job('gone', s, 'succeeded', 'uninstall')] });
    expect(kinds(done.actions, 'clearNode')).toEqual([{ kind: 'clearNode', node: 'gone' }]);
  });
});

test('a failed uninstall on a node that left the selection is reported and does not stop the rollout', () => {
  const s = shim({ nodeSelector: { wasm: 'true' } });
  const nodes = [node('gone', { [KEY]: 'uninstalling' }), node('new', { wasm: 'true' })];
  const { actions, status } = run({ shim: s, nodes, jobs: [job('gone', s, 'failed', 'uninstall', { reason: 'ConfigRefused', message: 'bad toml' })] });
  expect(kinds(actions, 'createJob').map(a => `${a.node}:${a.operation}`)).toEqual(['new:install']);
  expect(status.conditions.find(c => c.type === 'Degraded')).toMatchObject({ status: 'True', reason: 'UninstallFailed', message: 'node gone: ConfigRefused: bad toml' });
});

describe('rolling batches', () => {
  const nodes = Array.from({ length: 10 }, (_, i) => node(`n${String(i).padStart(2, '0')}`));
  test.each([
    ['recreate: every node at once', { type: 'recreate' }, 10],
    ['rolling 3', { type: 'rolling', rolling: { maxUpdate: 3 } }, 3],
    ['rolling 25% of 10 rounds up to 3', { type: 'rolling', rolling: { maxUpdate: '25%' } }, 3],
    ['rolling 1%: at least one', { type: 'rolling', rolling: { maxUpdate: '1%' } }, 1],
    ['rolling 100%', { type: 'rolling', rolling: { maxUpdate: '100%' } }, 10],
  ])('%s', (_what, rolloutStrategy, expected) => {
    const { actions } = run({ shim: shim({ rolloutStrategy }), nodes });
    expect(kinds(actions, 'createJob')).toHaveLength(expected);
  });

  test('the next batch starts only as earlier ones finish', () => {
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } } });
    const observed = [
      node('a', { [KEY]: 'pending' }, { [REV]: rev(s) }), node('b', { [KEY]: 'pending' }, { [REV]: rev(s) }), node('c'), node('d'),
    ];
    // two running: nothing new
    expect(kinds(run({ shim: s, nodes: observed, jobs: [job('a', s, 'running'), job('b', s, 'running')] }).actions, 'createJob')).toEqual([]);
    // one done: one more starts, and the done node becomes provisioned
    const next = run({ shim: s, nodes: observed, jobs: [job('a', s, 'succeeded'), job('b', s, 'running')] });
    expect(kinds(next.actions, 'createJob').map(a => a.node)).toEqual(['c']);
    expect(next.actions).toContainEqual({ kind: 'setNodeState', node: 'a', state: 'provisioned', revision: rev(s) });
    expect(next.status.nodesReady).toBe(1);
  });

  test('maxInFlight', () => {
    expect(maxInFlight({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: '10%' } } }, 2000)).toBe(200);
    expect(maxInFlight({}, 5)).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('failures', () => {
  test('a failed node stops the rollout with Degraded naming the node and the reason', () => {
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const { actions, status } = run({
      shim: s,
      nodes: [node('a', { [KEY]: 'pending' }, { [REV]: rev(s) }), node('b')],
      jobs: [job('a', s, 'failed', 'install', { reason: 'ChecksumMismatch', message: 'sha256 of x is y, expected z' })],
    });
    expect(kinds(actions, 'createJob')).toEqual([]);
    expect(actions).toContainEqual({ kind: 'setNodeState', node: 'a', state: 'failed', revision: rev(s) });
    expect(actions).toContainEqual(expect.objectContaining({ kind: 'event', type: 'Warning', reason: 'InstallFailed' }));
    expect(status.nodesFailed).toBe(1);
    expect(status.failedNodes).toEqual([{ name: 'a', reason: 'ChecksumMismatch', message: 'sha256 of x is y, expected z' }]);
    expect(status.conditions.find(c => c.type === 'Degraded')).toMatchObject({ status: 'True', message: 'node a: ChecksumMismatch: sha256 of x is y, expected z' });
    expect(status.conditions.find(c => c.type === 'Progressing')).toMatchObject({ status: 'False', reason: 'RolloutStopped' });
  });

  test('a failure already recorded on the node raises no second event', () => {
    const s = shim();
    const { actions } = run({ shim: s, nodes: [node('a', { [KEY]: 'failed' }, { [REV]: rev(s) })], jobs: [job('a', s, 'failed')] });
    expect(kinds(actions, 'event')).toEqual([]);
  });

  test('failedNodes is bounded', () => {
    const s = shim();
    const nodes = Array.from({ length: 30 }, (_, i) => node(`n${String(i).padStart(2, '0')}`, { [KEY]: 'failed' }, { [REV]: rev(s) }));
    const { status } = run({ shim: s, nodes });
    expect(status.nodesFailed).toBe(30);
    expect(status.failedNodes).toHaveLength(20);
  });
});

describe('revisions', () => {
  test('a new artifact re-rolls over provisioned nodes, which stay provisioned meanwhile', () => {
    const old = shim();
    const changed = shim({ fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin-2.tgz' } }, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    expect(rev(changed)).not.toBe(rev(old));
    const { actions, status } = run({ shim: changed, nodes: [provisioned('a', old), provisioned('b', old)] });
    expect(kinds(actions, 'createJob')).toEqual([{ kind: 'createJob', node: 'a', operation: 'install', revision: rev(changed), artifact: { location: 'https://e.com/spin-2.tgz', sha256: undefined } }]);
    expect(kinds(actions, 'setNodeState')).toEqual([]);
    expect(status.nodesReady).toBe(0);
  });

  test.each([
    ['sha256', { fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin.tgz', sha256: 'a'.repeat(64) } } }],
    ['handler', { runtimeClass: { name: 'spin', handler: 'spin2' } }],
    ['runtime options', { containerdRuntimeOptions: { SystemdCgroup: 'true' } }],
    ['runtime options alias', { runtimeOptions: { SystemdCgroup: 'true' } }],
  ])('a change of %s is a new revision', (_what, spec) => {
    expect(revisionOf(shim(spec).spec)).not.toBe(revisionOf(shim().spec));
  });

  test('a change of nodeSelector, rollout or restart mode is not', () => {
    const other = shim({ nodeSelector: { a: 'b' }, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } }, restart: { mode: 'none' } });
    expect(revisionOf(other.spec)).toBe(revisionOf(shim().spec));
  });
});

describe('per-platform artifacts and validity', () => {
  const platforms = { type: 'anonymousHttp', anonHttp: { platforms: [{ os: 'linux', arch: 'arm64', location: 'https://e.com/arm.tgz', sha256: 'b'.repeat(64) }] } };

  test('each node gets its platform artifact', () => {
    const { actions } = run({ shim: shim({ fetchStrategy: platforms }), nodes: [node('arm', { 'kubernetes.io/arch': 'arm64' })] });
    expect(kinds(actions, 'createJob')[0].artifact).toEqual({ location: 'https://e.com/arm.tgz', sha256: 'b'.repeat(64) });
  });

  test.each([
    ['no artifact for a node platform', shim({ fetchStrategy: platforms }), [], /no artifact for platform linux\/amd64 of node x/],
    ['a handler claimed by an older Shim', shim(), [shim({}, { name: 'older', creationTimestamp: '2025-01-01T00:00:00Z' })], /handler "spin" is already claimed by Shim "older"/],
    ['a RuntimeClass claimed by an older Shim', shim(), [shim({ runtimeClass: { name: 'spin', handler: 'other' } }, { name: 'older', creationTimestamp: '2025-01-01T00:00:00Z' })], /RuntimeClass "spin" is already claimed/],
    ['a bad handler', shim({ runtimeClass: { name: 'spin', handler: 'Bad_Handler' } }), [], /handler "Bad_Handler" is not a DNS label/],
  ])('%s: a condition and an event, nothing done', (_what, s, otherShims, message) => {
    const { actions, status } = run({ shim: s, nodes: [node('x')], otherShims });
    expect(kinds(actions, 'createJob')).toEqual([]);
    expect(kinds(actions, 'applyRuntimeClass')).toEqual([]);
    expect(kinds(actions, 'event')[0].message).toMatch(message);
    expect(status.conditions.find(c => c.type === 'Degraded')).toMatchObject({ status: 'True', reason: 'InvalidShim', message: expect.stringMatching(message) });
  });

  test('the younger Shim of a conflict is the invalid one', () => {
    const younger = shim({}, { name: 'younger', creationTimestamp: '2027-01-01T00:00:00Z' });
    expect(kinds(run({ shim: shim(), nodes: [node('x')], otherShims: [younger] }).actions, 'createJob')).toHaveLength(1);
  });
});

describe('deletion ordering', () => {
  const deleting = (s: ShimObject) => ({ ...s, metadata: { ...s.metadata, deletionTimestamp: NOW } });

  test('uninstall on every labelled node in any state, including unselected ones', () => {
    const s = shim({ nodeSelector: { wasm: 'true' } });
    const nodes = [provisioned('a', s), node('b', { [KEY]: 'failed' }), node('c', { [KEY]: 'pending' }), node('d')];
    const { actions } = run({ shim: deleting(s), nodes });
    expect(kinds(actions, 'createJob').map(a => `${a.node}:${a.operation}`)).toEqual(['a:uninstall', 'b:uninstall', 'c:uninstall']);
    expect(kinds(actions, 'removeFinalizer')).toEqual([]);
  });

  test('waits for running uninstalls, then clears labels, deletes the RuntimeClass, releases the finalizer', () => {
    const s = shim();
    const nodes = [node('a', { [KEY]: 'uninstalling' }), node('b', { [KEY]: 'uninstalling' })];
    const waiting = run({ shim: deleting(s), nodes, jobs: [job('a', s, 'succeeded', 'uninstall'), job('b', s, 'running', 'uninstall')] });
    expect(kinds(waiting.actions, 'removeFinalizer')).toEqual([]);
    const done = run({ shim: deleting(s), nodes, jobs: [job('a', s, 'succeeded', 'uninstall'), job('b', s, 'succeeded', 'uninstall')] });
    const order = done.actions.filter(a => a.kind !== 'event').map(a => a.kind);
    expect(order).toEqual(['clearNode', 'clearNode', 'deleteRuntimeClass', 'removeFinalizer']);
  });

  test('a failed uninstall holds the finalizer and says so: Degraded names the node and the reason, Ready is False', () => {
    const s = shim();
    const nodes = [node('a', { [KEY]: 'failed' }), node('b', { [KEY]: 'uninstalling' })];
    const failure = { reason: 'RestartFailedRolledBack', message: 'containerd failed after the change' };
    const { actions, status } = run({ shim: deleting(s), nodes, jobs: [job('a', s, 'failed', 'uninstall', failure), job('b', s, 'running', 'uninstall')] });
    expect(kinds(actions, 'removeFinalizer')).toEqual([]);
    const byType = Object.fromEntries(status.conditions.map(c => [c.type, c]));
    expect(byType.Degraded).toMatchObject({ status: 'True', reason: 'UninstallFailed', message: 'node a: RestartFailedRolledBack: containerd failed after the change' });
    expect(byType.Ready).toMatchObject({ status: 'False', reason: 'Deleting' });
    expect(byType.Progressing).toMatchObject({ status: 'True', reason: 'Deleting', message: 'uninstalling from 2 node(s)' });
    expect(status.failedNodes).toEqual([{ name: 'a', ...failure }]);
    expect(status.nodesFailed).toBe(1);
  });

  test('a node that vanished is not waited for', () => {
    const { actions } = run({ shim: deleting(shim()), nodes: [] });
    expect(actions.map(a => a.kind)).toEqual(['deleteRuntimeClass', 'removeFinalizer']);
  });
});

describe('bookkeeping', () => {
  test('adds its finalizer first', () => {
    expect(run({ shim: shim({}, { finalizers: [] }) }).actions[0]).toEqual({ kind: 'addFinalizer' });
  });

  test('a converged Shim plans nothing but the RuntimeClass, and keeps transition times', () => {
    const s = shim();
    const first = run({ shim: s, nodes: [provisioned('a', s)] });
    expect(first.actions.map(a => a.kind)).toEqual(['applyRuntimeClass']);
    expect(first.status).toMatchObject({ nodes: 1, nodesReady: 1, nodesFailed: 0 });
    const later = plan({ shim: { ...s, status: first.status }, nodes: [provisioned('a', s)], jobs: [], otherShims: [], now: '2030-01-01T00:00:00Z' });
    expect(later.status.conditions.map(c => c.lastTransitionTime)).toEqual([NOW, NOW, NOW]);
  });

  test('job names are deterministic, distinct and at most 63 characters', () => {
    const long = 'x'.repeat(200);
    expect(jobName(long, 'node', 'install', 'r1').length).toBeLessThanOrEqual(63);
    expect(jobName('spin', 'a', 'install', 'r1')).toBe(jobName('spin', 'a', 'install', 'r1'));
    expect(new Set([jobName('spin', 'a', 'install', 'r1'), jobName('spin', 'b', 'install', 'r1'), jobName('spin', 'a', 'uninstall', 'r1'), jobName('spin', 'a', 'install', 'r2')]).size).toBe(4);
    expect(jobName('a.b-', 'n', 'install', 'r')).toMatch(/^rcm-a-b-i-[0-9a-f]{12}$/);
  });
});
