import { samePlain, slimNode } from '../../src/runtime/slim';
import { nodeFingerprint, nodeFromProto } from '../../src/runtime/slim-proto';
import { Fields, unwrap } from '../../src/shared/kube/protobuf';

// The wire format reader on hand-made messages; real objects from an API server are covered
// by test/integration/protobuf-views.test.ts.

function varint(n: bigint): number[] {
  const out: number[] = [];
  let v = BigInt.asUintN(64, n);
  do {
    const byte = Number(v % 128n);
    v /= 128n;
    out.push(v > 0n ? byte + 128 : byte);
  } while (v > 0n);
  return out;
}
const key = (no: number, wire: number) => varint(BigInt(no * 8 + wire));
const str = (no: number, s: string | Buffer) => {
  const b = Buffer.isBuffer(s) ? s : Buffer.from(s);
  return [...key(no, 2), ...varint(BigInt(b.length)), ...b];
};
const int = (no: number, n: bigint) => [...key(no, 0), ...varint(n)];

test('fields in order, nested messages, fixed-width fields skipped', () => {
  const inner = Buffer.from([...str(1, 'kubernetes.io/os'), ...str(2, 'linux')]);
  const buf = Buffer.from([
    ...int(1, 300n), ...key(2, 1), 1, 2, 3, 4, 5, 6, 7, 8, ...str(3, inner), ...key(4, 5), 9, 9, 9, 9, ...str(5, 'é'),
  ]);
  const f = new Fields(buf);
  const seen: string[] = [];
  while (f.next()) {
    if (f.no === 1) seen.push(`1=${f.value}`);
    else if (f.no === 3) seen.push(`3=${JSON.stringify(f.mapEntryInto(undefined))}`);
    else if (f.no === 5) seen.push(`5=${f.text()}`);
  }
  expect(seen).toEqual(['1=300', '3={"kubernetes.io/os":"linux"}', '5=é']);
});

test('map entries go into one record, those whose key is not kept are left out, and the cursor goes on after each', () => {
  const entry = (k: string, v?: string) => str(1, Buffer.from([...str(1, k), ...(v === undefined ? [] : str(2, v))]));
  const buf = Buffer.from([...entry('a', 'x'), ...entry('skip.me/b', 'y'), ...int(2, 7n), ...entry('c'), ...str(3, 'after')]);
  const f = new Fields(buf);
  let into: Record<string, string> | undefined;
  const seen: string[] = [];
  while (f.next()) {
    if (f.no === 1) into = f.mapEntryInto(into, k => !k.startsWith('skip'));
    else if (f.no === 2) seen.push(`2=${f.value}`);
    else seen.push(`${f.no}=${f.text()}`);
  }
  // THEN an entry without a value is "" (as JSON shows it), and the fields around the entries are read in order
  expect(into).toEqual({ a: 'x', c: '' });
  expect(seen).toEqual(['2=7', '3=after']);
  // AND nothing is made when no entry is kept
  const none = new Fields(Buffer.from(entry('skip.me/only', 'z')));
  none.next();
  expect(none.mapEntryInto(undefined, () => false)).toBeUndefined();
});

test('a time as the API server writes it in JSON; the zero time (negative seconds) and times past a Date\'s range are absent', () => {
  const time = (seconds: bigint) => {
    const f = new Fields(Buffer.from(str(1, Buffer.from(int(1, seconds)))));
    f.next();
    return f.time();
  };
  expect(time(1795344016n)).toBe('2026-11-22T10:40:16Z');
  expect(time(-62135596800n)).toBeUndefined();
  // AND a time past what a Date can hold (year 275760) is absent, not an exception
  expect(time(253402300799n)).toBe('9999-12-31T23:59:59Z');
  expect(time(9_000_000_000_000n)).toBeUndefined();
  // AND a time read again (times are kept written out) is the same text
  expect(time(1795344016n)).toBe('2026-11-22T10:40:16Z');
  expect(time(1795344017n)).toBe('2026-11-22T10:40:17Z');
});

test('damaged input is refused, not misread', () => {
  const read = (bytes: number[]) => () => {
    const f = new Fields(Buffer.from(bytes));
    while (f.next()) f.text();
  };
  expect(read([...key(1, 2), 10, 65])).toThrow(/runs past its message/);
  expect(read([...key(1, 0), 0x80])).toThrow(/truncated varint/);
  expect(read([...key(1, 3)])).toThrow(/unsupported wire type 3/);
  expect(() => unwrap(Buffer.from('{"kind":"Node"}'))).toThrow(/no k8s magic/);
  expect(unwrap(Buffer.from([0x6b, 0x38, 0x73, 0x00, ...str(2, 'object')])).toString()).toBe('object');
});

