import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { treeDigest, treeFiles, unpackPayload, unpackShim } from '../../src/installer/artifact';

// Payloads may hold symbolic links that stay inside them (a library's soname link beside its
// file, as Debian's packages ship them and as the crun + WasmEdge payload needs): they are
// extracted as links. Every other link is refused before anything is written, and a single
// shim's archive still takes no link at all. GNU tar writes the archives.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-payload-links-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));
const limits = { maxBytes: 64 * 1024 * 1024, maxFiles: 100 };
const SHIM = 'bin/containerd-shim-runc-v2';

type Entry = { file: string } | { link: string } | { dir: true };

let count = 0;
/**
 * A .tar.gz made by GNU tar, each entry appended in the order given (entries may name the
 * same path twice, or a path below a link, as a hostile archive can).
 */
function archive(entries: Array<[string, Entry]>): string {
  const tarFile = path.join(work, `a${++count}.tar`);
  for (const [name, entry] of entries) {
    const src = fs.mkdtempSync(path.join(work, 'src-'));
    fs.mkdirSync(path.dirname(path.join(src, name)), { recursive: true });
    if ('file' in entry) fs.writeFileSync(path.join(src, name), entry.file, { mode: 0o755 });
    else if ('link' in entry) fs.symlinkSync(entry.link, path.join(src, name));
    else fs.mkdirSync(path.join(src, name));
    execFileSync('tar', [fs.existsSync(tarFile) ? '-rf' : '-cf', tarFile, '-C', src, '--no-recursion', name]);
  }
  execFileSync('gzip', ['-f', tarFile]);
  return `${tarFile}.gz`;
}

function scratch(): string {
  return fs.mkdtempSync(path.join(work, 'scratch-'));
}

const shimFile: [string, Entry] = [SHIM, { file: 'the shim\n' }];

