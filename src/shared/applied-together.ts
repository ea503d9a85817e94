// Shims applied together (one apply unit: the Shims a RuntimeClassManager adds, per Argo CD sync
// wave) say so, so that the controller plans them in one pass: each node gets one change set
// and one containerd restart for all of them, although the API server takes them one create or
// update at a time. The constructs stamp every Shim of a unit with
//
//   runtime.spinkube.dev/applied-together: <id>/<count>
//
// <count>: how many Shims the unit has. <id>: the first 12 hex digits of the sha256 of the
// unit's Shims as synthesized (appliedTogetherId), so that any change to any of them gives every
// Shim of the unit a new stamp, and Shims of two applies of different contents never share one.
// Shared by the construct library (which writes it) and the controller (which reads it), and
// free of cdk8s: node's crypto only.
import { createHash } from 'crypto';

/** The annotation on a Shim that names its apply unit: `<id>/<count>`. */
export const APPLIED_TOGETHER_ANNOTATION = 'runtime.spinkube.dev/applied-together';

/** The most Shims one unit may count. */
export const MAX_APPLIED_TOGETHER = 10_000;

/** How many hex digits of the digest an id the constructs write has. */
export const APPLIED_TOGETHER_ID_LENGTH = 12;

const ID = /^[0-9a-f]{1,64}$/;
const VALUE = /^([0-9a-f]{1,64})\/([1-9][0-9]{0,4})$/;

/**
 * The annotation's value for a unit.
 * @throws when `id` is not 1 to 64 lowercase hex digits or `count` not a whole number from 1 to 10000
 */
export function formatAppliedTogether(id: string, count: number): string {
  if (!ID.test(id)) throw new Error(`applied-together: id "${id}" is not 1 to 64 lowercase hex digits`);
  if (!Number.isInteger(count) || count < 1 || count > MAX_APPLIED_TOGETHER) {
    throw new Error(`applied-together: count ${count} is not a whole number from 1 to ${MAX_APPLIED_TOGETHER}`);
  }
  return `${id}/${count}`;
}

/**
 * The unit an annotation value names, or undefined for a missing or malformed value (the Shim
 * is then planned as it arrives): `<id>/<count>`, the id 1 to 64 lowercase hex digits, the
 * count a whole number from 1 to 10000 written without leading zeros or sign.
 */
export function parseAppliedTogether(value: string | undefined): { id: string; count: number } | undefined {
  if (typeof value !== 'string') return undefined;
  const m = VALUE.exec(value);
  if (!m) return undefined;
  const count = Number(m[2]);
  if (count > MAX_APPLIED_TOGETHER) return undefined;
  return { id: m[1], count };
}

/** One Shim of a unit as synthesized: its metadata name and its spec. */
export interface AppliedTogetherShim {
  readonly name: string;
  readonly spec: unknown;
}

/**
 * The id of a unit: the first 12 hex digits of the sha256 of the canonical JSON of its Shims
 * (`[{"name":...,"spec":...},...]`, sorted by name, object keys sorted, no whitespace). The
 * same Shims give the same id wherever they were synthesized (from any jsii language).
 */
export function appliedTogetherId(shims: readonly AppliedTogetherShim[]): string {
  const sorted = [...shims].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const json = canonicalJson(sorted.map(s => ({ name: s.name, spec: s.spec })));
  return createHash('sha256').update(json, 'utf8').digest('hex').slice(0, APPLIED_TOGETHER_ID_LENGTH);
}

/**
 * JSON with the keys of every object sorted (by UTF-16 code units, as Array.prototype.sort does)
 * and no whitespace; undefined members are left out, as JSON.stringify leaves them out.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(v => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const record = value as { [key: string]: unknown };
  const keys = Object.keys(record).filter(k => record[k] !== undefined && typeof record[k] !== 'function').sort();
  return `{${keys.map(k => `${JSON.stringify(k)}:${canonicalJson(record[k])}`).join(',')}}`;
}
