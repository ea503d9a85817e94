import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { unpackShim } from '../../src/installer/artifact';

// The shim's sha256 is taken while the archive is checked, from the bytes extraction then
// writes: it must be the extracted file's, however the archive names it. GNU tar is the
// oracle that writes the archives.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-archive-hash-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));
const limits = { maxBytes: 64 * 1024 * 1024, maxFiles: 100 };
const sha256 = (data: Buffer) => crypto.createHash('sha256').update(data).digest('hex');

/** A .tar.gz made by GNU tar from `entries` (path -> bytes), appended in this order; `names` is how each path is given to tar. */
function archive(name: string, entries: Array<[string, Buffer]>, names: (p: string) => string = p => p): string {
  const src = fs.mkdtempSync(path.join(work, 'src-'));
  const tarFile = path.join(work, `${name}.tar`);
  fs.rmSync(tarFile, { force: true });
  for (const [entry, data] of entries) {
    fs.mkdirSync(path.dirname(path.join(src, entry)), { recursive: true });
    fs.writeFileSync(path.join(src, entry), data, { mode: 0o755 });
    // appended one by one: the same path twice is two entries, the later one wins
    execFileSync('tar', ['-rf', tarFile, '-C', src, names(entry)]);
  }
  execFileSync('gzip', ['-f', tarFile]);
  return `${tarFile}.gz`;
}

test.each([
  ['a plain name', 'plain', [['containerd-shim-rcmtest-v2', Buffer.from('shim bytes\n')]], undefined],
  ['a ./ prefix', 'dotslash', [['containerd-shim-rcmtest-v2', Buffer.from('dot slash\n')]], (p: string) => `./${p}`],
  ['a folder, beside other files', 'nested', [['README', Buffer.from('docs')], ['bin/containerd-shim-rcmtest-v2', Buffer.from('nested shim\n')]], undefined],
  ['the same path twice (the later entry is extracted)', 'twice', [
    ['containerd-shim-rcmtest-v2', Buffer.from('first\n')],
    ['containerd-shim-rcmtest-v2', Buffer.from('second, extracted\n')],
  ], undefined],
] as Array<[string, string, Array<[string, Buffer]>, ((p: string) => string) | undefined]>)('%s: the hash is the extracted file\'s', async (_what, name, entries, names) => {
  const file = archive(name, entries, names);
  const dir = fs.mkdtempSync(path.join(work, 'out-'));
  const shim = await unpackShim(file, dir, 'rcmtest', `https://example.com/${name}.tgz`, limits);
  expect(shim.sha256).toBe(sha256(fs.readFileSync(shim.file)));
  expect(shim.sha256).toBe(sha256(entries[entries.length - 1][1]));
});
