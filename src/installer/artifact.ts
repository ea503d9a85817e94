import * as crypto from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import type { Writable } from 'stream';
import * as zlib from 'zlib';
import * as tar from 'tar';
import { fetchFailed } from './errors';

const SHIM_BINARY = /^containerd-shim-([a-z0-9][-a-z0-9]*)-v([0-9]+)$/;

interface ShimFacts {
  readonly name: string;
  readonly apiVersion: number;
  /** The sha256 of `data`. */
  readonly sha256?: string;
}

/**
 * The shim found in an artifact: a payload's file, or its bytes (a bare binary, or an archive
 * entry held in memory from the one pass that checked the archive: what extraction would
 * have written), which the installer writes to the host itself.
 */
export type ShimBinary = ShimFacts & ({ readonly file: string; readonly data?: undefined } | { readonly data: Buffer; readonly file?: undefined });

/** Whether the file starts with these bytes (a format's magic number). */
function startsWith(file: string, magic: number[]): boolean {
  const fd = fs.openSync(file, 'r');
  try {
    const head = Buffer.alloc(magic.length);
    fs.readSync(fd, head, 0, magic.length, 0);
    return head.equals(Buffer.from(magic));
  } finally {
    fs.closeSync(fd);
  }
}

const GZIP = [0x1f, 0x8b];
const ELF = [0x7f, 0x45, 0x4c, 0x46];

/** How much an archive may unpack to: a small artifact can hold a huge or countless files. */
export interface ExtractLimits {
  readonly maxBytes: number;
  readonly maxFiles: number;
}

/** What else than folders and regular files an archive may hold. */
export interface ArchiveRules {
  /**
   * Symbolic links that stay inside the archive's tree: a relative target that resolves,
   * from the link's folder, to a file or folder the archive holds, through no other link (a
   * payload's `libfoo.so.1 -> libfoo.so.1.2.3`). Absolute or escaping targets, dangling
   * links, links to links and entries below a link are refused. Hard links never pass.
   * @default false
   */
  readonly symlinks?: boolean;
}

/**
 * Extracts a .tar.gz into `dir`, refusing (not skipping) anything that could write outside
 * it or create special files (absolute paths, `..`, hard links, devices, FIFOs; symbolic
 * links unless `rules` let those that stay inside pass), or that would unpack to more than
 * `limits` allow. The archive is checked first, entry header by entry header, and the check
 * stops at the first entry over a limit: a decompression bomb is refused before it is
 * inflated, and nothing is written until the whole archive passed.
 */
export async function extractSafely(archive: string, dir: string, limits: ExtractLimits, rules: ArchiveRules = {}): Promise<void> {
  refuseProblems(await scanFile(archive, limits, () => false, undefined, rules));
  await new Promise<void>((resolve, reject) => {
    // chmod: the entries' modes, as tar.x's noChmod: false gave them (an executable shim stays executable).
    const unpack = new tar.Unpack({ cwd: dir, strict: true, preservePaths: false, chmod: true, preserveOwner: false });
    const input = fs.createReadStream(archive, { highWaterMark: CHUNK_BYTES });
    const gunzip = zlib.createGunzip({ chunkSize: CHUNK_BYTES });
    input.on('error', reject);
    gunzip.on('error', reject);
    unpack.on('error', reject);
    unpack.on('close', () => resolve());
    input.pipe(gunzip).pipe(unpack);
  });
}

function refuseProblems(scan: ArchiveScan): void {
  if (scan.problems.length === 0) return;
  const tooBig = scan.problems.some(p => p.startsWith('unpacks to more than'));
  throw fetchFailed(tooBig ? 'ArchiveTooLarge' : 'UnsafeArchive', `the artifact is refused: ${scan.problems.slice(0, 5).join('; ')}`);
}

/**
 * Large enough that a shim of some MB passes in a few chunks (zlib's 16 KB chunks cost more
 * than the inflating; tar's own inflater took twice as long for a shim of 9 MB).
 */
const CHUNK_BYTES = 1024 * 1024;

