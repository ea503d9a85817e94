import * as crypto from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import * as zlib from 'zlib';
import * as tar from 'tar';
import { fetchFailed } from './errors';

const SHIM_BINARY = /^containerd-shim-([a-z0-9][-a-z0-9]*)-v([0-9]+)$/;

export interface ShimBinary {
  readonly file: string;
  readonly name: string;
  readonly apiVersion: number;
  /** Its sha256, when it was hashed as the archive was checked (the bytes extracted to `file`). */
  readonly sha256?: string;
}

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

/**
 * Extracts a .tar.gz into `dir`, refusing (not skipping) anything that could write outside
 * it or create special files (absolute paths, `..`, links, devices, FIFOs), or that would
 * unpack to more than `limits` allow. The archive is checked first, entry header by entry
 * header, and the check stops at the first entry over a limit: a decompression bomb is
 * refused before it is inflated, and nothing is written until the whole archive passed.
 */
export async function extractSafely(archive: string, dir: string, limits: ExtractLimits,
  hashed: (entryPath: string) => boolean = () => false): Promise<Map<string, string>> {
  const { problems, sha256 } = await checkArchive(archive, limits, hashed);
  if (problems.length > 0) {
    const tooBig = problems.some(p => p.startsWith('unpacks to more than'));
    throw fetchFailed(tooBig ? 'ArchiveTooLarge' : 'UnsafeArchive', `the artifact is refused: ${problems.slice(0, 5).join('; ')}`);
  }
  await new Promise<void>((resolve, reject) => {
    // chmod: the entries' modes, as tar.x's noChmod: false gave them (an executable shim stays executable).
    const unpack = new tar.Unpack({ cwd: dir, strict: true, preservePaths: false, chmod: true, preserveOwner: false });
    const { input, gunzip } = gunzipped(archive);
    input.on('error', reject);
    gunzip.on('error', reject);
    unpack.on('error', reject);
    unpack.on('close', () => resolve());
    gunzip.pipe(unpack);
  });
  return sha256;
}

/** Large enough that a shim of some MB passes in a few chunks (zlib's 16 KB chunks cost more than the inflating). */
const CHUNK_BYTES = 1024 * 1024;

/**
 * The archive, inflated by Node's zlib in large chunks. Both passes read it so: tar's own
 * inflater works in 16 KB pieces and took twice as long for a shim of 9 MB.
 */
function gunzipped(archive: string): { input: fs.ReadStream; gunzip: zlib.Gunzip } {
  const input = fs.createReadStream(archive, { highWaterMark: CHUNK_BYTES });
  const gunzip = zlib.createGunzip({ chunkSize: CHUNK_BYTES });
  input.pipe(gunzip);
  return { input, gunzip };
}

/**
 * The archive's problems, and the sha256 of the regular files `hashed` picks (by their
 * normalised path, as extraction writes them; the last of two entries of one path wins, as
 * there). Hashing them here, while the check reads them anyway, saves reading them again.
 */
function checkArchive(archive: string, limits: ExtractLimits,
  hashed: (entryPath: string) => boolean): Promise<{ problems: string[]; sha256: Map<string, string> }> {
  return new Promise(resolve => {
    const problems: string[] = [];
    const sha256 = new Map<string, string>();
    let files = 0;
    let bytes = 0;
    let done = false;
    const { input, gunzip } = gunzipped(archive);
    const finish = (problem?: string) => {
      if (done) return;
      done = true;
      if (problem) problems.push(problem);
      input.destroy();
      gunzip.destroy();
      resolve({ problems, sha256 });
    };
    const parser = new tar.Parser({
      strict: true,
      onReadEntry: entry => {
        const p = entry.path;
        if (path.isAbsolute(p) || p.split(/[\\/]/).includes('..')) problems.push(`unsafe path "${p}"`);
        if (!['File', 'OldFile', 'ContiguousFile', 'Directory'].includes(entry.type)) problems.push(`${entry.type} entry "${p}"`);
        files++;
        bytes += entry.size ?? 0;
        if (files > limits.maxFiles) return finish(`unpacks to more than ${limits.maxFiles} files (--max-files)`);
        if (bytes > limits.maxBytes) return finish(`unpacks to more than ${limits.maxBytes} bytes (--max-extracted-size)`);
        const normalised = path.posix.normalize(p);
        if (entry.type !== 'Directory' && hashed(normalised)) {
          const hash = crypto.createHash('sha256');
          entry.on('data', (chunk: Buffer) => hash.update(chunk));
          entry.on('end', () => sha256.set(normalised, hash.digest('hex')));
        } else {
          sha256.delete(normalised);
          entry.resume();
        }
      },
    });
    parser.on('error', (e: Error) => finish(`not a valid tar.gz: ${e.message}`));
    parser.on('end', () => finish());
    input.on('error', e => finish(`cannot read the artifact: ${e.message}`));
    gunzip.on('error', e => finish(`not a valid tar.gz: ${e.message}`));
    gunzip.pipe(parser);
  });
}

