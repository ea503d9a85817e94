// Just enough of the protobuf wire format to read the few fields the controller keeps from
// Nodes, Jobs and Pods. The point is what it does not read: a nested message (a Node's 50
// images, any object's managedFields, a Pod's spec) is skipped by its length, where JSON has
// to be parsed in full, byte by byte, into objects that are thrown away at once.

/** A field of a message: its number, and its value as a varint or as a byte range. */
export interface Field {
  readonly no: number;
  /** The value of a varint field (wire type 0). */
  readonly varint: number;
  /** The bytes of a length-delimited field (wire type 2): a string, bytes or a nested message. */
  readonly start: number;
  readonly end: number;
}

/** Reads the varint at `pos`: its value and the position after it. */
function varint(buf: Uint8Array, pos: number): [number, number] {
  let value = 0;
  let shift = 0;
  for (;;) {
    if (pos >= buf.length) throw new Error('protobuf: truncated varint');
    const byte = buf[pos++];
    // Beyond 2^53 precision is lost; no field read here (lengths, counts, seconds) gets near.
    value += (byte % 128) * 2 ** shift;
    if (byte < 0x80) return [value, pos];
    shift += 7;
    if (shift > 63) throw new Error('protobuf: varint too long');
  }
}

/** Every field of the message in `buf[start, end)`, in order (repeated fields repeat). */
export function* fields(buf: Uint8Array, start = 0, end = buf.length): Generator<Field> {
  let pos = start;
  while (pos < end) {
    const [key, afterKey] = varint(buf, pos);
    const no = Math.floor(key / 8);
    pos = afterKey;
    switch (key % 8) {
      case 0: {
        const [value, after] = varint(buf, pos);
        pos = after;
        yield { no, varint: value, start: 0, end: 0 };
        break;
      }
      case 1: pos += 8; break; // 64-bit (double, fixed64): not read here
      case 2: {
        const [length, after] = varint(buf, pos);
        if (after + length > end) throw new Error('protobuf: field runs past its message');
        pos = after + length;
        yield { no, varint: 0, start: after, end: after + length };
        break;
      }
      case 5: pos += 4; break; // 32-bit: not read here
      default: throw new Error(`protobuf: unsupported wire type ${key % 8}`);
    }
  }
  if (pos !== end) throw new Error('protobuf: message ends inside a field');
}

const decoder = new TextDecoder();

export function text(buf: Uint8Array, f: Field): string {
  return decoder.decode(buf.subarray(f.start, f.end));
}

/** The fields of a nested message, by number: the last occurrence of each (proto semantics). */
export function byNumber(buf: Uint8Array, start: number, end: number): Map<number, Field> {
  const map = new Map<number, Field>();
  for (const f of fields(buf, start, end)) map.set(f.no, f);
  return map;
}

/** A `map<string, string>` entry (key = 1, value = 2). */
export function mapEntry(buf: Uint8Array, f: Field): [string, string] {
  let key = '';
  let value = '';
  for (const e of fields(buf, f.start, f.end)) {
    if (e.no === 1) key = text(buf, e);
    else if (e.no === 2) value = text(buf, e);
  }
  return [key, value];
}

/**
 * A metav1.Time (seconds = 1, nanos = 2) as the API server writes it in JSON: RFC 3339 in
 * UTC, whole seconds. The zero time (year 1: negative seconds, which JSON writes as null)
 * is undefined.
 */
export function time(buf: Uint8Array, f: Field): string | undefined {
  let seconds = 0;
  for (const e of fields(buf, f.start, f.end)) if (e.no === 1) seconds = e.varint;
  // A negative int64 arrives as a ten-byte varint: a number of 2^63 or more here.
  if (seconds <= 0 || seconds >= 2 ** 53) return undefined;
  return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** The `k8s\0` prefix of every object the API server encodes as protobuf. */
const MAGIC = [0x6b, 0x38, 0x73, 0x00];

/**
 * The object inside the API server's envelope: the magic prefix, then a runtime.Unknown
 * (typeMeta = 1, raw = 2).
 */
export function unwrap(buf: Buffer): Buffer {
  if (buf.length < 4 || MAGIC.some((b, i) => buf[i] !== b)) throw new Error('protobuf: not a Kubernetes protobuf object (no k8s magic)');
  for (const f of fields(buf, 4)) if (f.no === 2) return buf.subarray(f.start, f.end);
  return buf.subarray(0, 0);
}
