import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { scanArchive, isShimEntry, UNVERIFIED_HOLD_BYTES, unpackShim } from '../../src/installer/artifact';

// The shim's bytes and sha256 are taken in the one pass that checks the archive (nothing is
// extracted): they must be the file an extraction writes, however the archive names it. GNU
// tar is the oracle that writes the archives and extracts them.

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
] as Array<[string, string, Array<[string, Buffer]>, ((p: string) => string) | undefined]>)('%s: the bytes and hash are the extracted file\'s', async (_what, name, entries, names) => {
  const file = archive(name, entries, names);
  const dir = fs.mkdtempSync(path.join(work, 'out-'));
  execFileSync('tar', ['-xzf', file, '-C', dir]);
  const extracted = fs.readFileSync(path.join(dir, entries[entries.length - 1][0]));
  const shim = await unpackShim(file, 'rcmtest', `https://example.com/${name}.tgz`, limits);
  expect(shim.data).toEqual(extracted);
  expect(shim.sha256).toBe(sha256(extracted));
  expect(shim.sha256).toBe(sha256(entries[entries.length - 1][1]));
});

test('a path that is a file in one entry and a folder in another is refused (what extraction makes of it depends on the tool)', async () => {
  // GIVEN an archive with a file "bin", then "bin/containerd-shim-rcmtest-v2"
  const src = fs.mkdtempSync(path.join(work, 'src-'));
  const tarFile = path.join(work, 'both.tar');
  fs.writeFileSync(path.join(src, 'bin'), 'a file');
  execFileSync('tar', ['-cf', tarFile, '-C', src, 'bin']);
  fs.rmSync(path.join(src, 'bin'));
  fs.mkdirSync(path.join(src, 'bin'));
  fs.writeFileSync(path.join(src, 'bin', 'containerd-shim-rcmtest-v2'), 'shim', { mode: 0o755 });
  execFileSync('tar', ['-rf', tarFile, '-C', src, 'bin/containerd-shim-rcmtest-v2']);
  execFileSync('gzip', ['-f', tarFile]);
  // WHEN the shim is looked for THEN the archive is refused
  await expect(unpackShim(`${tarFile}.gz`, 'rcmtest', 'https://example.com/both.tgz', limits))
    .rejects.toThrow(/refused: "bin" is both a file and a folder/);
});

/** The scan a download runs, fed from a file as the network would feed it. */
function scanAsDownloaded(file: string, scanLimits: typeof limits, hold?: number) {
  const scanner = scanArchive(scanLimits, isShimEntry('rcmtest'), hold);
  fs.createReadStream(file).pipe(scanner.input);
  return scanner.result;
}

test('a shim larger than what a scan of unverified bytes may hold is not held, and is read from the verified file instead', async () => {
  // GIVEN an archive whose shim is 3 MiB, scanned as it downloads with room for 1 MiB
  const data = crypto.randomBytes(3 * 1024 * 1024);
  const file = archive('large', [['containerd-shim-rcmtest-v2', data]]);
  const scan = await scanAsDownloaded(file, limits, 1024 * 1024);
  // THEN the download's scan holds nothing of it, and says so
  expect(scan.problems).toEqual([]);
  expect(scan.kept.size).toBe(0);
  expect(scan.notHeld).toEqual(['containerd-shim-rcmtest-v2']);
  // AND the shim, once the artifact is verified, is read from the file: the same bytes and hash
  const shim = await unpackShim(file, 'rcmtest', 'https://example.com/large.tgz', limits, Promise.resolve(scan));
  expect(shim.data.equals(data)).toBe(true);
  expect(shim.sha256).toBe(sha256(data));
});

test('an archive that inflates to a huge "shim" does not fill memory before its sha256 is checked', async () => {
  // GIVEN a 1 MB .tar.gz whose shim entry inflates to 600 MiB of zeros (within a 1 GiB extraction limit)
  const src = fs.mkdtempSync(path.join(work, 'bomb-'));
  fs.writeFileSync(path.join(src, 'containerd-shim-rcmtest-v2'), '');
  fs.truncateSync(path.join(src, 'containerd-shim-rcmtest-v2'), 600 * 1024 * 1024);
  const tarFile = path.join(work, 'bomb.tar.gz');
  execFileSync('tar', ['-czf', tarFile, '-C', src, 'containerd-shim-rcmtest-v2']);
  fs.rmSync(src, { recursive: true });
  expect(fs.statSync(tarFile).size).toBeLessThan(2 * 1024 * 1024);
  // WHEN the download's scan reads it
  const before = process.memoryUsage().rss;
  let peak = before;
  const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss); }, 5);
  const scan = await scanAsDownloaded(tarFile, { maxBytes: 1024 * 1024 * 1024, maxFiles: 100 });
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage().rss);
  // THEN it holds nothing of the entry (more than UNVERIFIED_HOLD_BYTES), and memory grew by far less than the entry
  expect(scan.kept.size).toBe(0);
  expect(scan.notHeld).toEqual(['containerd-shim-rcmtest-v2']);
  expect(peak - before).toBeLessThan(UNVERIFIED_HOLD_BYTES);
}, 60_000);