/** What one pass over a .tar.gz found. */
export interface ArchiveScan {
  /** Why the archive is refused (empty: it is not). */
  readonly problems: string[];
  /** The regular files it unpacks to, by normalised path, in archive order (a path given twice once). */
  readonly files: string[];
  /**
   * The regular files the scan was asked to keep, by normalised path: their bytes and
   * sha256, as extraction would write them (the last of two entries of one path wins, as there).
   */
  readonly kept: Map<string, { readonly data: Buffer; readonly sha256: string }>;
  /** Entries the scan was asked to keep but did not hold: more than it may hold (see scanArchive's `hold`). */
  readonly notHeld: string[];
}

/**
 * The most a scan of bytes not verified yet holds in memory (the download's own pass): an
 * archive that inflates a large "shim" must not fill the installer's memory (its pod's limit
 * is 512Mi, the extraction limit 1 GiB) before its sha256 is even checked. A larger shim is
 * read again from the verified file.
 */
export const UNVERIFIED_HOLD_BYTES = 128 * 1024 * 1024;

/** A pass over a .tar.gz fed through `input` (gzip bytes, in order); `result` never rejects. */
export interface ArchiveScanner {
  readonly input: Writable;
  readonly result: Promise<ArchiveScan>;
}

/**
 * Checks a .tar.gz as its bytes are written to `input` (as they come off the network, or
 * from a file), entry header by entry header: unsafe paths, links (see `rules`) and special
 * files, paths that are a file and a folder at once, and the limits, checked before an entry's data is
 * inflated (the scan stops at the first entry over a limit, so a decompression bomb is never
 * inflated). The entries `keep` picks are held in memory with their sha256, up to `hold` bytes
 * in all (those past it are listed in `notHeld`). No byte is written anywhere, and nothing
 * of the result may be used before the artifact's sha256 was checked: the scan may read
 * bytes that are not verified yet.
 */
