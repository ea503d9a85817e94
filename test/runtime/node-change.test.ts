import { nodeChangeAffects } from '../../src/runtime/slim';
import { NodeView, ShimObject } from '../../src/runtime/types';
import { ShimNodeLabels } from '../../src/shared/node-labels';

// Which Node events run a Shim again (every node event asks it of every Shim): the changes it
// reads, not a kubelet's heartbeat, and not another Shim's own keys.

const shim = (nodeSelector?: Record<string, string>): ShimObject => ({
  metadata: { name: 'spin', uid: 'u1' },
  spec: { runtimeClass: { name: 'spin', handler: 'spin' }, ...(nodeSelector ? { nodeSelector } : {}) } as ShimObject['spec'],
});
const node = (labels: Record<string, string> = {}, annotations: Record<string, string> = {}, over: Partial<NodeView> = {}): NodeView => ({
  name: 'n1', labels, annotations, ready: true, schedulable: true, bootID: 'b1', ...over,
});
const OWN = ShimNodeLabels.handlerKey('spin');
const OTHER_STATE = ShimNodeLabels.stateKey('kata');
const OTHER_INSTALLED = ShimNodeLabels.installedKey('kata');

test.each([
  ['the same node again (a heartbeat)', shim(), node({ a: '1' }), node({ a: '1' }), false],
  ['readiness of a selected node', shim(), node(), node({}, {}, { ready: false }), true],
  ['a boot ID of a selected node', shim(), node(), node({}, {}, { bootID: 'b2' }), true],
  ['a label added', shim(), node({ a: '1' }), node({ a: '1', b: '2' }), true],
  ['a label removed', shim(), node({ a: '1', b: '2' }), node({ a: '1' }), true],
  ['a label added whose name is also a property of every object', shim(), node(), node({ constructor: 'x' }), true],
  ['another Shim\'s own label', shim(), node(), node({ [OTHER_STATE]: 'provisioned' }), false],
  ['another Shim\'s record of what it installed (a handler this Shim may wait for)', shim(), node(), node({}, { [OTHER_INSTALLED]: '[]' }), true],
  ['the node leaves the selection', shim({ pool: 'wasm' }), node({ pool: 'wasm' }), node({ pool: 'gpu' }), true],
  ['a node neither selected nor holding anything of the Shim', shim({ pool: 'wasm' }), node({ pool: 'gpu' }), node({ pool: 'gpu', b: '2' }, {}, { ready: false }), false],
  ['the Shim\'s own gate on a node it does not select', shim({ pool: 'wasm' }), node({ pool: 'gpu', [OWN]: 'spin' }), node({ pool: 'gpu' }), true],
])('%s', (_what, s, before, after, expected) => {
  expect(nodeChangeAffects(s, before, after)).toBe(expected);
});

test('a node added or deleted runs the Shims that select it or hold something on it', () => {
  expect(nodeChangeAffects(shim(), undefined, node())).toBe(true);
  expect(nodeChangeAffects(shim({ pool: 'wasm' }), node({ pool: 'gpu' }), undefined)).toBe(false);
  expect(nodeChangeAffects(shim({ pool: 'wasm' }), node({ pool: 'gpu', [OWN]: 'spin' }), undefined)).toBe(true);
});