/** Finds `containerd-shim-<name>-v<N>` in the artifact (a tarball or the bare binary). */
export async function unpackShim(artifact: string, workDir: string, shimName: string, sourceName: string,
  limits: ExtractLimits): Promise<ShimBinary> {
  const found: string[] = [];
  const candidates: ShimBinary[] = [];
  if (startsWith(artifact, GZIP)) {
    const dir = path.join(workDir, 'extracted');
    fs.mkdirSync(dir, { recursive: true });
    const isShim = (p: string) => SHIM_BINARY.exec(path.posix.basename(p))?.[1] === shimName;
    const sha256 = await extractSafely(artifact, dir, limits, isShim);
    const walk = (d: string) => {
      for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
        const full = path.join(d, entry.name);
        if (entry.isDirectory()) {walk(full);} else if (entry.isFile()) {
          const relative = path.relative(dir, full);
          found.push(relative);
          const m = SHIM_BINARY.exec(entry.name);
          if (m && m[1] === shimName) candidates.push({ file: full, name: entry.name, apiVersion: Number(m[2]), sha256: sha256.get(relative.split(path.sep).join('/')) });
        }
      }
    };
    walk(dir);
  } else if (startsWith(artifact, ELF)) {
    // A URL's path, or an image's path (`reference:/path`) for an artifact copied out of an image.
    const base = path.basename(URL.canParse(sourceName) && /^https?:/.test(sourceName) ? new URL(sourceName).pathname : sourceName);
    const m = SHIM_BINARY.exec(base);
    // A bare binary is named by its URL, or taken as the shim when the URL says nothing.
    const name = m && m[1] === shimName ? base : `containerd-shim-${shimName}-v2`;
    return { file: artifact, name, apiVersion: Number(SHIM_BINARY.exec(name)![2]) };
  } else {
    throw fetchFailed('UnsupportedArtifact', 'the artifact is neither a .tar.gz nor an ELF binary');
  }
  if (candidates.length === 0) {
    throw fetchFailed('ShimNotFound', `the archive has no containerd-shim-${shimName}-v<N>; it holds: ${found.slice(0, 20).join(', ') || 'nothing'}`);
  }
  if (candidates.length > 1) {
    throw fetchFailed('AmbiguousShim', `the archive holds several shims named ${shimName}: ${candidates.map(c => c.name).join(', ')}`);
  }
  return candidates[0];
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
 * finds its shim at `shimPath`. The same archive checks as for a single shim apply.
 */
export async function unpackPayload(artifact: string, workDir: string, shimPath: string, limits: ExtractLimits): Promise<Payload> {
  if (!startsWith(artifact, GZIP)) throw fetchFailed('UnsupportedArtifact', 'a payload must be a .tar.gz');
  const dir = path.join(workDir, 'payload');
  fs.mkdirSync(dir, { recursive: true });
  await extractSafely(artifact, dir, limits);
  return payloadIn(dir, shimPath);
}

/** The shim of an unpacked payload folder, checked to be a regular file inside it. */
export function payloadIn(dir: string, shimPath: string): Payload {
  const file = path.join(dir, shimPath);
  const stat = fs.lstatSync(file, { throwIfNoEntry: false });
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
 * sha256. Installed payloads are checked against it, as single binaries against their hash.
 */
export function treeDigest(dir: string): string {
  const hash = crypto.createHash('sha256');
  for (const rel of treeFiles(dir)) {
    const full = path.join(dir, rel);
    const stat = fs.lstatSync(full);
    const kind = stat.isFile() ? 'f' : stat.isSymbolicLink() ? 'l' : 'o';
    const content = stat.isFile() ? crypto.createHash('sha256').update(fs.readFileSync(full)).digest('hex')
      : stat.isSymbolicLink() ? fs.readlinkSync(full) : '';
    hash.update(`${rel}\t${kind}\t${(stat.mode % 0o1000).toString(8)}\t${content}\n`);
  }
  return hash.digest('hex');
}
