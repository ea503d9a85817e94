import { AgentNodeViews } from '../../src/runtime/agent-node-views';
import { RequestBook } from '../../src/runtime/request-book';
import { NodeMetadata } from '../../src/runtime/slim';
import { requestKey, resultKey } from '../../src/shared/agent-protocol';

// Install mode NodeAgent: the controller's book of the requests it wrote into the nodes'
// requests ConfigMaps (it does not watch them), and what the planner sees of them in the node
// views. A recorded request leaves the view once the node shows its record, and the ConfigMap
// with the next write there.

const request = (name: string) => JSON.stringify({ name });
type Step = (book: RequestBook) => unknown;

describe('what the planner sees, and what the next write to the ConfigMap carries', () => {
  test.each<[string, Step[], { shown: string[]; next: Record<string, string | null> | undefined; exists: boolean }]>([
    ['nothing written: nothing shown; a withdrawal has nothing to write', [],
      { shown: [], next: undefined, exists: false }],
    ['a request written: shown at once (the controller does not wait for an echo)', [b => b.written('n1', { spin: request('r1') })],
      { shown: ['spin:r1'], next: { spin: null }, exists: true }],
    ['found at start', [b => b.seed('n1', { spin: request('r1'), wasm: request('r2') })],
      { shown: ['spin:r1', 'wasm:r2'], next: { spin: null }, exists: true }],
    ['withdrawn: gone from view and ConfigMap', [b => b.written('n1', { spin: request('r1') }), b => b.written('n1', { spin: null })],
      { shown: [], next: undefined, exists: true }],
    ['recorded earlier (the node shows it): gone from view at once, withdrawn with the next write', [
      b => b.written('n1', { spin: request('r1') }), b => b.recorded('n1', 'spin', 'r1'),
    ], { shown: [], next: { spin: null }, exists: true }],
    ['recorded by a node write of version 120: shown until the node is seen at 120', [
      b => b.written('n1', { spin: request('r1') }), b => b.recorded('n1', 'spin', 'r1', '120'), b => b.nodeAt('n1', '119'),
    ], { shown: ['spin:r1'], next: { spin: null }, exists: true }],
    ['... and gone once it is (a later version too: 1000 > 999, not as text)', [
      b => b.written('n1', { spin: request('r1') }), b => b.recorded('n1', 'spin', 'r1', '999'), b => b.nodeAt('n1', '1000'),
    ], { shown: [], next: { spin: null }, exists: true }],
    ['a version that is no number: gone at the node\'s next event', [
      b => b.written('n1', { spin: request('r1') }), b => b.recorded('n1', 'spin', 'r1', 'x'), b => b.nodeAt('n1', '5'),
    ], { shown: [], next: { spin: null }, exists: true }],
    ['another request recorded than the book holds: nothing changes', [
      b => b.written('n1', { spin: request('r2') }), b => b.recorded('n1', 'spin', 'r1'),
    ], { shown: ['spin:r2'], next: { spin: null }, exists: true }],
    ['a recorded request is withdrawn with the next admission there (one write)', [
      b => b.written('n1', { spin: request('r1') }), b => b.recorded('n1', 'spin', 'r1'), b => b.written('n1', { spin: null, wasm: request('r2') }),
    ], { shown: ['wasm:r2'], next: undefined, exists: true }],
    ['a withdrawal that found no ConfigMap', [b => b.seed('n1', { spin: request('r1') }), b => b.written('n1', { spin: null }, false)],
      { shown: [], next: undefined, exists: false }],
    ['the node deleted: forgotten', [b => b.written('n1', { spin: request('r1') }), b => b.forget('n1')],
      { shown: [], next: undefined, exists: false }],
  ])('%s', (_what, steps, expected) => {
    // GIVEN the steps, in order
    const book = new RequestBook();
    for (const step of steps) step(book);
    // THEN the planner sees these requests; withdrawing spin's writes this; the ConfigMap exists or not
    expect(Object.entries(book.annotations('n1')).map(([k, v]) => `${k.split('.')[0]}:${JSON.parse(v).name}`).sort()).toEqual(expected.shown);
    expect(book.patchFor('n1', 'spin', null)).toEqual(expected.next);
    expect(book.exists('n1')).toBe(expected.exists);
  });
});