export function scanArchive(limits: ExtractLimits, keep: (entryPath: string) => boolean, hold = UNVERIFIED_HOLD_BYTES,
  rules: ArchiveRules = {}): ArchiveScanner {
  const gunzip = zlib.createGunzip({ chunkSize: CHUNK_BYTES });
  const result = new Promise<ArchiveScan>(resolve => {
    const problems: string[] = [];
    const kept = new Map<string, { data: Buffer; sha256: string }>();
    const notHeld = new Set<string>();
    let held = 0;
    /** What each path is once extracted (its parent folders are folders), to refuse a path that is both. */
    const kinds = new Map<string, 'file' | 'folder' | 'link'>();
    /** Symbolic links (when allowed): path -> the path their target resolves to, checked once all entries are known. */
    const links = new Map<string, string>();
    const files: string[] = [];
    let entries = 0;
    let bytes = 0;
    let done = false;
    const finish = (problem?: string) => {
      if (done) return;
      done = true;
      if (problem) problems.push(problem);
      if (problems.length === 0) problems.push(...linkProblems(links, kinds));
      gunzip.destroy();
      // Files a later entry replaced by a folder are not kept (kept map entries were removed then).
      resolve({ problems, files: files.filter(f => kinds.get(f) === 'file'), kept, notHeld: [...notHeld] });
    };
    const claim = (p: string, kind: 'file' | 'folder' | 'link') => {
      const parts = p.split('/');
      for (let i = 1; i < parts.length; i++) {
        const parent = parts.slice(0, i).join('/');
        const parentKind = kinds.get(parent);
        if (parentKind === 'file' || parentKind === 'link') problems.push(`"${parent}" is both a ${parentKind} and a folder`);
        kinds.set(parent, 'folder');
      }
      const was = kinds.get(p);
      if (was !== undefined && was !== kind && (was === 'folder' || kind === 'folder')) {
        problems.push(`"${p}" is both a ${was === 'folder' ? kind : was} and a folder`);
      }
      if (kind !== 'link') links.delete(p);
      if (was === undefined && kind === 'file') files.push(p);
      kinds.set(p, kind);
    };
    const parser = new tar.Parser({
      strict: true,
      onReadEntry: entry => {
        const p = entry.path;
        if (path.isAbsolute(p) || p.split(/[\\/]/).includes('..')) problems.push(`unsafe path "${p}"`);
        const isFolder = entry.type === 'Directory';
        const isLink = entry.type === 'SymbolicLink' && rules.symlinks === true;
        if (!isFolder && !isLink && !['File', 'OldFile', 'ContiguousFile'].includes(entry.type)) problems.push(`${entry.type} entry "${p}"`);
        entries++;
        bytes += entry.size ?? 0;
        if (entries > limits.maxFiles) return finish(`unpacks to more than ${limits.maxFiles} files (--max-files)`);
        if (bytes > limits.maxBytes) return finish(`unpacks to more than ${limits.maxBytes} bytes (--max-extracted-size)`);
        const normalised = path.posix.normalize(p).replace(/\/+$/, '');
        if (isLink && problems.length === 0) {
          const target = linkTarget(normalised, entry.linkpath ?? '');
          if (typeof target === 'string') links.set(normalised, target);
          else problems.push(`symbolic link "${p}" -> "${entry.linkpath ?? ''}" ${target.problem}`);
        }
        if (normalised !== '.' && problems.length === 0) claim(normalised, isFolder ? 'folder' : isLink ? 'link' : 'file');
        const replaced = kept.get(normalised);
        if (replaced) held -= replaced.data.length;
        kept.delete(normalised);
        notHeld.delete(normalised);
        const wanted = !isFolder && !isLink && problems.length === 0 && keep(normalised);
        if (wanted && held + (entry.size ?? 0) > hold) {
          notHeld.add(normalised);
          entry.resume();
        } else if (wanted) {
          held += entry.size ?? 0;
          // The header's size was checked against the limits above; the parser delivers exactly that many bytes.
          const data = Buffer.allocUnsafe(entry.size ?? 0);
          const hash = crypto.createHash('sha256');
          let at = 0;
          entry.on('data', (chunk: Buffer) => {
            hash.update(chunk);
            at += chunk.copy(data, at);
          });
          entry.on('end', () => {
            if (at === data.length) kept.set(normalised, { data, sha256: hash.digest('hex') });
            else problems.push(`entry "${p}" holds ${at} bytes, not the ${data.length} its header says`);
          });
        } else {
          entry.resume();
        }
      },
    });
    parser.on('error', (e: Error) => finish(`not a valid tar.gz: ${e.message}`));
    parser.on('end', () => finish());
    gunzip.on('error', e => finish(`not a valid tar.gz: ${e.message}`));
    gunzip.pipe(parser);
  });
  return { input: gunzip, result };
}

/** The path a symbolic link's target resolves to inside the archive's tree, or why it does not stay there. */
function linkTarget(linkPath: string, target: string): string | { problem: string } {
  if (target === '') return { problem: 'has no target' };
  if (path.posix.isAbsolute(target) || target.includes('\\')) return { problem: 'is absolute (only relative targets inside the archive pass)' };
  const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(linkPath), target)).replace(/\/+$/, '');
  if (resolved === '..' || resolved.startsWith('../')) return { problem: 'leaves the archive' };
  if (resolved === '.' || resolved === '') return { problem: 'points at the archive\'s top folder' };
  return resolved;
}

/**
 * Links whose target the archive does not hold (dangling), or reaches through another link
 * (a chain, or a folder that is a link): refused, so that every link of an installed tree
 * resolves, inside it, at once.
 */
function linkProblems(links: Map<string, string>, kinds: Map<string, 'file' | 'folder' | 'link'>): string[] {
  const problems: string[] = [];
  for (const [link, target] of links) {
    const parts = target.split('/');
    const through = parts.map((_, i) => parts.slice(0, i + 1).join('/')).find(prefix => kinds.get(prefix) === 'link');
    if (through !== undefined) problems.push(`symbolic link "${link}" -> "${target}" goes through another link ("${through}")`);
    else if (!kinds.has(target)) problems.push(`symbolic link "${link}" -> "${target}" points at nothing the archive holds`);
  }
  return problems;
}