test('a Node\'s status.runtimeHandlers (Kubernetes 1.30+; a 1.20 API server drops the field, so it is made here) is read by name, the default handler as ""', () => {
  // GIVEN a Node as an API server of 1.30+ encodes it: metadata 1 (name 1), status 3 (runtimeHandlers 12: name 1, features 2)
  const handler = (name: string) => str(12, Buffer.from([...(name ? str(1, name) : []), ...str(2, Buffer.from(int(1, 1n)))]));
  const withHandlers = Buffer.from([...str(1, Buffer.from(str(1, 'n1'))), ...str(3, Buffer.from([...handler(''), ...handler('runc'), ...handler('spin')]))]);
  const without = Buffer.from([...str(1, Buffer.from(str(1, 'n1'))), ...str(3, Buffer.from([]))]);
  // THEN the view lists them, and a node without the field has none (undefined: not reported, not "no handler")
  expect(nodeFromProto(withHandlers)).toMatchObject({ name: 'n1', runtimeHandlers: ['', 'runc', 'spin'] });
  expect(nodeFromProto(without).runtimeHandlers).toBeUndefined();
  // AND the JSON view agrees
  expect(slimNode({ metadata: { name: 'n1' }, status: { runtimeHandlers: [{ name: '' }, { name: 'runc' }, { name: 'spin', features: { recursiveReadOnlyMounts: true } }] } }).runtimeHandlers)
    .toEqual(['', 'runc', 'spin']);
  expect(slimNode({ metadata: { name: 'n1' }, status: {} }).runtimeHandlers).toBeUndefined();
});

test('a Node\'s fingerprint tells a lone label from a lone annotation of the same key and value', () => {
  // GIVEN two Nodes alike but for one entry: a label k=v (metadata field 11) or an annotation k=v (field 12), at the same place
  const entry = (no: number) => str(no, Buffer.from([...str(1, 'k'), ...str(2, 'v')]));
  const node = (no: number) => Buffer.from([...str(1, Buffer.from([...str(1, 'n1'), ...entry(no)])), ...str(3, Buffer.from([]))]);
  // THEN the views differ, and so do the fingerprints (an event that turns one into the other is decoded)
  expect(nodeFromProto(node(11)).labels).toEqual({ k: 'v' });
  expect(nodeFromProto(node(12)).labels).toEqual({});
  expect(nodeFingerprint(node(11))).not.toBe(nodeFingerprint(node(12)));
  // AND the same bytes give the same fingerprint
  expect(nodeFingerprint(node(11))).toBe(nodeFingerprint(Buffer.from(node(11))));
});

describe('samePlain: whether an event repeats the cached view (the informers then keep the cached object)', () => {
  const node = { name: 'n', labels: { a: '1', b: '2' }, annotations: {}, ready: true, schedulable: true, bootID: 'x', runtimeHandlers: ['', 'spin'] };
  test.each<[string, unknown, unknown, boolean]>([
    ['the same view decoded again', node, JSON.parse(JSON.stringify(node)), true],
    ['labels in another order', node, { ...node, labels: { b: '2', a: '1' } }, true],
    ['a label value changed', node, { ...node, labels: { a: '1', b: '3' } }, false],
    ['a label added', node, { ...node, labels: { ...node.labels, c: '' } }, false],
    ['a label removed', node, { ...node, labels: { a: '1' } }, false],
    ['readiness changed', node, { ...node, ready: false }, false],
    ['a handler more', node, { ...node, runtimeHandlers: ['', 'spin', 'wasm'] }, false],
    ['handlers in another order', node, { ...node, runtimeHandlers: ['spin', ''] }, false],
    ['a key now undefined (another shape)', { a: 1, b: undefined }, { a: 1 }, false],
    ['a key undefined in both', { a: 1, b: undefined }, { a: 1, b: undefined }, true],
    ['an array and an object with its indexes', { list: ['x'] }, { list: { 0: 'x' } }, false],
    ['null and an empty object', { s: null }, { s: {} }, false],
    ['a number and its text', { n: 1 }, { n: '1' }, false],
  ])('%s', (_what, a, b, same) => {
    expect(samePlain(a, b)).toBe(same);
    expect(samePlain(b, a)).toBe(same);
  });
});