test('an admission carries the withdrawals of every recorded request of the node; nodesWith names where a Shim has one', () => {
  // GIVEN two recorded requests on n1 and one shown on n2
  const book = new RequestBook();
  book.written('n1', { spin: request('r1'), wasm: request('r2') });
  book.recorded('n1', 'spin', 'r1');
  book.recorded('n1', 'wasm', 'r2');
  book.written('n2', { spin: request('r3') });
  // WHEN a third Shim is admitted on n1
  const patch = book.patchFor('n1', 'kata', request('r4'));
  // THEN the one write admits it and withdraws both
  expect(patch).toEqual({ spin: null, wasm: null, kata: request('r4') });
  expect(book.nodesWith('spin').sort()).toEqual(['n1', 'n2']);
  book.written('n1', patch!);
  expect(book.nodesWith('spin')).toEqual(['n2']);
});

test('the node views carry the book\'s requests as annotations, and drop requests written on the Node (an older controller\'s)', () => {
  // GIVEN a node whose metadata holds a result, and an old-style request annotation
  const changes: number[] = [];
  const views = new AgentNodeViews(() => changes.push(1));
  const meta = (resourceVersion: string): NodeMetadata => ({
    name: 'n1', resourceVersion, labels: {}, annotations: { [resultKey('spin')]: '{"name":"r1","phase":"succeeded"}', [requestKey('old')]: request('r0') },
  });
  views.putNode(meta('10'));
  // WHEN the controller writes a request and records it by a node write of version 12
  views.requests.written('n1', { spin: request('r1') });
  views.requestsChanged('n1');
  expect(views.get('n1')!.annotations).toEqual({ [resultKey('spin')]: '{"name":"r1","phase":"succeeded"}', [requestKey('spin')]: request('r1') });
  views.requests.recorded('n1', 'spin', 'r1', '12');
  // THEN the view shows the request until the node is seen at 12
  views.putNode(meta('11'));
  expect(views.get('n1')!.annotations[requestKey('spin')]).toBe(request('r1'));
  views.putNode(meta('12'));
  expect(views.get('n1')!.annotations[requestKey('spin')]).toBeUndefined();
  expect(views.uidOf('n1')).toBeUndefined();
  // AND a request recorded by a write the node's watch showed before the write's answer came back goes at once
  views.requests.written('n1', { spin: request('r2') });
  views.requests.recorded('n1', 'spin', 'r2', '12');
  views.requestsChanged('n1');
  expect(views.get('n1')!.annotations[requestKey('spin')]).toBeUndefined();
});

describe('successes the agents recorded before this controller started', () => {
  test('are taken as announced; a request that finishes later, or one this controller writes, is not', () => {
    // GIVEN requests found at start on two nodes, one finished and recorded by its agent
    const book = new RequestBook();
    book.seed('n1', { spin: request('r1') });
    book.seed('n2', { spin: request('r2') });
    // WHEN the controller, before its first pass, marks those the agents had recorded
    book.announceFinished((node, shim, name) => node === 'n1' && shim === 'spin' && name === 'r1');
    // THEN only that one counts as announced
    expect(book.announced('n1', 'spin', 'r1')).toBe(true);
    expect(book.announced('n2', 'spin', 'r2')).toBe(false);
    expect(book.announced('n1', 'spin', 'another')).toBe(false);
    // AND a request written later under the Shim's key is a new one
    book.written('n1', { spin: request('r3') });
    expect(book.announced('n1', 'spin', 'r3')).toBe(false);
  });
});
