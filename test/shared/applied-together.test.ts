import { createHash } from 'crypto';
import {
  APPLIED_TOGETHER_ANNOTATION, appliedTogetherId, canonicalJson, formatAppliedTogether, parseAppliedTogether,
} from '../../src/shared/applied-together';

// The applied-together annotation, as the constructs write it and the controller reads it.

test('the annotation key', () => {
  expect(APPLIED_TOGETHER_ANNOTATION).toBe('runtime.spinkube.dev/applied-together');
});

test.each<[string, string | undefined, { id: string; count: number } | undefined]>([
  ['a stamp the constructs write', '0123456789ab/3', { id: '0123456789ab', count: 3 }],
  ['a unit of one', 'abc/1', { id: 'abc', count: 1 }],
  ['the largest count', 'abc/10000', { id: 'abc', count: 10000 }],
  ['a one-digit id', 'f/2', { id: 'f', count: 2 }],
  ['a 64-digit id', `${'a'.repeat(64)}/2`, { id: 'a'.repeat(64), count: 2 }],
  ['missing', undefined, undefined],
  ['empty', '', undefined],
  ['no count', 'abc', undefined],
  ['no id', '/3', undefined],
  ['an empty count', 'abc/', undefined],
  ['count zero', 'abc/0', undefined],
  ['count above 10000', 'abc/10001', undefined],
  ['a far larger count', 'abc/99999999999999999999', undefined],
  ['a negative count', 'abc/-1', undefined],
  ['a signed count', 'abc/+1', undefined],
  ['a leading zero', 'abc/03', undefined],
  ['a fractional count', 'abc/1.5', undefined],
  ['an exponent', 'abc/1e3', undefined],
  ['uppercase hex', 'ABC/3', undefined],
  ['not hex', 'xyz/3', undefined],
  ['a 65-digit id', `${'a'.repeat(65)}/2`, undefined],
  ['whitespace around', ' abc/3', undefined],
  ['a trailing newline', 'abc/3\n', undefined],
  ['two slashes', 'abc/3/4', undefined],
  ['the parts swapped', '3/abc', undefined],
])('parse: %s', (_title, value, expected) => {
  expect(parseAppliedTogether(value)).toEqual(expected);
});

test('format gives what parse reads back', () => {
  for (const [id, count] of [['0123456789ab', 1], ['f', 10000], ['a'.repeat(64), 42]] as const) {
    expect(parseAppliedTogether(formatAppliedTogether(id, count))).toEqual({ id, count });
  }
});

test.each<[string, number]>([
  ['', 1], ['ABC', 1], ['a'.repeat(65), 1], ['abc', 0], ['abc', 10001], ['abc', 1.5], ['abc', Number.NaN],
])('format refuses id "%s" with count %d', (id, count) => {
  expect(() => formatAppliedTogether(id, count)).toThrow(/applied-together/);
});

test('canonical JSON sorts keys at every depth, keeps array order, drops undefined members', () => {
  expect(canonicalJson({ b: 1, a: { d: [3, { z: true, y: null }], c: 'x' }, u: undefined }))
    .toBe('{"a":{"c":"x","d":[3,{"y":null,"z":true}]},"b":1}');
});

test('the id: 12 hex digits of the sha256 of the Shims sorted by name, whatever order they come in', () => {
  const a = { name: 'a', spec: { handler: 'spin', nodeSelector: { x: '1' } } };
  const b = { name: 'b', spec: { handler: 'wasmtime' } };
  const id = appliedTogetherId([a, b]);
  expect(id).toMatch(/^[0-9a-f]{12}$/);
  expect(appliedTogetherId([b, a])).toBe(id);
  // The digest of the canonical JSON, pinned: any jsii language synthesizing these Shims gets it.
  expect(id).toBe(createHash('sha256')
    .update('[{"name":"a","spec":{"handler":"spin","nodeSelector":{"x":"1"}}},{"name":"b","spec":{"handler":"wasmtime"}}]')
    .digest('hex').slice(0, 12));
  expect(appliedTogetherId([a, { ...b, spec: { handler: 'wasmtime2' } }])).not.toBe(id);
  expect(appliedTogetherId([a])).not.toBe(id);
});
