// Just enough of the protobuf wire format to read the few fields the controller keeps from
// Nodes, Jobs and Pods. The point is what it does not read: a nested message (a Node's 50
// images, any object's managedFields, a Pod's spec) is skipped by its length, where JSON has
// to be parsed in full, byte by byte, into objects that are thrown away at once.

/**
 * A cursor over the fields of one message. `next()` moves to the next field: its number in
 * `no`, a varint's value in `value`, a length-delimited field's bytes in `[start, end)`. One
 * object per message, none per field: a Node event has hundreds of fields.
 */
export class Fields {
  no = 0;
  value = 0;
  start = 0;
  end = 0;
  private pos: number;

  constructor(readonly buf: Buffer, from = 0, private limit = buf.length) {
    this.pos = from;
  }

  /** The fields of the length-delimited field the cursor is on, as a message. */
  nested(): Fields {
    return new Fields(this.buf, this.start, this.end);
  }

  next(): boolean {
    if (this.pos >= this.limit) {
      if (this.pos !== this.limit) throw new Error('protobuf: message ends inside a field');
      return false;
    }
    const key = this.varint();
    this.no = Math.floor(key / 8);
    switch (key % 8) {
      case 0:
        this.value = this.varint();
        this.start = this.end = 0;
        return true;
      case 1: // 64-bit (double, fixed64): not read here
        this.pos += 8;
        return this.next();
      case 2: {
        const length = this.varint();
        this.start = this.pos;
        this.end = this.pos + length;
        if (this.end > this.limit) throw new Error('protobuf: field runs past its message');
        this.pos = this.end;
        this.value = 0;
        return true;
      }
      case 5: // 32-bit: not read here
        this.pos += 4;
        return this.next();
      default:
        throw new Error(`protobuf: unsupported wire type ${key % 8}`);
    }
  }

  /** The length-delimited field as UTF-8 text. */
  text(): string {
    return this.buf.toString('utf8', this.start, this.end);
  }

  /** The length-delimited field's bytes (a view, not a copy). */
  bytes(): Buffer {
    return this.buf.subarray(this.start, this.end);
  }

  /**
   * The field as a `map<string, string>` entry (key = 1, value = 2), put into `into` (made
   * when it is undefined) when `keep` takes its key; returns `into`. No cursor nor pair is
   * made, nor a value that is not kept: a Node's labels and annotations are read at every event.
   */
  mapEntryInto(into: Record<string, string> | undefined, keep?: (key: string) => boolean): Record<string, string> | undefined {
    // This cursor reads the entry's fields, then goes back to where it was (a malformed
    // entry throws, and the cursor is not used again).
    const pos = this.pos;
    const limit = this.limit;
    const no = this.no;
    const start = this.start;
    const end = this.end;
    this.pos = start;
    this.limit = end;
    let key = '';
    let valueStart = 0;
    let valueEnd = 0;
    while (this.next()) {
      if (this.no === 1) {
        key = this.text();
      } else if (this.no === 2) {
        valueStart = this.start;
        valueEnd = this.end;
      }
    }
    this.pos = pos;
    this.limit = limit;
    this.no = no;
    this.start = start;
    this.end = end;
    this.value = 0;
    if (keep && !keep(key)) return into;
    const record = into ?? {};
    record[key] = this.buf.toString('utf8', valueStart, valueEnd);
    return record;
  }

  /**
   * The field as a metav1.Time (seconds = 1, nanos = 2), as the API server writes it in JSON:
   * RFC 3339 in UTC, whole seconds. The zero time (year 1: negative seconds, which JSON writes
   * as null) is undefined.
   */
  time(): string | undefined {
    let seconds = 0;
    const e = this.nested();
    while (e.next()) if (e.no === 1) seconds = e.value;
    // A negative int64 arrives as a ten-byte varint: a number of 2^63 or more here. Beyond
    // 8.64e12 seconds a Date is invalid (and toISOString would throw).
    if (seconds <= 0 || seconds > 8.64e12) return undefined;
    let text = TIMES.get(seconds);
    if (text === undefined) {
      // Whole seconds, as the API server writes them in JSON: drop toISOString's ".000".
      text = `${new Date(seconds * 1000).toISOString().slice(0, -5)}Z`;
      if (TIMES.size >= MAX_TIMES) TIMES.clear();
      TIMES.set(seconds, text);
    }
    return text;
  }

  private varint(): number {
    const buf = this.buf;
    if (this.pos >= this.limit) throw new Error('protobuf: truncated varint');
    let byte = buf[this.pos++];
    if (byte < 0x80) return byte; // most keys and lengths are one byte
    let value = byte % 128;
    let scale = 128;
    for (;;) {
      if (this.pos >= this.limit) throw new Error('protobuf: truncated varint');
      byte = buf[this.pos++];
      // Beyond 2^53 precision is lost; no field read here (lengths, counts, seconds) gets near.
      value += (byte % 128) * scale;
      if (byte < 0x80) return value;
      scale *= 128;
      if (scale > 2 ** 70) throw new Error('protobuf: varint too long');
    }
  }
}

/**
 * Times already written out, by their seconds: a rollout's events carry the same few times
 * over and over (a Job's creation, its pod's start), and a Date and two strings per time and
 * event added up. Emptied when full.
 */
const TIMES = new Map<number, string>();
const MAX_TIMES = 4096;

/** The `k8s\0` prefix of every object the API server encodes as protobuf. */
const MAGIC = [0x6b, 0x38, 0x73, 0x00];

/**
 * The object inside the API server's envelope: the magic prefix, then a runtime.Unknown
 * (typeMeta = 1, raw = 2).
 */
export function unwrap(buf: Buffer): Buffer {
  if (buf.length < 4 || buf[0] !== MAGIC[0] || buf[1] !== MAGIC[1] || buf[2] !== MAGIC[2] || buf[3] !== MAGIC[3]) throw new Error('protobuf: not a Kubernetes protobuf object (no k8s magic)');
  const f = new Fields(buf, 4);
  while (f.next()) if (f.no === 2) return f.bytes();
  return buf.subarray(0, 0);
}