/** One pass over a .tar.gz file (see scanArchive). */
function scanFile(archive: string, limits: ExtractLimits, keep: (entryPath: string) => boolean, hold?: number,
  rules?: ArchiveRules): Promise<ArchiveScan> {
  const scanner = scanArchive(limits, keep, hold, rules);
  const input = fs.createReadStream(archive, { highWaterMark: CHUNK_BYTES });
  input.on('error', e => scanner.input.destroy(new Error(`cannot read the artifact: ${e.message}`)));
  input.pipe(scanner.input);
  return scanner.result.finally(() => input.destroy());
}

/**
 * Whether a shim binary's file name is the one for `shimName`: `containerd-shim-<shimName>-v<N>`,
 * or `containerd-shim-<shimName>` when the name carries its version itself, as upstream
 * runtime-class-manager's manifests name their handlers (`spin-v2` for containerd-shim-spin-v2).
 */
export function shimFileMatches(fileName: string, shimName: string): boolean {
  const m = SHIM_BINARY.exec(fileName);
  return m !== null && (m[1] === shimName || `${m[1]}-v${m[2]}` === shimName);
}

/** Whether an archive entry (its normalised path) is the shim of `shimName` (see shimFileMatches). */
export function isShimEntry(shimName: string): (entryPath: string) => boolean {
  return p => shimFileMatches(path.posix.basename(p), shimName);
}

/**
 * Finds `containerd-shim-<name>-v<N>` in the artifact (a tarball or the bare binary). A
 * tarball is checked in one pass that keeps the shim's bytes (nothing is extracted): the
 * pass `scanned` ran as the artifact downloaded, when given (it must have read exactly the
 * bytes of `artifact`), or one over the file.
 */
export async function unpackShim(artifact: string, shimName: string, sourceName: string,
  limits: ExtractLimits, scanned?: Promise<ArchiveScan>): Promise<ShimBinary> {
  if (startsWith(artifact, GZIP)) {
    let scan = await (scanned ?? scanFile(artifact, limits, isShimEntry(shimName), Infinity));
    refuseProblems(scan);
    // A shim too large to hold while unverified is read from the file, verified by now.
    if (scan.notHeld.length > 0) {
      scan = await scanFile(artifact, limits, isShimEntry(shimName), Infinity);
      refuseProblems(scan);
    }
    const candidates: (ShimBinary & { entryPath: string })[] = [];
    for (const [entryPath, { data, sha256 }] of scan.kept) {
      const name = path.posix.basename(entryPath);
      candidates.push({ data, sha256, name, apiVersion: Number(SHIM_BINARY.exec(name)![2]), entryPath });
    }
    if (candidates.length === 0) {
      throw fetchFailed('ShimNotFound', `the archive has no containerd-shim-${shimName}-v<N>${/-v[0-9]+$/.test(shimName) ? ` nor containerd-shim-${shimName}` : ''}; it holds: ${scan.files.slice(0, 20).join(', ') || 'nothing'}`);
    }
    if (candidates.length > 1) {
      throw fetchFailed('AmbiguousShim', `the archive holds several shims named ${shimName}: ${candidates.map(c => c.entryPath).join(', ')}`);
    }
    const { entryPath: _, ...shim } = candidates[0];
    return shim;
  }
  if (startsWith(artifact, ELF)) {
    // A URL's path, or an image's path (`reference:/path`) for an artifact copied out of an image.
    const base = path.basename(URL.canParse(sourceName) && /^https?:/.test(sourceName) ? new URL(sourceName).pathname : sourceName);
    const m = SHIM_BINARY.exec(base);
    // A bare binary is named by its URL, or taken as the shim when the URL says nothing.
    const name = m && shimFileMatches(base, shimName) ? base : /-v[0-9]+$/.test(shimName) ? `containerd-shim-${shimName}` : `containerd-shim-${shimName}-v2`;
    const data = fs.readFileSync(artifact);
    return { data, sha256: crypto.createHash('sha256').update(data).digest('hex'), name, apiVersion: Number(SHIM_BINARY.exec(name)![2]) };
  }
  throw fetchFailed('UnsupportedArtifact', 'the artifact is neither a .tar.gz nor an ELF binary');
}

