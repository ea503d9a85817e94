import { AgentNodeViews } from '../../src/runtime/agent-node-views';
import { AgentPod, NodeMetadata } from '../../src/runtime/slim';
import { NodeView } from '../../src/runtime/types';

// Install mode NodeAgent: the planner's view of a node, composed from the Node's metadata, its
// agent pod (readiness) and the cordoned Nodes. Every change that alters a view is reported
// with the view before and after (the controller then decides which Shims to reconcile).

const meta = (name: string, labels: Record<string, string> = {}): NodeMetadata => ({ name, labels, annotations: {} });
const pod = (name: string, node: string, ready = true): AgentPod => ({ name, node, ready });

function bed(): { views: AgentNodeViews; changes: [NodeView | undefined, NodeView | undefined][] } {
  const changes: [NodeView | undefined, NodeView | undefined][] = [];
  return { views: new AgentNodeViews((before, after) => changes.push([before, after])), changes };
}

type Step = (v: AgentNodeViews) => void;

describe('a node is ready while a Ready agent pod runs on it, and schedulable unless cordoned', () => {
  test.each<[string, Step[], Pick<NodeView, 'ready' | 'schedulable'> | undefined]>([
    ['a node without an agent pod: not ready (nobody to carry out a request)', [v => v.putNode(meta('n1'))], { ready: false, schedulable: true }],
    ['its agent pod Ready', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1'))], { ready: true, schedulable: true }],
    ['the agent pod arrived before the node', [v => v.putAgent(pod('a1', 'n1')), v => v.putNode(meta('n1'))], { ready: true, schedulable: true }],
    ['its agent pod not Ready (starting, or its node stopped reporting)', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1', false))], { ready: false, schedulable: true }],
    ['its agent pod Ready, then not', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1')), v => v.putAgent(pod('a1', 'n1', false))], { ready: false, schedulable: true }],
    ['its agent pod deleted', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1')), v => v.removeAgent('a1')], { ready: false, schedulable: true }],
    ['a rolling update: the new pod Ready before the old one goes', [
      v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1')), v => v.putAgent(pod('a2', 'n1')), v => v.removeAgent('a1'),
    ], { ready: true, schedulable: true }],
    ['another node\'s agent pod', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a2', 'n2'))], { ready: false, schedulable: true }],
    ['a pod not bound yet', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', ''))], { ready: false, schedulable: true }],
    ['cordoned', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1')), v => v.setCordoned('n1', true)], { ready: true, schedulable: false }],
    ['cordoned, then not', [v => v.putNode(meta('n1')), v => v.setCordoned('n1', true), v => v.setCordoned('n1', false)], { ready: false, schedulable: true }],
    ['the node deleted', [v => v.putNode(meta('n1')), v => v.putAgent(pod('a1', 'n1')), v => v.removeNode('n1')], undefined],
  ])('%s', (_what, steps, expected) => {
    // GIVEN the steps, in order
    const { views } = bed();
    for (const step of steps) step(views);
    // THEN the node's view says so
    const view = views.get('n1');
    if (expected === undefined) expect(view).toBeUndefined();
    else expect(view).toMatchObject({ name: 'n1', ...expected });
  });
});

test('each change of a view is reported with the view before and after; facts about unknown nodes are kept, not reported', () => {
  // GIVEN views with one node
  const { views, changes } = bed();
  views.putAgent(pod('a1', 'n1'));
  views.setCordoned('n1', true);
  expect(changes).toEqual([]);
  // WHEN the node arrives, its labels change, it is uncordoned, and it goes
  views.putNode(meta('n1'));
  views.putNode(meta('n1', { pool: 'wasm' }));
  views.setCordoned('n1', false);
  views.setCordoned('n1', false); // no change
  views.removeNode('n1');
  // THEN each change came with before and after
  const facts = (v: NodeView | undefined) => v && { ready: v.ready, schedulable: v.schedulable, labels: v.labels };
  expect(changes.map(([b, a]) => [facts(b), facts(a)])).toEqual([
    [undefined, { ready: true, schedulable: false, labels: {} }],
    [{ ready: true, schedulable: false, labels: {} }, { ready: true, schedulable: false, labels: { pool: 'wasm' } }],
    [{ ready: true, schedulable: false, labels: { pool: 'wasm' } }, { ready: true, schedulable: true, labels: { pool: 'wasm' } }],
    [{ ready: true, schedulable: true, labels: { pool: 'wasm' } }, undefined],
  ]);
  expect(views.size).toBe(0);
});

test('a pod that moves to another node (a name reused) makes the first node not ready and the second ready', () => {
  // GIVEN two nodes, the agent pod a1 on n1
  const { views } = bed();
  views.putNode(meta('n1'));
  views.putNode(meta('n2'));
  views.putAgent(pod('a1', 'n1'));
  // WHEN a1 is seen on n2
  views.putAgent(pod('a1', 'n2'));
  // THEN n1 has no agent and n2 has one
  expect(views.get('n1')!.ready).toBe(false);
  expect(views.get('n2')!.ready).toBe(true);
  expect(views.list().map(n => n.name).sort()).toEqual(['n1', 'n2']);
});

describe('node events that change neither labels nor annotations (the kubelet\'s status updates)', () => {
  test('leave the view as it is and report no change; a label that changes, or a recorded request the node now shows, does', () => {
    // GIVEN a node with a Ready agent
    const { views, changes } = bed();
    views.putNode({ ...meta('n1', { a: '1' }), uid: 'u1', resourceVersion: '10' });
    views.putAgent(pod('a1', 'n1'));
    const view = views.get('n1');
    changes.length = 0;
    // WHEN a status update arrives (a new resourceVersion, the same metadata, decoded anew)
    views.putNode({ ...meta('n1', { a: '1' }), uid: 'u1', resourceVersion: '11' });
    // THEN nothing is reported and the view is the same object
    expect(changes).toEqual([]);
    expect(views.get('n1')).toBe(view);
    // WHEN a label changes
    views.putNode({ ...meta('n1', { a: '2' }), uid: 'u1', resourceVersion: '12' });
    // THEN it is reported
    expect(changes.map(([, after]) => after?.labels.a)).toEqual(['2']);
    // WHEN the node is replaced by another of its name (a new uid), with the same labels
    views.putNode({ ...meta('n1', { a: '2' }), uid: 'u2', resourceVersion: '13' });
    expect(changes).toHaveLength(2);
    // AND a request recorded by the write of version 20 leaves the view when the node shows 20,
    // even by an event that changes nothing else
    views.requests.written('n1', { spin: JSON.stringify({ name: 'r1' }) });
    views.requestsChanged('n1');
    views.requests.recorded('n1', 'spin', 'r1', '20');
    const shown = () => Object.keys(views.get('n1')!.annotations).filter(k => k.endsWith('/request'));
    expect(shown()).toHaveLength(1);
    views.putNode({ ...meta('n1', { a: '2' }), uid: 'u2', resourceVersion: '20' });
    expect(shown()).toEqual([]);
  });

  test('an event its informer did not decode (same fingerprint) moves only the version, as the same event decoded would', () => {
    // GIVEN a node with a Ready agent, and a request the write of version 20 recorded
    const { views, changes } = bed();
    views.putNode({ ...meta('n1', { a: '1' }), uid: 'u1', resourceVersion: '10' });
    views.putAgent(pod('a1', 'n1'));
    views.requests.written('n1', { spin: JSON.stringify({ name: 'r1' }) });
    views.requestsChanged('n1');
    views.requests.recorded('n1', 'spin', 'r1', '20');
    const view = views.get('n1');
    changes.length = 0;
    const shown = () => Object.keys(views.get('n1')!.annotations).filter(k => k.endsWith('/request'));
    // WHEN a heartbeat before that write arrives undecoded
    views.nodeSeenAt('n1', '15');
    // THEN nothing is reported and the view is the same object
    expect(changes).toEqual([]);
    expect(views.get('n1')).toBe(view);
    // WHEN one at or after it does
    views.nodeSeenAt('n1', '21');
    // THEN the recorded request leaves the view, and that is reported
    expect(shown()).toEqual([]);
    expect(changes).toHaveLength(1);
    // AND the node's version is the event's: a write recorded later is judged against it
    views.requests.written('n1', { spin: JSON.stringify({ name: 'r2' }) });
    views.requests.recorded('n1', 'spin', 'r2', '21');
    views.requestsChanged('n1');
    expect(shown()).toEqual([]);
    // AND an unknown node is no news
    views.nodeSeenAt('n9', '30');
    expect(views.get('n9')).toBeUndefined();
  });
});
