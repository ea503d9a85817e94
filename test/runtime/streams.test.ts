import { FrameSplitter, LineSplitter } from '../../src/shared/kube/kube';

// Watch streams arrive in chunks that end anywhere: inside a line or frame, inside a
// frame's length prefix, or several at once.

function chunked(data: Buffer, sizes: number[]): Buffer[] {
  const chunks: Buffer[] = [];
  let pos = 0;
  for (let i = 0; pos < data.length; i++) {
    const size = sizes[i % sizes.length];
    chunks.push(data.subarray(pos, pos + size));
    pos += size;
  }
  return chunks;
}

test('lines are whole whatever the chunk boundaries; blank lines are skipped', () => {
  const lines = ['{"a":1}', 'x'.repeat(5000), '{"é":"ü"}', '{}'];
  const data = Buffer.from(`${lines[0]}\n${lines[1]}\n\n${lines[2]}\n${lines[3]}\n`);
  for (const sizes of [[1], [3, 7], [4096], [data.length]]) {
    const splitter = new LineSplitter();
    // a multi-byte character split across chunks is joined before decoding
    expect(chunked(data, sizes).flatMap(c => splitter.push(c))).toEqual(lines);
  }
});

test('frames are whole whatever the chunk boundaries, the length prefix split too', () => {
  const payloads = [Buffer.from('first'), Buffer.alloc(0), Buffer.alloc(70_000, 7), Buffer.from('last')];
  const data = Buffer.concat(payloads.flatMap(p => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(p.length);
    return [length, p];
  }));
  for (const sizes of [[1], [2, 5], [3, 16384], [data.length]]) {
    const splitter = new FrameSplitter();
    const frames = chunked(data, sizes).flatMap(c => splitter.push(c));
    expect(frames.map(f => f.toString('hex'))).toEqual(payloads.map(p => p.toString('hex')));
  }
  // AND a frame not yet complete is held back
  const splitter = new FrameSplitter();
  expect(splitter.push(data.subarray(0, 6))).toEqual([]);
});
