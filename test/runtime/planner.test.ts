import { POLICY, World } from './planner-world';
import { readRecord, recordKeys } from '../../src/runtime/node-record';
import { backoffSeconds, FINALIZER, HANDLER_NOT_REPORTED, jobName, KUBELET_REPORT_WAIT_MS, maxInFlight, plan, PlanInput, RETRY_ANNOTATION, revisionOf } from '../../src/runtime/planner';
import { desiredRuntimeClass, METADATA_DIGEST_ANNOTATION, quantityNanos } from '../../src/runtime/runtime-class';
import { Action, Condition, JobView, NodeView, RuntimeClassView, ShimObject, ShimSpec } from '../../src/runtime/types';
import { ShimNodeLabels } from '../../src/shared/node-labels';

// Table tests of the pure planner: observed state in, actions and status out. Scenario tests
// run it in a small world (planner-world.ts) that checks the invariants after every step.

const NOW = '2026-11-21T00:00:00Z';
const KEYS = recordKeys('spin');

function shim(spec: Partial<ShimSpec> = {}, meta: Partial<ShimObject['metadata']> = {}): ShimObject {
  return {
    metadata: { name: 'spin', uid: 'u1', generation: 1, creationTimestamp: '2026-01-01T00:00:00Z', finalizers: [FINALIZER], ...meta },
    spec: {
      fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin.tgz' } },
      runtimeClass: { name: 'spin', handler: 'spin' },
      ...spec,
    },
  };
}