/** A multi-file payload, unpacked in the installer's scratch folder. */
export interface Payload {
  /** The unpacked tree. */
  readonly dir: string;
  /** The shim inside it (`file` is its path in the scratch folder). */
  readonly shim: ShimBinary;
}

/**
 * Unpacks a payload (.tar.gz of several files, e.g. a runc shim, runsc and a wrapper) and
 * finds its shim at `shimPath`. The same archive checks as for a single shim apply, except
 * that symbolic links staying inside the payload pass (a library's soname link beside its
 * file, as Debian's packages ship them).
 */
export async function unpackPayload(artifact: string, workDir: string, shimPath: string, limits: ExtractLimits): Promise<Payload> {
  if (!startsWith(artifact, GZIP)) throw fetchFailed('UnsupportedArtifact', 'a payload must be a .tar.gz');
  const dir = path.join(workDir, 'payload');
  fs.mkdirSync(dir, { recursive: true });
  await extractSafely(artifact, dir, limits, { symlinks: true });
  return payloadIn(dir, shimPath);
}

/** The shim of an unpacked payload folder, checked to be a regular file inside it. */
export function payloadIn(dir: string, shimPath: string): Payload {
  const file = path.join(dir, shimPath);
  const stat = fs.lstatSync(file, { throwIfNoEntry: false });
  if (stat?.isSymbolicLink()) throw fetchFailed('ShimNotFound', `the payload's ${shimPath} is a symbolic link; the shim must be a regular file`);
  if (!stat?.isFile()) {
    const found = treeFiles(dir).slice(0, 20).join(', ') || 'nothing';
    throw fetchFailed('ShimNotFound', `the payload has no file ${shimPath}; it holds: ${found}`);
  }
  const name = path.basename(shimPath);
  return { dir, shim: { file, name, apiVersion: Number(SHIM_BINARY.exec(name)?.[2] ?? 2) } };
}

/** Every regular file under `dir`, relative and sorted (the payload's manifest order). */
export function treeFiles(dir: string): string[] {
  const files: string[] = [];
  const walk = (d: string) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, entry.name);
      if (entry.isDirectory()) walk(full);
      else files.push(path.relative(dir, full));
    }
  };
  walk(dir);
  return files.sort();
}

/**
 * A digest of a folder's content: each file's relative path, type, permission bits and
 * sha256 (a link's target). Installed payloads are checked against it, as single binaries
 * against their hash. Files are read in chunks: a payload's 130 MB library is never held whole.
 */
export function treeDigest(dir: string): string {
  const hash = crypto.createHash('sha256');
  const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
  for (const rel of treeFiles(dir)) {
    const full = path.join(dir, rel);
    const stat = fs.lstatSync(full);
    const kind = stat.isFile() ? 'f' : stat.isSymbolicLink() ? 'l' : 'o';
    const content = stat.isFile() ? fileSha256(full, chunk)
      : stat.isSymbolicLink() ? fs.readlinkSync(full) : '';
    hash.update(`${rel}\t${kind}\t${(stat.mode % 0o1000).toString(8)}\t${content}\n`);
  }
  return hash.digest('hex');
}

/** A file's sha256, read through `chunk` (synchronously, as the digest's callers are). */
function fileSha256(file: string, chunk: Buffer): string {
  const hash = crypto.createHash('sha256');
  const fd = fs.openSync(file, 'r');
  try {
    for (let n = fs.readSync(fd, chunk, 0, chunk.length, null); n > 0; n = fs.readSync(fd, chunk, 0, chunk.length, null)) {
      hash.update(chunk.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
  return hash.digest('hex');
}