describe('symbolic links in a payload', () => {
  test('links that stay inside are extracted as links, and the digest covers their targets', async () => {
    // GIVEN a payload laid out like the crun + WasmEdge one: sonames linked to the libraries' files, a folder link, a link up and over
    const file = archive([
      shimFile,
      ['lib/libwasmedge.so.0.1.0', { file: 'library bytes' }],
      ['lib/libwasmedge.so.0', { link: 'libwasmedge.so.0.1.0' }],
      ['lib64', { link: 'lib' }],
      ['bin/libwasmedge.so', { link: '../lib/libwasmedge.so.0.1.0' }],
    ]);
    // WHEN it is unpacked as a payload
    const payload = await unpackPayload(file, scratch(), SHIM, limits);
    // THEN the links are links with their targets, the libraries' files files
    expect(fs.readlinkSync(path.join(payload.dir, 'lib/libwasmedge.so.0'))).toBe('libwasmedge.so.0.1.0');
    expect(fs.readlinkSync(path.join(payload.dir, 'lib64'))).toBe('lib');
    expect(fs.readlinkSync(path.join(payload.dir, 'bin/libwasmedge.so'))).toBe('../lib/libwasmedge.so.0.1.0');
    expect(fs.readFileSync(path.join(payload.dir, 'lib/libwasmedge.so.0'), 'utf8')).toBe('library bytes');
    expect(fs.lstatSync(path.join(payload.dir, 'lib/libwasmedge.so.0.1.0')).isFile()).toBe(true);
    expect(treeFiles(payload.dir)).toEqual([SHIM, 'bin/libwasmedge.so', 'lib/libwasmedge.so.0', 'lib/libwasmedge.so.0.1.0', 'lib64'].sort());
    // AND a link pointing elsewhere changes the payload's digest
    const before = treeDigest(payload.dir);
    fs.rmSync(path.join(payload.dir, 'lib64'));
    fs.symlinkSync('bin', path.join(payload.dir, 'lib64'));
    expect(treeDigest(payload.dir)).not.toBe(before);
  });

  test.each<[string, Array<[string, Entry]>, RegExp]>([
    ['an absolute target', [['lib/libc.so.6', { link: '/lib/x86_64-linux-gnu/libc.so.6' }]], /symbolic link "lib\/libc.so.6" -> "\/lib\/x86_64-linux-gnu\/libc.so.6" is absolute/],
    ['a target leaving the payload', [['lib/x', { link: '../../etc/passwd' }]], /symbolic link "lib\/x" -> "..\/..\/etc\/passwd" leaves the archive/],
    ['a dangling target', [['lib/libz.so.1', { link: 'libz.so.1.3.1' }]], /symbolic link "lib\/libz.so.1" -> "lib\/libz.so.1.3.1" points at nothing the archive holds/],
    ['a link to a link', [['lib/c', { file: 'c' }], ['lib/b', { link: 'c' }], ['lib/a', { link: 'b' }]], /symbolic link "lib\/a" -> "lib\/b" goes through another link \("lib\/b"\)/],
    ['a target through a folder link', [['lib/c', { file: 'c' }], ['lib64', { link: 'lib' }], ['x', { link: 'lib64/c' }]], /symbolic link "x" -> "lib64\/c" goes through another link \("lib64"\)/],
    ['an entry below a link', [['lib64', { link: 'bin' }], ['lib64/evil', { file: 'written through the link' }]], /"lib64" is both a link and a folder/],
    ['a link to the payload\'s top folder', [['root', { link: '.' }]], /symbolic link "root" -> "." points at the archive's top folder/],
    ['a link named like a folder already there', [['lib/x', { file: 'x' }], ['lib', { link: 'bin' }]], /"lib" is both a link and a folder/],
  ])('%s is refused and nothing is written', async (_what, entries, message) => {
    const file = archive([shimFile, ...entries]);
    const dir = scratch();
    await expect(unpackPayload(file, dir, SHIM, limits)).rejects.toMatchObject({ reason: 'UnsafeArchive', message: expect.stringMatching(message) });
    expect(fs.readdirSync(path.join(dir, 'payload'))).toEqual([]);
  });

  test('a hard link is refused', async () => {
    // GIVEN an archive where GNU tar stored a second name of the shim as a hard link
    const src = scratch();
    fs.mkdirSync(path.join(src, 'bin'));
    fs.writeFileSync(path.join(src, SHIM), 'the shim\n', { mode: 0o755 });
    fs.linkSync(path.join(src, SHIM), path.join(src, 'bin', 'again'));
    const file = path.join(work, 'hard.tgz');
    execFileSync('tar', ['-czf', file, '-C', src, SHIM, 'bin/again']);
    const dir = scratch();
    await expect(unpackPayload(file, dir, SHIM, limits)).rejects.toMatchObject({ reason: 'UnsafeArchive', message: expect.stringMatching(/Link entry "bin\/again"/) });
    expect(fs.readdirSync(path.join(dir, 'payload'))).toEqual([]);
  });

  test('the shim itself must be a regular file, not a link', async () => {
    const file = archive([['bin/real-shim', { file: 'the shim\n' }], [SHIM, { link: 'real-shim' }]]);
    await expect(unpackPayload(file, scratch(), SHIM, limits)).rejects.toMatchObject({ reason: 'ShimNotFound', message: expect.stringMatching(/is a symbolic link; the shim must be a regular file/) });
  });

  test('a single shim\'s archive still takes no link at all', async () => {
    const file = archive([['containerd-shim-rcmtest-v2', { file: 'the shim\n' }], ['lib/a', { file: 'a' }], ['lib/b', { link: 'a' }]]);
    await expect(unpackShim(file, 'rcmtest', 'https://example.com/shim.tgz', limits)).rejects.toThrow(/SymbolicLink entry "lib\/b"/);
  });

  test('links count against the file limit', async () => {
    const entries: Array<[string, Entry]> = [shimFile, ['lib/a', { file: 'a' }]];
    for (let i = 0; i < 5; i++) entries.push([`lib/link${i}`, { link: 'a' }]);
    await expect(unpackPayload(archive(entries), scratch(), SHIM, { ...limits, maxFiles: 6 }))
      .rejects.toMatchObject({ reason: 'ArchiveTooLarge', message: expect.stringMatching(/more than 6 files/) });
  });
});

test('the digest reads large files in chunks and gives what hashing each whole file gives', () => {
  // GIVEN a folder with a file of several read chunks (not a multiple of the chunk), a small file and a link
  const dir = scratch();
  fs.writeFileSync(path.join(dir, 'big'), crypto.randomBytes(3 * 1024 * 1024 + 12345), { mode: 0o644 });
  fs.writeFileSync(path.join(dir, 'small'), 'small', { mode: 0o755 });
  fs.symlinkSync('big', path.join(dir, 'link'));
  // THEN the digest is the one of whole-file hashes (what it was before it read in chunks)
  const whole = crypto.createHash('sha256');
  for (const rel of ['big', 'link', 'small']) {
    const full = path.join(dir, rel);
    const stat = fs.lstatSync(full);
    const content = stat.isFile() ? crypto.createHash('sha256').update(fs.readFileSync(full)).digest('hex') : fs.readlinkSync(full);
    whole.update(`${rel}\t${stat.isFile() ? 'f' : 'l'}\t${(stat.mode % 0o1000).toString(8)}\t${content}\n`);
  }
  expect(treeDigest(dir)).toBe(whole.digest('hex'));
});