function node(name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}, extra: Partial<NodeView> = {}): NodeView {
  return { name, labels: { 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', ...labels }, annotations, ready: true, schedulable: true, bootID: 'b1', ...extra };
}

const rev = (s: ShimObject) => revisionOf(s.spec);
/** A node where the controller recorded the Shim's current revision. */
const installed = (name: string, s: ShimObject, labels: Record<string, string> = {}, extra: Partial<NodeView> = {}) => node(name,
  { [KEYS.handler]: s.spec.runtimeClass.handler, [KEYS.state]: 'provisioned', ...labels },
  { [KEYS.installed]: JSON.stringify([{ handler: s.spec.runtimeClass.handler, revision: rev(s), bootID: 'b1' }]) }, extra);

function job(nodeName: string, s: ShimObject, phase: JobView['phase'], operation: JobView['operation'] = 'install', more: Partial<JobView> = {}): JobView {
  const handler = more.handler ?? s.spec.runtimeClass.handler;
  const revision = more.revision ?? rev(s);
  const attempt = more.attempt ?? 1;
  return {
    name: jobName('spin', nodeName, operation, handler, revision, attempt),
    shimUid: 'u1',
    batch: 'b0',
    node: nodeName,
    operation,
    handler,
    revision,
    attempt,
    phase,
    started: true,
    ...(phase !== 'running' ? { finishedAt: NOW } : {}),
    ...more,
  };
}

function run(input: Partial<PlanInput> & { shim: ShimObject }) {
  return plan({ nodes: [], jobs: [], otherShims: [], runtimeClasses: [], retry: POLICY, now: NOW, ...input });
}

const kinds = <K extends Action['kind']>(actions: Action[], kind: K) => actions.filter(a => a.kind === kind) as Extract<Action, { kind: K }>[];
const created = (actions: Action[]) => kinds(actions, 'createJob').map(a => `${a.job.node}:${a.job.operation}:${a.job.handler}`);
const condition = (status: { conditions: Condition[] }, type: string) => status.conditions.find(c => c.type === type);

function world(nodes: string[], spec: Partial<ShimSpec> = {}): { w: World; s: ShimObject } {
  const w = new World(nodes);
  const s = shim(spec, { finalizers: [] });
  w.shims.push(s);
  return { w, s };
}

/** Steps until nothing changes (each step also checks I1). */
function settle(w: World, name = 'spin', finish: Parameters<World['finish']>[0] = () => 'succeed', rounds = 50): void {
  for (let i = 0; i < rounds; i++) {
    if (!w.shims.some(s => s.metadata.name === name)) return;
    const before = JSON.stringify([w.jobs, [...w.nodes], w.runtimeClass]);
    w.step(name);
    w.finish(finish);
    w.checkOneOperationPerNode();
    if (JSON.stringify([w.jobs, [...w.nodes], w.runtimeClass]) === before) return;
  }
}

describe('selection and the record', () => {
  test.each([
    ['all nodes when there is no selector', undefined, ['a', 'b', 'c']],
    ['only matching nodes', { wasm: 'true' }, ['a', 'c']],
    ['no node matches', { wasm: 'maybe' }, []],
  ])('%s', (_what, nodeSelector, expected) => {
    const s = shim({ nodeSelector });
    const nodes = [node('a', { wasm: 'true' }), node('b'), node('c', { wasm: 'true' })];
    const { actions, status } = run({ shim: s, nodes });
    expect(kinds(actions, 'createJob').map(a => a.job.node)).toEqual(expected);
    expect(status.nodes).toBe(expected.length);
  });

  test('a successful install records handler, revision, sha256 and boot ID, sets the gate label, and removes the Job', () => {
    const s = shim({ fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin.tgz', sha256: 'a'.repeat(64) } } });
    const { actions, status } = run({ shim: s, nodes: [node('a')], jobs: [job('a', s, 'succeeded', 'install', { sha256: 'a'.repeat(64) })] });
    const write = kinds(actions, 'writeNode')[0];
    expect(write.labels).toEqual({ [KEYS.handler]: 'spin', [KEYS.state]: 'provisioned' });
    expect(JSON.parse(write.annotations[KEYS.installed]!)).toEqual([{ handler: 'spin', revision: rev(s), sha256: 'a'.repeat(64), bootID: 'b1' }]);
    // the record first, then the Job goes
    expect(actions.map(a => a.kind).filter(k => k === 'writeNode' || k === 'deleteSucceededJobs')).toEqual(['writeNode', 'deleteSucceededJobs']);
    expect(status.nodesReady).toBe(1);
  });

  test('succeeded Jobs go a whole batch at a time, once none of the batch runs: a Job that succeeds after this pass saw the batch is never removed unrecorded', () => {
    const s = shim();
    const nodes = [node('a'), node('b'), node('c')];
    const jobs = [job('a', s, 'succeeded'), job('b', s, 'running'), job('c', s, 'succeeded', 'install', { batch: 'b1' })];
    expect(kinds(run({ shim: s, nodes, jobs }).actions, 'deleteSucceededJobs')).toEqual([{ kind: 'deleteSucceededJobs', batches: ['b1'] }]);
    // a Job from before batches existed goes by its name
    const legacy = { ...job('a', s, 'succeeded'), batch: undefined };
    expect(kinds(run({ shim: s, nodes: [node('a')], jobs: [legacy] }).actions, 'deleteJob')).toEqual([{ kind: 'deleteJob', name: legacy.name }]);
  });

  test('a recorded node plans nothing and needs no Job', () => {
    const s = shim();
    const { actions, status } = run({ shim: s, nodes: [installed('a', s)] });
    expect(actions.map(a => a.kind)).toEqual(['applyRuntimeClass']);
    expect(status).toMatchObject({ nodes: 1, nodesReady: 1, nodesFailed: 0 });
    expect(condition(status, 'Ready')).toMatchObject({ status: 'True' });
  });

  test('a damaged record still names the handler from the gate label, so uninstall removes it', () => {
    const n = node('a', { [KEYS.handler]: 'spin' }, { [KEYS.installed]: '{not json' });
    expect(readRecord(n, KEYS).installed).toEqual([{ handler: 'spin', revision: 'unknown' }]);
    const s = shim({ nodeSelector: { never: 'x' } });
    expect(created(run({ shim: s, nodes: [n] }).actions)).toEqual(['a:uninstall:spin']);
  });
});

describe('rolling batches (installs and uninstalls share the budget, I4)', () => {
  const nodes = Array.from({ length: 10 }, (_, i) => node(`n${String(i).padStart(2, '0')}`));
  test.each([
    ['recreate: every node at once', { type: 'recreate' as const }, 10],
    ['rolling 3', { type: 'rolling' as const, rolling: { maxUpdate: 3 } }, 3],
    ['rolling 25% of 10 rounds up to 3', { type: 'rolling' as const, rolling: { maxUpdate: '25%' } }, 3],
    ['rolling 1%: at least one', { type: 'rolling' as const, rolling: { maxUpdate: '1%' } }, 1],
    ['rolling 100%', { type: 'rolling' as const, rolling: { maxUpdate: '100%' } }, 10],
  ])('%s', (_what, rolloutStrategy, expected) => {
    expect(kinds(run({ shim: shim({ rolloutStrategy }), nodes }).actions, 'createJob')).toHaveLength(expected);
  });

  describe('a fleet larger than the budget: a pass makes no candidate past what it could admit, and counts the rest as it always did', () => {
    const fleet = Array.from({ length: 25 }, (_, i) => node(`n${String(i).padStart(2, '0')}`));
    const rolling2 = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } } });
    const progressing = (r: ReturnType<typeof run>) => condition(r.status, 'Progressing')!;
    const failedAt = (attempt: number) => ({
      labels: { [KEYS.state]: 'failed' },
      annotations: { [KEYS.failure]: JSON.stringify({ operation: 'install', handler: 'spin', revision: rev(rolling2), attempt, reason: 'X', message: 'y', at: '2026-01-01T00:00:00Z' }) },
    });
    const failing = (name: string, attempt: number) => node(name, failedAt(attempt).labels, failedAt(attempt).annotations);

    test('the first two by name are admitted, the 23 others queued', () => {
      const r = run({ shim: rolling2, nodes: fleet });
      expect(created(r.actions)).toEqual(['n00:install:spin', 'n01:install:spin']);
      expect(progressing(r).message).toBe('2 node(s) in progress, 0/25 done; 23 node(s) queued');
    });

    test('with the budget taken by running Jobs, none is admitted and 23 are queued', () => {
      const r = run({ shim: rolling2, nodes: fleet, jobs: [job('n00', rolling2, 'running'), job('n01', rolling2, 'running')] });
      expect(created(r.actions)).toEqual([]);
      expect(progressing(r).message).toBe('2 node(s) in progress, 0/25 done; 23 node(s) queued');
    });

    test('retries due go first, past the cap of their bucket too: the third retry and the installs are queued', () => {
      const retrying = fleet.map(n => (['n20', 'n21', 'n22'].includes(n.name) ? failing(n.name, 1) : n));
      const r = run({ shim: rolling2, nodes: retrying });
      expect(created(r.actions)).toEqual(['n20:install:spin', 'n21:install:spin']);
      expect(progressing(r).message).toMatch(/; 23 node\(s\) queued$/);
    });

    test('a stopped rollout skips the new installs (not queued), past the cap as before it; its failed node is retried', () => {
      const exhausted = fleet.map(n => (n.name === 'n24' ? failing('n24', 3) : n));
      const r = run({ shim: rolling2, nodes: exhausted });
      expect(created(r.actions)).toEqual(['n24:install:spin']);
      expect(progressing(r)).toMatchObject({ reason: 'RolloutStopped' });
      expect(progressing(r).message).not.toContain('queued');
    });

    test('nodes whose boot ID changed are checked again outside the budget (exempt, past the cap too); two installs take it, 18 wait', () => {
      const booted = fleet.map(n => (n.name < 'n05' ? installed(n.name, rolling2, {}, { bootID: 'b2' }) : n));
      const r = run({ shim: rolling2, nodes: booted });
      expect(created(r.actions)).toEqual(['n00', 'n01', 'n02', 'n03', 'n04', 'n05', 'n06'].map(n => `${n}:install:spin`));
      expect(progressing(r).message).toMatch(/; 18 node\(s\) queued$/);
    });
  });

  test('maxInFlight', () => {
    expect(maxInFlight(shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: '10%' } } }).spec, 2000)).toBe(200);
    expect(maxInFlight(shim().spec, 5)).toBe(Number.POSITIVE_INFINITY);
  });

  test('a rolling rollout never has more than maxUpdate nodes in flight and ends with every node recorded', () => {
    const { w, s } = world(['a', 'b', 'c', 'd', 'e'], { rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } } });
    settle(w);
    expect(w.peak.get('u1')).toBe(2);
    expect([...w.hosts.values()].every(h => h.has('spin'))).toBe(true);
    expect(s.status).toMatchObject({ nodes: 5, nodesReady: 5 });
    expect(w.jobs).toEqual([]); // finished Jobs removed by the controller (I8)
  });

  test('item 3: deleting the Shim uninstalls under the same maxUpdate', () => {
    const { w, s } = world(['a', 'b', 'c'], { rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    settle(w);
    w.peak.clear();
    s.metadata.deletionTimestamp = NOW;
    const first = w.step('spin');
    expect(created(first.actions)).toEqual(['a:uninstall:spin']);
    settle(w);
    expect(w.peak.get('u1')).toBe(1);
    expect(w.shims).toEqual([]); // finalizer released
    expect([...w.hosts.values()].every(h => h.size === 0)).toBe(true);
    expect(w.runtimeClass).toBeUndefined();
    for (const n of w.nodes.values()) expect(Object.keys(n.labels).filter(k => k.includes(ShimNodeLabels.DOMAIN))).toEqual([]);
  });

  test('item 3: a selector change deselecting nodes uninstalls under maxUpdate too', () => {
    const { w, s } = world(['a', 'b', 'c'], { rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    settle(w);
    w.peak.clear();
    (s as any).spec = { ...s.spec, nodeSelector: { wasm: 'true' } };
    settle(w);
    expect(w.peak.get('u1')).toBe(1);
    expect([...w.hosts.values()].every(h => h.size === 0)).toBe(true);
    expect(s.status).toMatchObject({ nodes: 0 });
  });
});

describe('passes over the same node objects (the caches keep a node\'s object while it is unchanged; the planner keeps what it derived from it)', () => {
  const other = () => shim({ runtimeClass: { name: 'wasm', handler: 'wasm' } }, { name: 'wasm', uid: 'u2' });
  test.each<[string, (s: ShimObject) => Partial<PlanInput> & { shim: ShimObject }, string[]]>([
    ['a new revision: installed again', s => ({ shim: shim({ fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin-2.tgz' } } }, { uid: s.metadata.uid }) }),
      ['createJob a:install:spin', 'createJob b:install:spin']],
    ['deselected: uninstalled, and the gate goes at once', () => ({ shim: shim({ nodeSelector: { pool: 'x' } }) }),
      ['writeNode a', 'writeNode b', 'createJob a:uninstall:spin', 'createJob b:uninstall:spin']],
    ['the Shim being deleted: uninstalled', () => ({ shim: shim({}, { deletionTimestamp: NOW }) }),
      ['writeNode a', 'writeNode b', 'createJob a:uninstall:spin', 'createJob b:uninstall:spin']],
    ['another Shim, then this one unchanged: nothing to do', () => ({ shim: shim() }), []],
  ])('%s', (_what, second, expected) => {
    // GIVEN two nodes with spin installed, planned once (and planned by another Shim too)
    const summary = (actions: Action[]) => actions.filter(a => a.kind !== 'event' && a.kind !== 'applyRuntimeClass')
      .map(a => a.kind === 'createJob' ? `createJob ${a.job.node}:${a.job.operation}:${a.job.handler}` : a.kind === 'writeNode' ? `writeNode ${a.node}` : a.kind);
    const s = shim();
    const nodes = [installed('a', s), installed('b', s)];
    expect(summary(run({ shim: s, nodes }).actions)).toEqual([]);
    run({ shim: other(), nodes, otherShims: [s] });
    // WHEN the next pass sees the very same node objects, with what changed
    const { actions } = run({ nodes, ...second(s) });
    // THEN it plans from what changed, not from what it derived before
    expect(summary(actions)).toEqual(expected);
  });
});

describe('change sets across Shims: a node restarts containerd once for the Shims that change it together', () => {
  const wasm = (spec: Partial<ShimSpec> = {}) => shim({ runtimeClass: { name: 'wasm', handler: 'wasm' }, ...spec }, { name: 'wasm', uid: 'u2' });
  const wasmJob = (nodeName: string, phase: JobView['phase']) => job(nodeName, wasm(), phase, 'install', { shimUid: 'u2', handler: 'wasm', name: `wasm-${nodeName}` });
  const rolling1 = { rolloutStrategy: { type: 'rolling' as const, rolling: { maxUpdate: 1 } } };

  test.each<[string, JobView[], string[]]>([
    ['no other installer anywhere: by name', [], ['a:install:spin']],
    ['another Shim\'s installer runs on c: c first (its change set there takes this change too)', [wasmJob('c', 'running')], ['c:install:spin']],
    ['another Shim\'s installer finished on c: by name again', [wasmJob('c', 'succeeded')], ['a:install:spin']],
  ])('%s', (_what, jobs, expected) => {
    // GIVEN four nodes without spin, spin rolling one node at a time
    const nodes = ['a', 'b', 'c', 'd'].map(n => node(n));
    // WHEN spin plans while other Shims' installers are as given
    const { actions } = run({ shim: shim(rolling1), nodes, jobs, otherShims: [wasm()] });
    // THEN its one slot goes to the node named
    expect(created(actions)).toEqual(expected);
  });

  test.each<[string, string[]]>([
    ['in order of name (as a LIST gives them)', ['a', 'b', 'c', 'd']],
    ['out of order (nodes that joined after the LIST)', ['d', 'b', 'a', 'c']],
  ])('the nodes come %s: the slot goes to the first by name either way', (_what, names) => {
    // GIVEN nodes without spin, spin rolling one node at a time
    const nodes = names.map(n => node(n));
    // WHEN spin plans
    const { actions } = run({ shim: shim(rolling1), nodes });
    // THEN its one slot goes to a, and the input was not reordered
    expect(created(actions)).toEqual(['a:install:spin']);
    expect(nodes.map(n => n.name)).toEqual(names);
  });

  test('the order of precedence stays: a retry, then removals, before an install that would join', () => {
    // GIVEN a deselected node with spin (an uninstall due), and c where wasm's installer runs (an install could join)
    const s = shim({ ...rolling1, nodeSelector: { pool: 'x' } });
    const nodes = [installed('a', s), node('b', { pool: 'x' }), node('c', { pool: 'x' })];
    // WHEN spin plans its one slot
    const { actions } = run({ shim: s, nodes, jobs: [wasmJob('c', 'running')], otherShims: [wasm()] });
    // THEN the removal goes first
    expect(created(actions)).toEqual(['a:uninstall:spin']);
  });

  test('two Shims rolling one node at a time, the second a node behind: it catches up with the first, and every node changes for both at once', () => {
    // GIVEN spin rolling over four nodes, one at a time; wasm created once spin is on its second node
    const w = new World(['a', 'b', 'c', 'd']);
    const spin = shim(rolling1, { finalizers: [] });
    w.shims.push(spin);
    w.step('spin');
    w.finish();
    w.step('spin'); // records a, starts b
    w.shims.push(wasm({ ...rolling1 }));
    (w.shims[1].metadata as any).finalizers = [];
    // WHEN both reconcile in every round, the kubelets finishing the round's Jobs together
    const rounds: string[][] = [];
    for (let i = 0; i < 12; i++) {
      w.step('wasm');
      rounds.push(w.running().map(j => `${j.node}:${j.handler}`).sort());
      w.finish();
      w.step('spin');
      w.checkOneOperationPerNode();
    }
    // THEN wasm's first install went where spin's installer was running (b), not to a
    expect(rounds[0]).toEqual(['b:spin', 'b:wasm']);
    // AND each node after a saw both Shims' installers in the same round (one change set, one restart)
    for (const n of ['b', 'c', 'd']) {
      const withJobs = rounds.filter(r => r.some(x => x.startsWith(`${n}:`)));
      expect({ node: n, rounds: withJobs.length }).toEqual({ node: n, rounds: 1 });
    }
    // AND every node ends with both handlers
    expect([...w.hosts.values()].every(h => h.has('spin') && h.has('wasm'))).toBe(true);
  });
});

describe('I1: the scheduler is never lied to', () => {
  test('item 1: a handler change under rolling: the RuntimeClass selects only nodes with the new handler, and the old one is removed', () => {
    const { w, s } = world(['a', 'b', 'c'], { rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    settle(w);
    (s as any).spec = { ...s.spec, runtimeClass: { name: 'spin', handler: 'spin2' } };
    // installs held: the RuntimeClass is replaced, and selects no node yet
    const step = w.step('spin');
    const apply = kinds(step.actions, 'applyRuntimeClass')[0];
    expect(apply).toMatchObject({ replace: true, object: { handler: 'spin2', scheduling: { nodeSelector: { [KEYS.handler]: 'spin2' } } } });
    expect(created(step.actions)).toEqual(['a:install:spin2']);
    settle(w); // check() runs after every step
    for (const h of w.hosts.values()) expect([...h]).toEqual(['spin2']);
    expect(s.status).toMatchObject({ nodesReady: 3 });
  });

  test('deselection takes the gate label away before the uninstall Job starts', () => {
    const s = shim({ nodeSelector: { wasm: 'true' } });
    const { actions } = run({ shim: s, nodes: [installed('a', s)] });
    const order = actions.filter(a => a.kind === 'writeNode' || a.kind === 'createJob');
    expect(order[0]).toMatchObject({ kind: 'writeNode', labels: { [KEYS.handler]: null, [KEYS.state]: 'uninstalling' } });
    expect(order[1]).toMatchObject({ kind: 'createJob', job: { operation: 'uninstall', handler: 'spin' } });
  });

  test('item 11: a rebooted node (new boot ID) leaves scheduling until an install re-verifies it, outside the rollout budget', () => {
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const nodes = [installed('a', s, {}, { bootID: 'b2' }), installed('b', s, {}, { bootID: 'b2' })];
    const { actions, status } = run({ shim: s, nodes });
    expect(kinds(actions, 'writeNode').map(a => a.labels[KEYS.handler])).toEqual([null, null]);
    expect(created(actions)).toEqual(['a:install:spin', 'b:install:spin']);
    expect(status.nodesReady).toBe(0);
    // once re-installed, the new boot ID is recorded and the gate is back
    const done = run({ shim: s, nodes: [installed('a', s, { [KEYS.handler]: '' }, { bootID: 'b2' })], jobs: [job('a', s, 'succeeded')] });
    const write = kinds(done.actions, 'writeNode')[0];
    expect(write.labels[KEYS.handler]).toBe('spin');
    expect(JSON.parse(write.annotations[KEYS.installed]!)[0].bootID).toBe('b2');
  });
});

describe('I2: upgrades never reduce capacity by failing', () => {
  test('item 2: a bad revision under recreate keeps every node schedulable on the previous one', () => {
    const { w, s } = world(['a', 'b', 'c']);
    settle(w);
    (s as any).spec = { ...s.spec, fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/typo.tgz' } } };
    for (let i = 0; i < 12; i++) {
      w.step('spin');
      w.finish(() => 'fail');
      w.tick(100);
    }
    for (const n of w.nodes.values()) expect(n.labels[KEYS.handler]).toBe('spin');
    expect(s.status).toMatchObject({ nodesReady: 0, nodesFailed: 3 });
    expect(condition(s.status!, 'Degraded')).toMatchObject({ status: 'True', reason: 'InstallFailed' });
    for (const n of w.nodes.values()) expect(n.labels[KEYS.state]).toBe('failed');
  });
});

describe('I3: one operation per node and handler', () => {
  test('item 4: a selector flap waits for the running install before uninstalling, and for the uninstall before installing again', () => {
    const s = shim({ nodeSelector: { wasm: 'true' } });
    const flapped = node('a');
    expect(created(run({ shim: s, nodes: [flapped], jobs: [job('a', s, 'running')] }).actions)).toEqual([]);
    // the install ends: recorded, then uninstalled
    expect(created(run({ shim: s, nodes: [flapped], jobs: [job('a', s, 'succeeded')] }).actions)).toEqual(['a:uninstall:spin']);
    // back in the selection while the uninstall runs: nothing new
    const back = installed('a', s, { wasm: 'true' });
    expect(created(run({ shim: s, nodes: [back], jobs: [job('a', s, 'running', 'uninstall')] }).actions)).toEqual([]);
  });

  test('item 4: a node selected again while its uninstall runs gets no gate label until it has the handler again', () => {
    // (found by the integration test's kubelet stand-in)
    const { w, s } = world(['a'], { nodeSelector: { wasm: 'true' } });
    w.nodes.get('a')!.labels.wasm = 'true';
    settle(w);
    delete w.nodes.get('a')!.labels.wasm;
    expect(created(w.step('spin').actions)).toEqual(['a:uninstall:spin']);
    w.nodes.get('a')!.labels.wasm = 'true';
    w.step('spin'); // while the uninstall runs
    w.finish(); // check(): the RuntimeClass must not select a node whose handler just went
    settle(w);
    expect([...w.hosts.get('a')!]).toEqual(['spin']);
    expect(s.status).toMatchObject({ nodesReady: 1 });
  });

  test('item 4: deleting during a pending install waits for it, then uninstalls', () => {
    const s = shim({}, { deletionTimestamp: NOW });
    const waiting = run({ shim: s, nodes: [node('a')], jobs: [job('a', s, 'running')] });
    expect(created(waiting.actions)).toEqual([]);
    expect(kinds(waiting.actions, 'removeFinalizer')).toEqual([]);
    const then = run({ shim: s, nodes: [node('a')], jobs: [job('a', s, 'succeeded')] });
    expect(created(then.actions)).toEqual(['a:uninstall:spin']);
  });

  test('item 4: a rename by create-plus-delete: the new Shim waits on each node until the old one removed the handler', () => {
    const w = new World(['a', 'b']);
    const old = shim({}, { name: 'old', uid: 'u-old', finalizers: [] });
    w.shims.push(old);
    settle(w, 'old');
    const renamed = shim({ runtimeClass: { name: 'spin-new', handler: 'spin' } }, { name: 'spin', uid: 'u1', finalizers: [], creationTimestamp: '2026-06-01T00:00:00Z' });
    old.metadata.deletionTimestamp = NOW;
    w.shims.push(renamed);
    // in one apply: both reconcile; the new one must not install where the old one still has it
    const first = w.step('spin');
    expect(created(first.actions)).toEqual([]);
    expect(condition(first.status, 'Progressing')!.message).toMatch(/2 node\(s\) wait for another Shim to release the handler/);
    for (let i = 0; i < 20; i++) {
      for (const name of ['old', 'spin']) if (w.shims.some(x => x.metadata.name === name)) w.step(name);
      w.checkOneOperationPerNode();
      w.finish();
    }
    expect(w.shims.map(x => x.metadata.name)).toEqual(['spin']);
    for (const h of w.hosts.values()) expect([...h]).toEqual(['spin']);
    expect(renamed.status).toMatchObject({ nodesReady: 2 });
  });

  test('item 9: uninstall removes the handler the node recorded, not the one the spec names now', () => {
    const before = shim();
    const s = shim({ runtimeClass: { name: 'spin', handler: 'edited' } }, { deletionTimestamp: NOW });
    const { actions } = run({ shim: s, nodes: [installed('a', before)] });
    expect(created(actions)).toEqual(['a:uninstall:spin']);
  });

  test('item 10: a revision change mid-rollout counts and keeps the old revision\'s running Jobs', () => {
    const v1 = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } } });
    const v2 = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } }, fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/v2.tgz' } } });
    const nodes = [node('a'), node('b'), node('c')];
    const { actions } = run({ shim: v2, nodes, jobs: [job('a', v1, 'running'), job('b', v1, 'running')] });
    expect(kinds(actions, 'deleteJob')).toEqual([]);
    expect(created(actions)).toEqual([]); // both slots are taken by v1's Jobs
    // when they finish, v1 is recorded and v2 follows on those nodes
    const after = run({ shim: v2, nodes, jobs: [job('a', v1, 'succeeded'), job('b', v1, 'running')] });
    expect(kinds(after.actions, 'writeNode')[0].annotations[KEYS.installed]).toContain(rev(v1));
    expect(created(after.actions)).toEqual(['a:install:spin']);
  });
});

describe('I5: nothing is released before it is done', () => {
  const deleting = (s: ShimObject) => ({ ...s, metadata: { ...s.metadata, deletionTimestamp: NOW } });

  test('uninstall on every recorded node, selected or not, then release', () => {
    const s = shim({ nodeSelector: { wasm: 'true' } });
    const nodes = [installed('a', s), installed('b', s, { wasm: 'true' }), node('c')];
    const { actions } = run({ shim: deleting(s), nodes });
    expect(created(actions)).toEqual(['a:uninstall:spin', 'b:uninstall:spin']);
    expect(kinds(actions, 'removeFinalizer')).toEqual([]);
  });

  test('the record goes with the last uninstall; then the Jobs, the RuntimeClass it owns and the finalizer', () => {
    const s = shim();
    const rc = { name: 'spin', handler: 'spin', annotations: {}, shimOwners: ['u1'], foreignOwner: false };
    const { actions } = run({ shim: deleting(s), nodes: [installed('a', s)], jobs: [job('a', s, 'succeeded', 'uninstall')], runtimeClasses: [rc] });
    expect(actions.filter(a => a.kind !== 'event').map(a => a.kind)).toEqual(['writeNode', 'deleteSucceededJobs', 'deleteRuntimeClass', 'removeFinalizer']);
    expect(kinds(actions, 'writeNode')[0]).toMatchObject({ labels: { [KEYS.handler]: null, [KEYS.state]: null }, annotations: { [KEYS.installed]: null } });
  });

  test('a failed uninstall holds the finalizer; after the threshold Degraded names the node and the reason', () => {
    const s = shim();
    const failed = (attempt: number) => job('a', s, 'failed', 'uninstall', { attempt, result: { reason: 'RestartFailedRolledBack', message: 'containerd failed after the change' } });
    const first = run({ shim: deleting(s), nodes: [installed('a', s)], jobs: [failed(1)] });
    expect(kinds(first.actions, 'removeFinalizer')).toEqual([]);
    expect(condition(first.status, 'Degraded')).toMatchObject({ status: 'False' });
    expect(first.status.failedNodes[0]).toMatchObject({ name: 'a', operation: 'uninstall', attempts: 1 });
    const record = kinds(first.actions, 'writeNode')[0].annotations[KEYS.failure]!;
    const exhausted = run({
      shim: deleting(s),
      nodes: [installed('a', s, {}, {}), node('b')].map(n => n.name === 'a' ? { ...n, annotations: { ...n.annotations, [KEYS.failure]: JSON.stringify({ ...JSON.parse(record), attempt: 2 }) } } : n),
      jobs: [failed(3)],
    });
    expect(condition(exhausted.status, 'Degraded')).toMatchObject({ status: 'True', reason: 'UninstallFailed', message: 'node a: RestartFailedRolledBack: containerd failed after the change' });
    expect(condition(exhausted.status, 'Ready')).toMatchObject({ status: 'False', reason: 'Deleting' });
    expect(exhausted.status.nodesFailed).toBe(1);
    expect(kinds(exhausted.actions, 'removeFinalizer')).toEqual([]);
  });

  test('a node that vanished is not waited for', () => {
    const { actions } = run({ shim: deleting(shim()), nodes: [] });
    expect(actions.map(a => a.kind)).toEqual(['removeFinalizer']);
  });

  test('item 6: Jobs have no owner: the finalizer waits for running uninstalls however the Shim is deleted', () => {
    const s = shim();
    const { actions } = run({ shim: deleting(s), nodes: [installed('a', s)], jobs: [job('a', s, 'running', 'uninstall')] });
    expect(actions.filter(a => a.kind !== 'writeNode')).toEqual([]);
  });
});

describe('I6: failures are handled like an operator would', () => {
  test('item 8: a flaky download is retried with exponential backoff and succeeds', () => {
    const { w, s } = world(['a']);
    w.step('spin');
    w.finish(() => 'fail', { reason: 'DownloadFailed', message: 'connection reset' });
    const afterFailure = w.step('spin');
    expect(afterFailure.requeueAfterSeconds).toBe(10);
    expect(s.status).toMatchObject({ nodesRetrying: 1, nodesFailed: 0 });
    expect(s.status!.failedNodes[0]).toMatchObject({ name: 'a', reason: 'DownloadFailed', attempts: 1, nextAttempt: '2026-11-21T00:00:10.000Z' });
    expect(condition(s.status!, 'Degraded')).toMatchObject({ status: 'False' });
    expect(w.nodes.get('a')!.labels[KEYS.state]).toBe('retrying');
    // not before the backoff
    w.tick(5);
    expect(created(w.step('spin').actions)).toEqual([]);
    w.tick(5);
    const retry = w.step('spin');
    expect(kinds(retry.actions, 'createJob')[0].job.attempt).toBe(2);
    expect(kinds(retry.actions, 'deleteJob')).toHaveLength(1); // the failed attempt's Job, kept until now
    w.finish();
    w.step('spin');
    expect(s.status).toMatchObject({ nodesReady: 1, nodesRetrying: 0 });
    expect(w.nodes.get('a')!.annotations[KEYS.failure]).toBeUndefined();
  });

  test('backoff doubles and is bounded; once failureThreshold is reached, the longest delay (docs/operators/state-model.md)', () => {
    expect([1, 2, 3, 4, 5].map(n => backoffSeconds(POLICY, n))).toEqual([10, 20, 80, 80, 80]);
    expect([1, 2, 3, 4, 5].map(n => backoffSeconds({ ...POLICY, failureThreshold: 5 }, n))).toEqual([10, 20, 40, 80, 80]);
  });

  test('a failed node (failureThreshold reached) is retried every maxRetryBackoff, not at the doubled delay', () => {
    // GIVEN node a failed its third install (the threshold) at NOW - 60 s
    const s = shim();
    const at = new Date(Date.parse(NOW) - 60_000).toISOString();
    const failure = { operation: 'install', handler: 'spin', revision: rev(s), attempt: 3, reason: 'RestartFailedRolledBack', message: 'y', at };
    const n = node('a', { [KEYS.state]: 'failed' }, { [KEYS.failure]: JSON.stringify(failure) });
    // WHEN 60 s have passed (the doubled delay would be 40 s)
    const { actions, status, requeueAfterSeconds } = run({ shim: s, nodes: [n] });
    // THEN it is not retried yet, and its next attempt is at + 80 s (maxSeconds)
    expect(created(actions)).toEqual([]);
    expect(status.failedNodes[0]).toMatchObject({ attempts: 3, nextAttempt: new Date(Date.parse(at) + 80_000).toISOString() });
    expect(requeueAfterSeconds).toBe(20);
    // AND once those have passed it is
    const later = new Date(Date.parse(at) + 80_000).toISOString();
    expect(created(plan({ shim: s, nodes: [n], jobs: [], otherShims: [], runtimeClasses: [], retry: POLICY, now: later }).actions)).toEqual(['a:install:spin']);
  });

  test('a node whose installer never reported (its container could not start) keeps the doubled delay past the threshold', () => {
    // GIVEN node a's third uninstall failed before the installer ran (containerd restarted for another Shim)
    const s = shim();
    const at = new Date(Date.parse(NOW) - 60_000).toISOString();
    const failure = { operation: 'install', handler: 'spin', revision: rev(s), attempt: 3, reason: 'InstallerFailed', message: 'RunContainerError: transport is closing', at };
    const n = node('a', { [KEYS.state]: 'failed' }, { [KEYS.failure]: JSON.stringify(failure) });
    // WHEN 60 s have passed THEN it is retried (the doubled delay, 40 s, not maxSeconds)
    expect(created(run({ shim: s, nodes: [n] }).actions)).toEqual(['a:install:spin']);
    expect(backoffSeconds(POLICY, 3, false)).toBe(40);
  });

  test('a node that keeps failing stops the rollout with Degraded; fixing the cause recovers at the next backoff', () => {
    const { w, s } = world(['a', 'b', 'c'], { rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    let broken = true;
    for (let i = 0; i < 10; i++) {
      w.step('spin');
      w.finish(j => (j.node === 'a' && broken ? 'fail' : 'succeed'));
      w.tick(100);
    }
    expect(condition(s.status!, 'Progressing')).toMatchObject({ status: 'False', reason: 'RolloutStopped' });
    expect(condition(s.status!, 'Degraded')!.message).toMatch(/^node a: ChecksumMismatch: sha256 differs/);
    expect([...w.hosts.get('b')!, ...w.hosts.get('c')!]).toEqual([]); // never attempted
    broken = false;
    settle(w, 'spin', () => 'succeed');
    w.tick(100);
    settle(w);
    expect(s.status).toMatchObject({ nodesReady: 3, nodesFailed: 0 });
  });

  test('the retry annotation retries a failed node at once', () => {
    const s = shim();
    const failure = { operation: 'install', handler: 'spin', revision: rev(s), attempt: 3, reason: 'X', message: 'y', at: NOW };
    const n = node('a', { [KEYS.state]: 'failed' }, { [KEYS.failure]: JSON.stringify(failure) });
    expect(created(run({ shim: s, nodes: [n] }).actions)).toEqual([]);
    const retried = run({ shim: shim({}, { annotations: { [RETRY_ANNOTATION]: '1' } }), nodes: [n] });
    expect(kinds(retried.actions, 'createJob')[0].job).toMatchObject({ node: 'a', attempt: 1 });
  });

  test('NotReady and cordoned nodes are skipped without counting as failures, and picked up when they are back', () => {
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const nodes = [node('a', {}, {}, { ready: false }), node('b', {}, {}, { schedulable: false }), node('c')];
    const { actions, status } = run({ shim: s, nodes });
    expect(created(actions)).toEqual(['c:install:spin']);
    expect(status.nodesFailed).toBe(0);
    expect(condition(status, 'Progressing')!.message).toMatch(/2 node\(s\) not Ready or cordoned \(a, b\)/);
    expect(created(run({ shim: s, nodes: [node('a'), installed('c', s)] }).actions)).toEqual(['a:install:spin']);
  });

  test('install mode NodeAgent: a node is ready for an operation while its agent pod is, and the status says that is what it waits for', () => {
    // GIVEN nodes whose views the controller composed: a without a Ready agent pod, b cordoned, c ready
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const nodes = [node('a', {}, {}, { ready: false }), node('b', {}, {}, { schedulable: false }), node('c')];
    // WHEN the agent-mode pass plans
    const { actions, status } = run({ shim: s, nodes, installMode: 'agent' });
    // THEN only c gets a request, and the others are named as waiting for an agent or cordoned
    expect(created(actions)).toEqual(['c:install:spin']);
    expect(condition(status, 'Progressing')!.message).toMatch(/2 node\(s\) without a Ready node agent pod or cordoned \(a, b\)/);
  });

  test('item 8: a Job that a NotReady node never started frees its slot for a Ready node', () => {
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const stuck = job('a', s, 'running', 'install', { started: false });
    const { actions } = run({ shim: s, nodes: [node('a', {}, {}, { ready: false }), node('b')], jobs: [stuck] });
    expect(kinds(actions, 'deleteJob').map(a => a.name)).toEqual([stuck.name]);
    expect(created(actions)).toEqual(['b:install:spin']);
  });

  test('a Job that started on a node that then went NotReady keeps its slot (it may be restarting containerd)', () => {
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const { actions } = run({ shim: s, nodes: [node('a', {}, {}, { ready: false }), node('b')], jobs: [job('a', s, 'running')] });
    expect(kinds(actions, 'deleteJob')).toEqual([]);
    expect(created(actions)).toEqual([]);
  });

  test('while a retry runs, Progressing says so (not a next attempt time it does not have)', () => {
    // GIVEN node a's first install failed and its second attempt is under way
    const s = shim();
    const failure = { operation: 'install', handler: 'spin', revision: rev(s), attempt: 1, reason: 'DownloadFailed', message: 'y', at: '2026-11-20T23:59:00Z' };
    const a = node('a', { [KEYS.state]: 'retrying' }, { [KEYS.failure]: JSON.stringify(failure) });
    const { status } = run({ shim: s, nodes: [a], jobs: [job('a', s, 'running', 'install', { attempt: 2 })] });
    // THEN the message names the failure and the attempt under way
    expect(condition(status, 'Progressing')!.message).toMatch(/a: attempt 1 failed: DownloadFailed; the next attempt is under way/);
    expect(condition(status, 'Progressing')!.message).not.toMatch(/undefined/);
  });

  test('a node due a retry keeps its slot while it is down: the rollout does not move on past a failure', () => {
    // GIVEN node a failed its first install (its containerd restart failed, so its kubelet went NotReady)
    const s = shim({ rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    const failure = { operation: 'install', handler: 'spin', revision: rev(s), attempt: 1, reason: 'RestartFailedRolledBack', message: 'y', at: '2026-11-20T23:59:00Z' };
    const failed = (extra: Partial<NodeView>) => node('a', { [KEYS.state]: 'retrying' }, { [KEYS.failure]: JSON.stringify(failure) }, extra);
    // WHEN its backoff has passed while it is still NotReady (or cordoned)
    for (const down of [{ ready: false }, { schedulable: false }]) {
      const { actions, status } = run({ shim: s, nodes: [failed(down), node('b')] });
      // THEN no other node is started; a waits, and is reported as retrying
      expect(created(actions)).toEqual([]);
      expect(status).toMatchObject({ nodesRetrying: 1 });
      expect(condition(status, 'Progressing')!.message).toMatch(/not Ready or cordoned \(a\)/);
    }
    // AND a retry Job that the down node never started is dropped, but its slot is kept too
    const retry = job('a', s, 'running', 'install', { attempt: 2, started: false });
    const { actions } = run({ shim: s, nodes: [failed({ ready: false }), node('b')], jobs: [retry] });
    expect(kinds(actions, 'deleteJob').map(a => a.name)).toEqual([retry.name]);
    expect(created(actions)).toEqual([]);
    // AND once it is Ready it is retried first
    expect(kinds(run({ shim: s, nodes: [failed({}), node('b')] }).actions, 'createJob').map(a => `${a.job.node}:${a.job.attempt}`)).toEqual(['a:2']);
  });

  test('a Job that succeeded by the installer\'s report (its pod failed) is recorded and removed by name, not with its batch', () => {
    const s = shim();
    const done = job('a', s, 'succeeded', 'install', { reportedSuccess: true });
    const { actions } = run({ shim: s, nodes: [node('a')], jobs: [done] });
    expect(kinds(actions, 'deleteJob').map(a => a.name)).toEqual([done.name]);
    expect(kinds(actions, 'writeNode')[0].labels).toMatchObject({ [KEYS.state]: 'provisioned' });
  });

  test('a new node joining gets the shim', () => {
    const s = shim();
    expect(created(run({ shim: s, nodes: [installed('a', s), node('new')] }).actions)).toEqual(['new:install:spin']);
  });

  test('failedNodes is bounded', () => {
    const s = shim();
    const nodes = Array.from({ length: 30 }, (_, i) => node(`n${String(i).padStart(2, '0')}`, {}, {
      [KEYS.failure]: JSON.stringify({ operation: 'install', handler: 'spin', revision: rev(s), attempt: 3, reason: 'X', message: 'y', at: NOW }),
    }));
    const { status } = run({ shim: s, nodes });
    expect(status.nodesFailed).toBe(30);
    expect(status.failedNodes).toHaveLength(20);
  });
});

describe('I7: the controller owns only what it created or may adopt', () => {
  const view = (more: object) => ({ name: 'spin', handler: 'spin', annotations: {}, shimOwners: [], foreignOwner: false, ...more });

  test('item 7: an unowned RuntimeClass of the same name is reported, never touched', () => {
    const s = shim();
    const { actions, status } = run({ shim: s, nodes: [installed('a', s)], runtimeClasses: [view({})] });
    expect(kinds(actions, 'applyRuntimeClass')).toEqual([]);
    expect(kinds(actions, 'deleteRuntimeClass')).toEqual([]);
    expect(condition(status, 'Degraded')).toMatchObject({ status: 'True', reason: 'RuntimeClassConflict' });
    expect(kinds(actions, 'event')[0]).toMatchObject({ reason: 'RuntimeClassConflict' });
    const deleting = run({ shim: shim({}, { deletionTimestamp: NOW }), runtimeClasses: [view({})] });
    expect(kinds(deleting.actions, 'deleteRuntimeClass')).toEqual([]);
  });

  test.each([
    ['owned by another Shim', { shimOwners: ['u2'] }],
    ['owned by another operator', { foreignOwner: true, annotations: { [ShimNodeLabels.ADOPT_ANNOTATION]: 'spin' } }],
    ['marked for another Shim', { annotations: { [ShimNodeLabels.ADOPT_ANNOTATION]: 'other' } }],
  ])('a RuntimeClass %s is a conflict', (_what, more) => {
    expect(condition(run({ shim: shim(), runtimeClasses: [view(more)] }).status, 'Degraded')).toMatchObject({ reason: 'RuntimeClassConflict' });
  });

  test('the RuntimeClass the constructs synthesized (marked) is adopted; foreign selector keys are dropped', () => {
    const { actions } = run({ shim: shim(), runtimeClasses: [view({ annotations: { [ShimNodeLabels.ADOPT_ANNOTATION]: 'spin' }, nodeSelector: { [KEYS.handler]: 'spin', extra: 'x' } })] });
    expect(kinds(actions, 'applyRuntimeClass')[0]).toMatchObject({
      replace: false, cleanup: { scheduling: { nodeSelector: { extra: null } } }, object: { metadata: { ownerReferences: [{ uid: 'u1', kind: 'Shim' }] } },
    });
  });

  test('an owned RuntimeClass in shape is left alone; a renamed one is deleted', () => {
    const s = shim();
    const inShape = liveView(s);
    expect(run({ shim: s, runtimeClasses: [inShape] }).actions.map(a => a.kind)).toEqual([]);
    const old = view({ name: 'old-name', shimOwners: ['u1'] });
    expect(kinds(run({ shim: s, runtimeClasses: [inShape, old] }).actions, 'deleteRuntimeClass')).toEqual([{ kind: 'deleteRuntimeClass', name: 'old-name' }]);
  });
});

/** The RuntimeClass as the API server shows it after the controller applied what `s` wants, with `more` changed. */
function liveView(s: ShimObject, more: Partial<RuntimeClassView> = {}): RuntimeClassView {
  const rc = desiredRuntimeClass(s, KEYS);
  return {
    name: rc.metadata.name,
    handler: rc.handler,
    labels: rc.metadata.labels,
    annotations: rc.metadata.annotations,
    shimOwners: [s.metadata.uid],
    foreignOwner: false,
    nodeSelector: rc.scheduling.nodeSelector,
    tolerations: rc.scheduling.tolerations,
    overhead: rc.overhead,
    ...more,
  };
}

describe('the controller writes the RuntimeClass from spec.runtimeClass', () => {
  const TOLERATIONS = [{ key: 'wasm', operator: 'Exists' }];
  const full = shim({
    runtimeClass: {
      name: 'spin',
      handler: 'spin',
      labels: { team: 'wasm' },
      annotations: { 'example.com/owner': 'platform' },
      overhead: { podFixed: { memory: '64Mi' } },
      tolerations: TOLERATIONS as any,
    },
  });

  test('none yet (a new Shim, or one deleted or pruned since): created at once with everything the spec gives', () => {
    // GIVEN a Shim whose RuntimeClass does not exist
    // WHEN the planner runs
    const { actions } = run({ shim: full });
    // THEN it applies the whole RuntimeClass
    const apply = kinds(actions, 'applyRuntimeClass');
    expect(apply).toHaveLength(1);
    expect(apply[0]).toMatchObject({ replace: false });
    expect(apply[0].cleanup).toBeUndefined();
    expect(apply[0].object).toMatchObject({
      metadata: {
        name: 'spin',
        labels: { 'team': 'wasm', 'app.kubernetes.io/managed-by': 'runtime-class-manager' },
        annotations: { 'example.com/owner': 'platform', [ShimNodeLabels.ADOPT_ANNOTATION]: 'spin', [METADATA_DIGEST_ANNOTATION]: expect.stringMatching(/^[0-9a-f]{16}$/) },
        ownerReferences: [{ kind: 'Shim', uid: 'u1', controller: true }],
      },
      handler: 'spin',
      scheduling: { nodeSelector: { [KEYS.handler]: 'spin' }, tolerations: TOLERATIONS },
      overhead: { podFixed: { memory: '64Mi' } },
    });
  });

  test('the spec cannot take over the controller\'s own keys', () => {
    const s = shim({ runtimeClass: { name: 'spin', handler: 'spin', labels: { 'app.kubernetes.io/managed-by': 'me' }, annotations: { [ShimNodeLabels.ADOPT_ANNOTATION]: 'other' } } });
    const rc = desiredRuntimeClass(s, KEYS);
    expect(rc.metadata.labels['app.kubernetes.io/managed-by']).toBe('runtime-class-manager');
    expect(rc.metadata.annotations[ShimNodeLabels.ADOPT_ANNOTATION]).toBe('spin');
  });

  const spec = full.spec.runtimeClass;
  test.each<[string, ShimObject, Partial<RuntimeClassView>, Record<string, unknown> | undefined]>([
    ['a label added to the spec', shim({ runtimeClass: { ...spec, labels: { ...spec.labels, tier: 'gold' } } }), {}, undefined],
    // the live object still has the label (apply removes it once sent again without it)
    ['a label removed from the spec', shim({ runtimeClass: { ...spec, labels: {} } }), {}, undefined],
    ['an annotation changed by someone else', full, { annotations: { ...liveView(full).annotations, 'example.com/owner': 'someone' } }, undefined],
    ['tolerations changed in the spec', shim({ runtimeClass: { ...spec, tolerations: [{ key: 'gpu', operator: 'Exists' }] } }), {}, undefined],
    // an app's manager (the constructs' output before) still holds fields the spec dropped: apply cannot remove them
    ['tolerations another manager holds, which the spec no longer has', shim({ runtimeClass: { ...spec, tolerations: undefined } }), {}, { scheduling: { tolerations: null } }],
    ['an overhead another manager holds, which the spec no longer has', shim({ runtimeClass: { ...spec, overhead: undefined } }), {}, { overhead: null }],
    ['an overhead resource another manager holds', full, { overhead: { podFixed: { memory: '64Mi', cpu: '250m' } } }, { overhead: { podFixed: { cpu: null } } }],
    ['a selector key another manager added', full, { nodeSelector: { [KEYS.handler]: 'spin', extra: 'x' } }, { scheduling: { nodeSelector: { extra: null } } }],
  ])('%s: applied again (cleanup %j)', (_what, wanted, live, cleanup) => {
    // GIVEN the RuntimeClass as the controller last applied it for the full spec, changed as described
    const current = liveView(full, live);
    // WHEN the planner runs for the wanted spec
    const apply = kinds(run({ shim: wanted, runtimeClasses: [current] }).actions, 'applyRuntimeClass');
    // THEN one apply of what the spec wants, in place, with the cleanup that apply cannot do
    expect(apply).toHaveLength(1);
    expect(apply[0].replace).toBe(false);
    expect(apply[0].object).toEqual(desiredRuntimeClass(wanted, KEYS));
    expect(apply[0].cleanup).toEqual(cleanup);
  });

  test('an overhead the API server stored in its canonical form is in shape (not applied again on every pass)', () => {
    // GIVEN a spec whose overhead quantities are written unlike the API server's canonical form
    const s = shim({ runtimeClass: { ...spec, overhead: { podFixed: { cpu: '0.5', memory: '1024Ki' } } } });
    // WHEN the live RuntimeClass shows them canonical (as a real 1.20 API server stores them)
    const live = liveView(s, { overhead: { podFixed: { cpu: '500m', memory: '1Mi' } } });
    // THEN nothing is applied
    expect(kinds(run({ shim: s, runtimeClasses: [live] }).actions, 'applyRuntimeClass')).toEqual([]);
    // AND a quantity that really differs is applied
    expect(kinds(run({ shim: s, runtimeClasses: [liveView(s, { overhead: { podFixed: { cpu: '501m', memory: '1Mi' } } })] }).actions, 'applyRuntimeClass')).toHaveLength(1);
    expect(kinds(run({ shim: s, runtimeClasses: [liveView(s, { overhead: { podFixed: { cpu: '500m' } } })] }).actions, 'applyRuntimeClass')).toHaveLength(1);
  });

  test.each<[string, bigint | undefined]>([
    ['500m', 500_000_000n], ['0.5', 500_000_000n], ['.5', 500_000_000n], ['5e-1', 500_000_000n], ['1', 1_000_000_000n],
    ['1Mi', 1_048_576_000_000_000n], ['1024Ki', 1_048_576_000_000_000n], ['1M', 1_000_000_000_000_000n], ['1E3', 1_000_000_000_000n],
    ['1n', 1n], ['0.1n', 1n], ['-2', -2_000_000_000n], ['', undefined], ['m', undefined], ['1Mb', undefined], ['abc', undefined],
  ])('the quantity %p is %p nano-units', (text, nanos) => {
    expect(quantityNanos(text)).toBe(nanos);
  });

  test('a label someone else added stays (only the keys the spec gives are the controller\'s)', () => {
    const current = liveView(full, { labels: { ...liveView(full).labels, 'argocd.argoproj.io/instance': 'apps' } });
    expect(kinds(run({ shim: full, runtimeClasses: [current] }).actions, 'applyRuntimeClass')).toEqual([]);
  });

  test('a RuntimeClass from an older controller (no digest) is applied once, then left alone', () => {
    const { [METADATA_DIGEST_ANNOTATION]: _, ...older } = liveView(full).annotations;
    expect(kinds(run({ shim: full, runtimeClasses: [liveView(full, { annotations: older })] }).actions, 'applyRuntimeClass')).toHaveLength(1);
    expect(kinds(run({ shim: full, runtimeClasses: [liveView(full)] }).actions, 'applyRuntimeClass')).toEqual([]);
  });

  test('a new handler replaces the RuntimeClass (the handler is immutable), with nothing to clean up', () => {
    const next = shim({ runtimeClass: { ...spec, handler: 'spin2', overhead: undefined } });
    const apply = kinds(run({ shim: next, runtimeClasses: [liveView(full)] }).actions, 'applyRuntimeClass');
    expect(apply).toHaveLength(1);
    expect(apply[0]).toMatchObject({ replace: true, object: { handler: 'spin2', scheduling: { nodeSelector: { [KEYS.handler]: 'spin2' } } } });
    expect(apply[0].cleanup).toBeUndefined();
  });
});

describe('revisions', () => {
  test('a new artifact re-rolls over recorded nodes, which keep serving meanwhile', () => {
    const old = shim();
    const changed = shim({ fetchStrategy: { type: 'anonymousHttp', anonHttp: { location: 'https://e.com/spin-2.tgz' } }, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 1 } } });
    expect(rev(changed)).not.toBe(rev(old));
    const { actions, status } = run({ shim: changed, nodes: [installed('a', old), installed('b', old)] });
    expect(kinds(actions, 'createJob').map(a => a.job)).toEqual([expect.objectContaining({ node: 'a', operation: 'install', revision: rev(changed), artifact: { location: 'https://e.com/spin-2.tgz', sha256: undefined } })]);
    expect(kinds(actions, 'writeNode')).toEqual([]);
    expect(status.nodesReady).toBe(0);
  });

  test.each([
    ['sha256', { fetchStrategy: { type: 'anonymousHttp' as const, anonHttp: { location: 'https://e.com/spin.tgz', sha256: 'a'.repeat(64) } } }],
    ['handler', { runtimeClass: { name: 'spin', handler: 'spin2' } }],
    ['runtime options', { containerdRuntimeOptions: { SystemdCgroup: 'true' } }],
    ['runtime options alias', { runtimeOptions: { SystemdCgroup: 'true' } }],
    ['payload', { payload: { shim: 'bin/containerd-shim-runc-v2' } }],
    ['payload runtime type', { payload: { shim: 'bin/containerd-shim-runc-v2', runtimeType: 'io.containerd.runc.v2' } }],
    ['handler fields', { containerdRuntime: { privilegedWithoutHostDevices: true } }],
    ['image', { fetchStrategy: { image: { reference: 'r.io/gvisor@sha256:' + 'c'.repeat(64), path: '/payload.tgz' } } }],
  ])('a change of %s is a new revision', (_what, spec) => {
    expect(revisionOf(shim(spec).spec)).not.toBe(revisionOf(shim().spec));
  });

  test('fields added later leave the revision of a Shim that does not use them as it was', () => {
    // GIVEN the revision an earlier controller computed for a plain Shim (pinned: a change here reinstalls every node on upgrade)
    expect(revisionOf(shim().spec)).toBe(revisionOf(shim({ payload: undefined, containerdRuntime: undefined }).spec));
    expect(revisionOf(shim().spec)).toMatchSnapshot();
  });

  test('handler fields in another order are the same revision', () => {
    const a = shim({ containerdRuntime: { podAnnotations: ['a/*'], snapshotter: 'native' } });
    const b = shim({ containerdRuntime: { snapshotter: 'native', podAnnotations: ['a/*'] } });
    expect(revisionOf(a.spec)).toBe(revisionOf(b.spec));
  });

  test('a change of nodeSelector, rollout or restart mode is not', () => {
    const other = shim({ nodeSelector: { a: 'b' }, rolloutStrategy: { type: 'rolling', rolling: { maxUpdate: 2 } }, restart: { mode: 'none' } });
    expect(revisionOf(other.spec)).toBe(revisionOf(shim().spec));
  });
});

describe('per-platform artifacts and validity', () => {
  const platforms = { type: 'anonymousHttp' as const, anonHttp: { platforms: [{ os: 'linux', arch: 'arm64', location: 'https://e.com/arm.tgz', sha256: 'b'.repeat(64) }] } };

  test.each([
    ['upstream shape: platforms beside anonHttp, x86_64 for amd64', { platforms: [{ os: 'linux', arch: 'x86_64', location: 'https://e.com/x86.tgz' }] }, 'https://e.com/x86.tgz'],
    ['upstream shape: aarch64 does not match an amd64 node, anonHttp is the fallback',
      { anonHttp: { location: 'https://e.com/any.tgz' }, platforms: [{ os: 'linux', arch: 'aarch64', location: 'https://e.com/arm.tgz' }] }, 'https://e.com/any.tgz'],
    ['upstream shape: platforms win over anonHttp', { anonHttp: { location: 'https://e.com/any.tgz' }, platforms: [{ os: 'linux', arch: 'amd64', location: 'https://e.com/amd.tgz' }] }, 'https://e.com/amd.tgz'],
    ['upstream shape without type', { anonHttp: { location: 'https://e.com/any.tgz' } }, 'https://e.com/any.tgz'],
    ['nested form treated alike', { anonHttp: { platforms: [{ os: 'linux', arch: 'x86_64', location: 'https://e.com/nested.tgz' }] } }, 'https://e.com/nested.tgz'],
  ])('%s', (_what, fetchStrategy, location) => {
    const { actions } = run({ shim: shim({ fetchStrategy }), nodes: [node('amd')] });
    expect(kinds(actions, 'createJob')[0].job.artifact?.location).toBe(location);
  });

  test('an alias is the same revision as the name nodes use', () => {
    const entry = { os: 'linux', location: 'https://e.com/x.tgz' };
    expect(revisionOf(shim({ fetchStrategy: { platforms: [{ ...entry, arch: 'x86_64' }] } }).spec))
      .toBe(revisionOf(shim({ fetchStrategy: { platforms: [{ ...entry, arch: 'amd64' }] } }).spec));
  });

  test('an artifact in an image goes to every node with its pull secrets, whatever the platform', () => {
    const image = { reference: 'r.io/gvisor@sha256:' + 'c'.repeat(64), path: '/payload.tgz', sha256: 'd'.repeat(64), imagePullSecrets: [{ name: 'regcred' }] };
    const { actions } = run({ shim: shim({ fetchStrategy: { image } }), nodes: [node('arm', { 'kubernetes.io/arch': 'arm64' })] });
    expect(kinds(actions, 'createJob')[0].job.artifact).toEqual({ image: { reference: image.reference, path: '/payload.tgz', pullSecrets: ['regcred'] }, sha256: 'd'.repeat(64) });
  });

  test('each node gets its platform artifact', () => {
    const { actions } = run({ shim: shim({ fetchStrategy: platforms }), nodes: [node('arm', { 'kubernetes.io/arch': 'arm64' })] });
    expect(kinds(actions, 'createJob')[0].job.artifact).toEqual({ location: 'https://e.com/arm.tgz', sha256: 'b'.repeat(64) });
  });

  test.each<[string, NodeView[], RegExp]>([
    ['a node without os and arch labels first (linux/amd64)', [{ ...node('bare'), labels: {} }, node('arm', { 'kubernetes.io/arch': 'arm64' })], /no artifact for platform linux\/amd64 of node bare/],
    ['one node of another platform after many of one', [...['a1', 'a2', 'a3'].map(n => node(n, { 'kubernetes.io/arch': 'arm64' })), node('x86')], /no artifact for platform linux\/amd64 of node x86/],
  ])('platforms are checked per platform, for every node: %s', (_what, nodes, message) => {
    const { actions, status } = run({ shim: shim({ fetchStrategy: { platforms: [{ os: 'linux', arch: 'arm64', location: 'https://e.com/arm.tgz' }] } }), nodes });
    expect(kinds(actions, 'createJob')).toEqual([]);
    expect(condition(status, 'Degraded')).toMatchObject({ status: 'True', reason: 'InvalidShim', message: expect.stringMatching(message) });
  });

  test.each([
    ['no artifact for a node platform', shim({ fetchStrategy: platforms }), [], /no artifact for platform linux\/amd64 of node x/],
    ['a handler claimed by an older Shim', shim(), [shim({}, { name: 'older', creationTimestamp: '2025-01-01T00:00:00Z' })], /handler "spin" is already claimed by Shim "older"/],
    ['a RuntimeClass claimed by an older Shim', shim(), [shim({ runtimeClass: { name: 'spin', handler: 'other' } }, { name: 'older', creationTimestamp: '2025-01-01T00:00:00Z' })], /RuntimeClass "spin" is already claimed/],
    ['a bad handler', shim({ runtimeClass: { name: 'spin', handler: 'Bad_Handler' } }), [], /handler "Bad_Handler" is not a DNS label/],
    ['an image and HTTP locations at once', shim({ fetchStrategy: { anonHttp: { location: 'https://e.com/a.tgz' }, image: { reference: 'r.io/x:1', path: '/x.tgz' } } }), [],
      /give either image or anonHttp\/platforms, not both/],
    ['an option value with a newline', shim({ containerdRuntimeOptions: { BinaryName: '/a\nSystemdCgroup=true' } }), [], /runtime option "BinaryName" holds a control character/],
    ['an option key the installer refuses', shim({ containerdRuntimeOptions: { 'a.b': 'x' } }), [], /runtime option key "a.b" may only hold letters, digits and '_'/],
    ['${PAYLOAD} without a payload', shim({ containerdRuntimeOptions: { BinaryName: '${PAYLOAD}/runsc' } }), [], /refers to \$\{PAYLOAD\}, but the Shim has no payload/],
    ['a RuntimeClass label key the API server refuses', shim({ runtimeClass: { name: 'spin', handler: 'spin', labels: { 'team name': 'x' } } }), [],
      /^runtimeClass.labels: key "team name": the name "team name" must be/],
    ['a RuntimeClass label value the API server refuses', shim({ runtimeClass: { name: 'spin', handler: 'spin', labels: { team: 'a b' } } }), [],
      /^runtimeClass.labels: the value "a b" of "team"/],
    ['a RuntimeClass annotation key the API server refuses', shim({ runtimeClass: { name: 'spin', handler: 'spin', annotations: { 'Example.com/x': 'y' } } }), [],
      /^runtimeClass.annotations: key "Example.com\/x": the prefix "Example.com" is not a DNS subdomain/],
  ])('%s: a condition and an event, nothing done', (_what, s, otherShims, message) => {
    const { actions, status } = run({ shim: s, nodes: [node('x')], otherShims });
    expect(kinds(actions, 'createJob')).toEqual([]);
    expect(kinds(actions, 'applyRuntimeClass')).toEqual([]);
    expect(kinds(actions, 'event')[0].message).toMatch(message);
    expect(condition(status, 'Degraded')).toMatchObject({ status: 'True', reason: 'InvalidShim', message: expect.stringMatching(message) });
  });

  test('install mode NodeAgent: an artifact in an image is invalid at once (no request on any node); in install mode Jobs it is installed', () => {
    // GIVEN a Shim whose artifact is in an image, and a node already serving another revision of it
    const image = { reference: 'r.io/x@sha256:' + 'd'.repeat(64), path: '/payload.tgz', sha256: 'd'.repeat(64) };
    const s = shim({ fetchStrategy: { image } });
    const nodes = [installed('x', shim()), node('y')];
    // WHEN the controller runs in install mode NodeAgent
    const { actions, status } = run({ shim: s, nodes, installMode: 'agent' });
    // THEN nothing is admitted, nothing taken away, and the Shim says why and what to do
    expect(kinds(actions, 'createJob')).toEqual([]);
    expect(kinds(actions, 'writeNode')).toEqual([]);
    const message = /^fetchStrategy.image: ImageArtifactNeedsJobs: install mode NodeAgent fetches artifacts over HTTP\(S\) only .*use install mode Jobs/;
    expect(kinds(actions, 'event')[0]).toMatchObject({ type: 'Warning', reason: 'InvalidShim', message: expect.stringMatching(message) });
    expect(condition(status, 'Degraded')).toMatchObject({ status: 'True', reason: 'InvalidShim', message: expect.stringMatching(message) });
    // AND in install mode Jobs (the default) the same Shim is installed
    expect(created(run({ shim: s, nodes: [node('y')], installMode: 'jobs' }).actions)).toEqual(['y:install:spin']);
    expect(created(run({ shim: s, nodes: [node('y')] }).actions)).toEqual(['y:install:spin']);
  });

  test('an invalid Shim leaves its nodes serving (no gate is taken away by a typo)', () => {
    const s = shim();
    const typo = shim({ runtimeClass: { name: 'spin', handler: 'Bad_Handler' } });
    const { actions } = run({ shim: typo, nodes: [installed('x', s)] });
    expect(kinds(actions, 'writeNode')).toEqual([]);
  });

  test('the younger Shim of a conflict is the invalid one', () => {
    const younger = shim({}, { name: 'younger', creationTimestamp: '2027-01-01T00:00:00Z' });
    expect(kinds(run({ shim: shim(), nodes: [node('x')], otherShims: [younger] }).actions, 'createJob')).toHaveLength(1);
  });

  test('a handler another Shim recorded on a node is not installed over', () => {
    const other = { [recordKeys('other').installed]: JSON.stringify([{ handler: 'spin', revision: 'r' }]) };
    const { actions, status } = run({ shim: shim(), nodes: [node('x', {}, other), node('y')] });
    expect(created(actions)).toEqual(['y:install:spin']);
    expect(condition(status, 'Progressing')!.message).toMatch(/1 node\(s\) wait for another Shim/);
  });
});

describe('bookkeeping', () => {
  test('results are reported as one Event per kind and pass, counting the nodes', () => {
    const s = shim();
    const nodes = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map(n => node(n));
    const jobs = nodes.map(n => job(n.name, s, n.name === 'g' ? 'failed' : 'succeeded', 'install', n.name === 'g' ? { result: { reason: 'X', message: 'y' } } : {}));
    const events = kinds(run({ shim: s, nodes, jobs }).actions, 'event');
    expect(events).toEqual([
      { kind: 'event', type: 'Normal', reason: 'Installed', message: `installed spin (revision ${rev(s)}) on 6 nodes: a, b, c, d, e and 1 more`, count: 6 },
      { kind: 'event', type: 'Warning', reason: 'InstallFailed', message: 'node g (attempt 1): X: y', count: 1 },
    ]);
  });

  test('a success already recorded (its Job not yet gone from the cache) is not reported again', () => {
    const s = shim();
    expect(kinds(run({ shim: s, nodes: [installed('a', s)], jobs: [job('a', s, 'succeeded')] }).actions, 'event')).toEqual([]);
  });

  test('adds its finalizer first', () => {
    expect(run({ shim: shim({}, { finalizers: [] }) }).actions[0]).toEqual({ kind: 'addFinalizer' });
  });

  test('keeps transition times while the status stays', () => {
    const s = shim();
    const first = run({ shim: s, nodes: [installed('a', s)] });
    const later = plan({ shim: { ...s, status: first.status }, nodes: [installed('a', s)], jobs: [], otherShims: [], runtimeClasses: [], retry: POLICY, now: '2030-01-01T00:00:00Z' });
    expect(later.status.conditions.map(c => c.lastTransitionTime)).toEqual([NOW, NOW, NOW]);
  });

  test('a Shim whose name cannot form a label does nothing but say so, and lets go when deleted', () => {
    const bad = shim({}, { name: 'Bad_Name' });
    expect(run({ shim: bad }).actions).toEqual([expect.objectContaining({ kind: 'event', reason: 'InvalidShim' })]);
    expect(run({ shim: { ...bad, metadata: { ...bad.metadata, deletionTimestamp: NOW } } }).actions).toEqual([{ kind: 'removeFinalizer' }]);
  });

  test('job names are deterministic, distinct per attempt and at most 63 characters', () => {
    const long = 'x'.repeat(200);
    expect(jobName(long, 'node', 'install', 'h', 'r1', 1).length).toBeLessThanOrEqual(63);
    expect(jobName('spin', 'a', 'install', 'h', 'r1', 1)).toBe(jobName('spin', 'a', 'install', 'h', 'r1', 1));
    expect(new Set([
      jobName('spin', 'a', 'install', 'h', 'r1', 1), jobName('spin', 'b', 'install', 'h', 'r1', 1), jobName('spin', 'a', 'uninstall', 'h', 'r1', 1),
      jobName('spin', 'a', 'install', 'h', 'r2', 1), jobName('spin', 'a', 'install', 'h', 'r1', 2), jobName('spin', 'a', 'install', 'h2', 'r1', 1),
    ]).size).toBe(6);
    expect(jobName('a.b-', 'n', 'install', 'h', 'r', 1)).toMatch(/^rcm-a-b-i-[0-9a-f]{12}$/);
  });

  test('a failed Job is recorded once: seen again, it raises no second event and keeps its attempt', () => {
    const s = shim();
    const failed = job('a', s, 'failed', 'install', { result: { reason: 'X', message: 'y' } });
    const first = run({ shim: s, nodes: [node('a')], jobs: [failed] });
    expect(kinds(first.actions, 'event').map(e => e.reason)).toEqual(['InstallFailed']);
    const write = kinds(first.actions, 'writeNode')[0];
    const recorded = node('a', write.labels as Record<string, string>, write.annotations as Record<string, string>);
    const again = run({ shim: s, nodes: [recorded], jobs: [failed] });
    expect(kinds(again.actions, 'event')).toEqual([]);
    expect(kinds(again.actions, 'writeNode')).toEqual([]);
  });
});

describe('a node that reports its runtime handlers (status.runtimeHandlers, Kubernetes 1.30+ with containerd 2.0+)', () => {
  const s = shim();
  const later = (ms: number) => new Date(Date.parse(NOW) + ms).toISOString();
  const gate = (actions: Action[]) => kinds(actions, 'writeNode').map(a => a.labels[KEYS.handler]);

  test.each([
    ['does not report the field (Kubernetes 1.20, containerd 1.x): the installer\'s check alone puts the gate up', undefined, 0, 'spin'],
    ['lists the handler: the gate goes up', ['', 'runc', 'spin'], 0, 'spin'],
  ])('a node that %s', (_what, runtimeHandlers, _wait, expected) => {
    // GIVEN an install that succeeded on the node
    const n = node('n1', {}, {}, runtimeHandlers ? { runtimeHandlers } : {});
    // WHEN the planner records it
    const { actions } = run({ shim: s, nodes: [n], jobs: [job('n1', s, 'succeeded')] });
    // THEN the gate goes up
    expect(gate(actions)).toEqual([expected]);
  });

  test('does not list the handler yet: the install holds its slot, no gate, and the planner looks again when the wait ends', () => {
    // GIVEN an install that succeeded, on a node whose kubelet lists only the runtime's own handlers
    const n = node('n1', {}, {}, { runtimeHandlers: ['', 'runc'] });
    const done = job('n1', s, 'succeeded');
    // WHEN the planner runs at once
    const { actions, requeueAfterSeconds, status } = run({ shim: s, nodes: [n], jobs: [done] });
    // THEN nothing is recorded or gated, the Job is kept, and the planner is due again at the wait's end
    expect(gate(actions)).toEqual([]);
    expect(kinds(actions, 'deleteSucceededJobs')).toEqual([]);
    expect(status.nodesReady).toBe(0);
    expect(requeueAfterSeconds).toBe(KUBELET_REPORT_WAIT_MS / 1000);
    // AND once the kubelet lists it, the gate goes up
    const listed = run({ shim: s, nodes: [{ ...n, runtimeHandlers: ['', 'runc', 'spin'] }], jobs: [done], now: later(5_000) });
    expect(gate(listed.actions)).toEqual(['spin']);
  });

  test('never lists the handler: the install failed, with a reason that says what the kubelet lists, and is retried', () => {
    const n = node('n1', {}, {}, { runtimeHandlers: ['', 'runc'] });
    // WHEN the wait is over
    const { actions, status } = run({ shim: s, nodes: [n], jobs: [job('n1', s, 'succeeded')], now: later(KUBELET_REPORT_WAIT_MS) });
    // THEN no gate, and the node's record holds the failure with its reason
    expect(gate(actions).filter(Boolean)).toEqual([]);
    const write = kinds(actions, 'writeNode')[0];
    const failure = JSON.parse(write.annotations[KEYS.failure] ?? 'null');
    expect(failure).toMatchObject({ reason: HANDLER_NOT_REPORTED, message: expect.stringMatching(/did not list it in status.runtimeHandlers .* \(default\), runc/) });
    // AND the node is retried (Degraded only once the threshold of attempts is reached)
    expect(status.failedNodes[0]).toMatchObject({ name: 'n1', operation: 'install', reason: HANDLER_NOT_REPORTED, attempts: 1 });
    expect(status).toMatchObject({ nodesRetrying: 1, nodesReady: 0 });
  });
});

describe('install mode NodeAgent: the agent writes the record of a success with its outcome', () => {
  /** The node after a merge patch of its labels and annotations. */
  const patched = (n: NodeView, patch: { labels: Record<string, string | null>; annotations: Record<string, string | null> }): NodeView => {
    const merge = (into: Record<string, string>, p: Record<string, string | null>) => {
      const out = { ...into };
      for (const [k, v] of Object.entries(p)) if (v === null) delete out[k]; else out[k] = v;
      return out;
    };
    return { ...n, labels: merge(n.labels, patch.labels), annotations: merge(n.annotations, patch.annotations) };
  };
  /** A node as the agent-mode views show it: no boot ID. */
  const agentNode = (name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}) =>
    node(name, labels, annotations, { bootID: undefined });
  const agentInstalled = (name: string, s: ShimObject, revision = rev(s)) => agentNode(name,
    { [KEYS.handler]: s.spec.runtimeClass.handler, [KEYS.state]: 'provisioned' },
    { [KEYS.installed]: JSON.stringify([{ handler: s.spec.runtimeClass.handler, revision }]) });
  const failure = (s: ShimObject, attempt: number) => JSON.stringify({ operation: 'install', handler: 'spin', revision: rev(s), attempt, reason: 'DownloadFailed', message: 'x', at: '2026-01-01T00:00:00Z' });

  test.each<[string, ShimObject, NodeView, string]>([
    ['a first install', shim(), agentNode('a'), 'a:install:spin'],
    ['an upgrade (the gate stays while it runs)', shim({ runtimeOptions: { x: '1' } }), agentInstalled('a', shim()), 'a:install:spin'],
    ['a retry after a failure (the success ends it)', shim(), agentNode('a', { [KEYS.state]: 'retrying' }, { [KEYS.failure]: failure(shim(), 1) }), 'a:install:spin'],
    ['an uninstall of a deselected node (gate gone first)', shim({ nodeSelector: { pool: 'wasm' } }), agentInstalled('a', shim({ nodeSelector: { pool: 'wasm' } })), 'a:uninstall:spin'],
    ['an uninstall of a Shim being deleted', shim({}, { deletionTimestamp: NOW }), agentInstalled('a', shim()), 'a:uninstall:spin'],
  ])('%s: the request carries the record the controller would write on its success, and then writes nothing', (_what, s, start, expected) => {
    // GIVEN a node, as the agent-mode pass leaves it (the gate of a node that stops serving goes first)
    let n = start;
    let first = run({ shim: s, nodes: [n], installMode: 'agent' });
    const gateFirst = kinds(first.actions, 'writeNode')[0];
    if (gateFirst) {
      n = patched(n, gateFirst);
      first = run({ shim: s, nodes: [n], installMode: 'agent' });
    }
    // WHEN a request is admitted
    const [admit] = kinds(first.actions, 'createJob');
    expect(`${admit.job.node}:${admit.job.operation}:${admit.job.handler}`).toBe(expected);
    const record = admit.job.recordOnSuccess!;
    // THEN it names every key of the Shim's record on the node, and nothing else
    expect(Object.keys(record.labels).sort()).toEqual([KEYS.handler, KEYS.state].sort());
    expect(Object.keys(record.annotations).sort()).toEqual([KEYS.failure, KEYS.installed].sort());
    // AND once the agent wrote it with its success, the next pass finds the record as it would
    // have written it: no node write, one Installed (Uninstalled) event, and the node counted
    const more = { name: admit.job.name, revision: admit.job.revision, attempt: admit.job.attempt };
    const done: JobView = { ...job('a', s, 'succeeded', admit.job.operation, more), recordedByAgent: true };
    const after = run({ shim: s, nodes: [patched(n, record)], jobs: [done], installMode: 'agent' });
    expect(kinds(after.actions, 'writeNode')).toEqual([]);
    expect(kinds(after.actions, 'event').map(e => e.reason)).toEqual([admit.job.operation === 'install' ? 'Installed' : 'Uninstalled']);
    expect(kinds(after.actions, 'createJob')).toEqual([]);
    if (admit.job.operation === 'install') {
      expect(after.status.nodesReady).toBe(1);
      expect(patched(n, record).labels[KEYS.handler]).toBe('spin');
    } else {
      expect(patched(n, record).labels[KEYS.handler]).toBeUndefined();
      expect(readRecord(patched(n, record), KEYS)).toEqual({ installed: [] });
    }
    // AND a success an earlier controller announced is not announced again (a restart)
    expect(kinds(run({ shim: s, nodes: [patched(n, record)], jobs: [{ ...done, announced: true }], installMode: 'agent' }).actions, 'event')).toEqual([]);
  });

  test('a success is announced once, and leaves the view at once, while others of its batch still run', () => {
    // GIVEN two nodes admitted in one batch (recreate)
    const s = shim({ rolloutStrategy: { type: 'recreate' } });
    const admitted = kinds(run({ shim: s, nodes: [agentNode('a'), agentNode('b')], installMode: 'agent' }).actions, 'createJob');
    expect(admitted.map(a => a.job.node)).toEqual(['a', 'b']);
    const [onA, onB] = admitted.map(a => a.job);
    // WHEN a's agent wrote its success with the record, and b's request still runs
    const doneA: JobView = { ...job('a', s, 'succeeded', 'install', { name: onA.name, batch: onA.batch }), recordedByAgent: true };
    const runningB = job('b', s, 'running', 'install', { name: onB.name, batch: onB.batch });
    const nodes = [patched(agentNode('a'), onA.recordOnSuccess!), agentNode('b')];
    const { actions } = run({ shim: s, nodes, jobs: [doneA, runningB], installMode: 'agent' });
    // THEN a's success is announced, and its request goes by name (not with its batch, which is open)
    expect(kinds(actions, 'event').map(e => `${e.reason} ${e.count}`)).toEqual(['Installed 1']);
    expect(kinds(actions, 'deleteJob').map(d => d.name)).toEqual([onA.name]);
    expect(kinds(actions, 'deleteSucceededJobs')).toEqual([]);
    expect(kinds(actions, 'writeNode')).toEqual([]);
  });

  test('a success the agent did not record (an older agent) is recorded by the controller, as before', () => {
    const s = shim();
    const [admit] = kinds(run({ shim: s, nodes: [agentNode('a')], installMode: 'agent' }).actions, 'createJob');
    const done = job('a', s, 'succeeded', 'install', { name: admit.job.name });
    const { actions } = run({ shim: s, nodes: [agentNode('a')], jobs: [done], installMode: 'agent' });
    expect(kinds(actions, 'writeNode')).toEqual([{ kind: 'writeNode', node: 'a', ...admit.job.recordOnSuccess }].map(w => ({
      ...w, labels: { [KEYS.handler]: 'spin', [KEYS.state]: 'provisioned' }, annotations: { [KEYS.installed]: expect.any(String) },
    })));
    expect(kinds(actions, 'event').map(e => e.reason)).toEqual(['Installed']);
  });

  test('a record that no longer fits when the success arrives (the Shim was deleted meanwhile) is corrected by the controller: the gate goes', () => {
    // GIVEN a request admitted while the Shim served, and the agent's record of its success
    const s = shim();
    const [admit] = kinds(run({ shim: s, nodes: [agentNode('a')], installMode: 'agent' }).actions, 'createJob');
    const n = patched(agentNode('a'), admit.job.recordOnSuccess!);
    // WHEN the Shim is being deleted by the time the success is seen
    const deleting = shim({}, { deletionTimestamp: NOW });
    const done: JobView = { ...job('a', s, 'succeeded', 'install', { name: admit.job.name }), recordedByAgent: true };
    const { actions } = run({ shim: deleting, nodes: [n], jobs: [done], installMode: 'agent' });
    // THEN the controller takes the gate away (the handler was installed: I1 held meanwhile)
    expect(kinds(actions, 'writeNode')[0]).toMatchObject({ labels: { [KEYS.handler]: null, [KEYS.state]: 'uninstalling' } });
  });

  test('a success the agent recorded is not folded in again: a gate a drift check took away since stays away (a controller just started)', () => {
    // GIVEN a request the agent carried out and recorded with its outcome
    const s = shim();
    const [admit] = kinds(run({ shim: s, nodes: [agentNode('a')], installMode: 'agent' }).actions, 'createJob');
    const recorded = patched(agentNode('a'), admit.job.recordOnSuccess!);
    expect(recorded.labels[KEYS.handler]).toBe('spin');
    // AND since then the agent's drift check took the gate, the state and the handler's entry away
    const drifted = patched(recorded, { labels: { [KEYS.handler]: null, [KEYS.state]: null }, annotations: { [KEYS.installed]: null } });
    // WHEN a controller that has just started still sees the old request with its recorded success
    const done: JobView = { ...job('a', s, 'succeeded', 'install', { name: admit.job.name }), recordedByAgent: true, announced: true };
    const { actions } = run({ shim: s, nodes: [drifted], jobs: [done], installMode: 'agent' });
    // THEN it writes no gate back (I1: the handler is not verified with what changed on the node)
    expect(kinds(actions, 'writeNode').filter(w => w.labels?.[KEYS.handler] !== undefined && w.labels[KEYS.handler] !== null)).toEqual([]);
    // AND it withdraws the old request and admits the install again
    expect(kinds(actions, 'deleteJob').map(d => d.name)).toEqual([admit.job.name]);
    expect(created(actions)).toEqual(['a:install:spin']);
  });

  test('install mode Jobs: a Job carries no record (the controller writes it on the Job\'s success)', () => {
    const [admit] = kinds(run({ shim: shim(), nodes: [node('a')] }).actions, 'createJob');
    expect(admit.job.recordOnSuccess).toBeUndefined();
  });
});
