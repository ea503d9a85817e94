import { APPLY_HOLD_MS, DELETE_HOLD_MS, holdKey, holdsOf } from '../../src/runtime/held-shims';
import { ShimObject } from '../../src/runtime/types';
import { APPLIED_TOGETHER_ANNOTATION } from '../../src/shared/applied-together';

// Shims applied together are planned together: a changed Shim of an apply unit waits until the
// pass sees every Shim of its unit; one being deleted waits while the others of its unit stay.

const NOW = 1_000_000;
function shim(name: string, unit?: string, more: { deleting?: boolean; observed?: boolean } = {}): ShimObject {
  return {
    metadata: {
      name, uid: `uid-${name}`, generation: 1,
      annotations: unit ? { [APPLIED_TOGETHER_ANNOTATION]: unit } : {},
      ...(more.deleting ? { deletionTimestamp: '2026-12-02T00:00:00Z' } : {}),
    },
    spec: {},
    ...(more.observed ? { status: { observedGeneration: 1, nodes: 0, nodesReady: 0, nodesFailed: 0, failedNodes: [], conditions: [] } } : {}),
  } as unknown as ShimObject;
}
const waiting = (shims: ShimObject[], since = new Map<string, number>(), now = NOW) => holdsOf(shims, since, now).filter(h => h.untilMs > now).map(h => h.shim);

test.each([
  ['a Shim without a unit is planned', [shim('a')], []],
  ['two of a unit of three wait', [shim('a', 'abc/3'), shim('b', 'abc/3')], ['a', 'b']],
  ['a whole unit is planned', [shim('a', 'abc/2'), shim('b', 'abc/2')], []],
  ['a Shim of another unit does not count', [shim('a', 'abc/2'), shim('b', 'def/2')], ['a', 'b']],
  ['an unchanged Shim (its generation observed) does not wait', [shim('a', 'abc/2', { observed: true })], []],
  ['one being deleted waits while the other of its unit stays', [shim('a', 'abc/2', { deleting: true }), shim('b', 'abc/2', { observed: true })], ['a']],
  ['both being deleted go together', [shim('a', 'abc/2', { deleting: true }), shim('b', 'abc/2', { deleting: true })], []],
] as [string, ShimObject[], string[]][])('%s', (_, shims, held) => {
  expect(waiting(shims)).toEqual(held);
});

test('an apply that stopped half-way is planned once its bound is past; a deletion alone likewise', () => {
  const half = [shim('a', 'abc/3')];
  const since = new Map([[holdKey(half[0]), NOW]]);
  expect(waiting(half, since, NOW + APPLY_HOLD_MS - 1)).toEqual(['a']);
  expect(waiting(half, since, NOW + APPLY_HOLD_MS)).toEqual([]);
  const alone = [shim('a', 'abc/2', { deleting: true }), shim('b', 'abc/2', { observed: true })];
  const deleting = new Map([[holdKey(alone[0]), NOW]]);
  expect(waiting(alone, deleting, NOW + DELETE_HOLD_MS)).toEqual([]);
});
