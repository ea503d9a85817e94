import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import * as tar from 'tar';
import { buildOciImage } from './oci-image';
import { CACHE_DIR, PAYLOAD_RUNC_SHIM } from './tools';

// WebAssembly for the suites, without a toolchain: hand-written WASI modules
// (test/fixtures/wasm/*.wat) assembled by Debian's wabt into images whose one layer holds the
// .wasm file, and a real Wasm runtime as a payload: Debian trixie's crun built with WasmEdge,
// its library closure and a wrapper, assembled by scripts/provision.sh (fetch_wasm_runtime).

/** The hand-written modules. */
export const WASM_FIXTURES = path.join(__dirname, '..', 'fixtures', 'wasm');

/** The payload folder provisioning assembles: bin/crun (the wrapper), bin/crun.real, lib/. */
export const WASM_RUNTIME_DIR = path.join(CACHE_DIR, 'wasm-crun-trixie');

/** The annotation that makes crun run a container's entrypoint as a Wasm module. */
export const WASM_VARIANT_ANNOTATION = 'module.wasm.image/variant';

/** Assembles `test/fixtures/wasm/<name>.wat` with wat2wasm into `dir`; returns the .wasm file. */
export function assembleWat(name: string, dir: string): string {
  const out = path.join(dir, `${name}.wasm`);
  try {
    execFileSync('wat2wasm', [path.join(WASM_FIXTURES, `${name}.wat`), '-o', out], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error('wat2wasm is missing: run scripts/provision.sh (Debian\'s wabt)');
    throw new Error(`wat2wasm ${name}.wat failed: ${String((e as any).stderr ?? e)}`);
  }
  return out;
}

export interface WasmImage {
  /** The image's name, fully qualified. */
  readonly reference: string;
  /** The OCI layout tarball for `ctr images import`. */
  readonly tarball: string;
  /** The module's path in the image (its entrypoint). */
  readonly entrypoint: string;
}

/**
 * An image of one module: a single layer holding `/<name>.wasm` (executable), the entrypoint.
 * Nothing else is in it: no shell, no libc, so only a Wasm runtime can start it.
 */
export async function buildWasmImage(name: string, dir: string): Promise<WasmImage> {
  const module = assembleWat(name, dir);
  const entrypoint = `/${name}.wasm`;
  const tarball = path.join(dir, `wasm-${name}.tar`);
  const reference = await buildOciImage({
    name: `docker.io/library/rcm-wasm-${name}:test`,
    files: [{ source: module, target: entrypoint, mode: 0o755 }],
    entrypoint: [entrypoint],
  }, tarball);
  return { reference, tarball, entrypoint };
}

export interface WasmPayload {
  /** The .tar.gz. */
  readonly file: string;
  readonly sha256: string;
  /** Bytes of the archive, and of what it unpacks to (files only, links not counted). */
  readonly archiveBytes: number;
  readonly unpackedBytes: number;
  /** Regular files and symbolic links in it. */
  readonly files: number;
  readonly links: number;
}

/**
 * The crun + WasmEdge payload as a .tar.gz: the provisioned folder (links kept as links) plus
 * containerd's runc shim as `bin/containerd-shim-runc-v2`, which drives `bin/crun` through
 * the handler's `BinaryName`.
 */
export async function buildWasmPayload(file: string, shim = PAYLOAD_RUNC_SHIM): Promise<WasmPayload> {
  if (!fs.existsSync(path.join(WASM_RUNTIME_DIR, 'bin', 'crun'))) throw new Error(`${WASM_RUNTIME_DIR} is missing: run scripts/provision.sh`);
  const stage = fs.mkdtempSync(`${file}.stage-`);
  try {
    fs.cpSync(WASM_RUNTIME_DIR, stage, { recursive: true, verbatimSymlinks: true });
    fs.copyFileSync(shim, path.join(stage, 'bin', 'containerd-shim-runc-v2'));
    fs.chmodSync(path.join(stage, 'bin', 'containerd-shim-runc-v2'), 0o755);
    let unpackedBytes = 0;
    let files = 0;
    let links = 0;
    for (const rel of fs.readdirSync(stage, { recursive: true }).map(String)) {
      const stat = fs.lstatSync(path.join(stage, rel));
      if (stat.isFile()) {
        files++;
        unpackedBytes += stat.size;
      } else if (stat.isSymbolicLink()) {
        links++;
      }
    }
    await tar.c({ file, cwd: stage, gzip: true, portable: true }, fs.readdirSync(stage).sort());
    const archive = fs.readFileSync(file);
    return {
      file,
      sha256: crypto.createHash('sha256').update(archive).digest('hex'),
      archiveBytes: archive.length,
      unpackedBytes,
      files,
      links,
    };
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

// ---- runwasi's wasmtime shim (containerd-shim-wasmtime-v1), the shape users install

/** The folder provisioning built runwasi's wasmtime shim into (scripts/stack/build-wasm-shim.sh, cached by its sources' hash). */
export function runwasiShimDir(): string {
  const script = path.join(__dirname, '..', '..', 'scripts', 'stack', 'build-wasm-shim.sh');
  try {
    const out = execFileSync('bash', [script, '--cached-only'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return out.trim().split('\n').pop()!;
  } catch (e) {
    throw new Error(`runwasi's wasmtime shim is not built: run scripts/provision.sh (${String((e as any).stderr ?? e).trim()})`);
  }
}

/**
 * A release tarball as its project publishes it: one binary at the top of a .tar.gz. runwasi
 * publishes `containerd-shim-wasmtime-x86_64-linux-musl.tar.gz` holding
 * `containerd-shim-wasmtime-v1`; Spin's shim `containerd-shim-spin-v2-linux-x86_64.tar.gz` holding
 * `containerd-shim-spin-v2`. Spin's own shim cannot be built here (git dependencies): its release
 * is stood in for by the same wasmtime shim under Spin's binary name, which exercises the
 * SpinKube path (handler, RuntimeClass, runtime name from the binary) but not Spin's runtime.
 */
export const SHIM_RELEASES = {
  wasmtime: { tarball: 'containerd-shim-wasmtime-x86_64-linux-musl.tar.gz', binary: 'containerd-shim-wasmtime-v1' },
  spinStandIn: { tarball: 'containerd-shim-spin-v2-linux-x86_64.tar.gz', binary: 'containerd-shim-spin-v2' },
} as const;

export interface ShimRelease {
  /** The .tar.gz, named as the project names its release asset. */
  readonly file: string;
  readonly sha256: string;
  /** The sha256 of the binary inside. */
  readonly binarySha256: string;
  readonly binary: string;
}

/** Packs runwasi's shim, built here, as `release` names it, into `dir`. */
export async function packShimRelease(dir: string, release: { readonly tarball: string; readonly binary: string }): Promise<ShimRelease> {
  const stage = fs.mkdtempSync(path.join(dir, 'release-'));
  try {
    const binary = path.join(stage, release.binary);
    fs.copyFileSync(path.join(runwasiShimDir(), SHIM_RELEASES.wasmtime.binary), binary);
    fs.chmodSync(binary, 0o755);
    const file = path.join(dir, release.tarball);
    await tar.c({ file, cwd: stage, gzip: true, portable: true }, [release.binary]);
    const sha = (f: string) => crypto.createHash('sha256').update(fs.readFileSync(f)).digest('hex');
    return { file, sha256: sha(file), binarySha256: sha(binary), binary: release.binary };
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

/**
 * The Shim of the upstream project's sample, as published (a platforms list with the release
 * tarball's URL and sha256), for a runwasi-style shim: applied as a plain manifest.
 */
export function upstreamShimManifest(name: string, handler: string, runtimeClass: string, location: string, sha256: string,
  nodeSelector: Record<string, string> = { 'kubernetes.io/os': 'linux' }): object {
  return {
    apiVersion: 'runtime.spinkube.dev/v1alpha1',
    kind: 'Shim',
    metadata: { name, labels: { 'app.kubernetes.io/name': name } },
    spec: {
      nodeSelector,
      fetchStrategy: { type: 'anonymousHttp', platforms: [{ os: 'linux', arch: 'x86_64', location, sha256 }] },
      runtimeClass: { name: runtimeClass, handler },
      rolloutStrategy: { type: 'recreate' },
    },
  };
}

/** The Wasm layer media type of the OCI artifacts runwasi's shims read (besides the component layer type). */
export const WASM_LAYER_MEDIA_TYPE = 'application/wasm';

/**
 * A module as an OCI artifact, the second way runwasi consumes Wasm: a config with
 * `architecture: wasm` and no file system layers (no diff_ids), and one layer that is the
 * .wasm file itself, of media type `application/wasm`. The shim finds the module in the layer
 * (through containerd's content store): the root file system is empty. The config still names
 * an entrypoint, `/<name>.wasm`, a file that does not exist there: containerd's CRI refuses to
 * make a container with no command ("no command specified").
 */
export async function buildWasmArtifact(name: string, dir: string): Promise<WasmImage> {
  const module = fs.readFileSync(assembleWat(name, dir));
  const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');
  const config = Buffer.from(JSON.stringify({ architecture: 'wasm', os: 'wasip1', rootfs: { type: 'layers', diff_ids: [] }, config: { Entrypoint: [`/${name}.wasm`] } }));
  const manifest = Buffer.from(JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: `sha256:${sha(config)}`, size: config.length },
    layers: [{ mediaType: WASM_LAYER_MEDIA_TYPE, digest: `sha256:${sha(module)}`, size: module.length }],
  }));
  const reference = `docker.io/library/rcm-wasm-artifact-${name}:test`;
  const layout = fs.mkdtempSync(path.join(dir, 'artifact-'));
  try {
    fs.mkdirSync(path.join(layout, 'blobs', 'sha256'), { recursive: true });
    for (const blob of [module, config, manifest]) fs.writeFileSync(path.join(layout, 'blobs', 'sha256', sha(blob)), blob);
    fs.writeFileSync(path.join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    fs.writeFileSync(path.join(layout, 'index.json'), JSON.stringify({
      schemaVersion: 2,
      manifests: [{
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        digest: `sha256:${sha(manifest)}`,
        size: manifest.length,
        annotations: { 'io.containerd.image.name': reference, 'org.opencontainers.image.ref.name': 'test' },
      }],
    }));
    const tarball = path.join(dir, `wasm-artifact-${name}.tar`);
    await tar.c({ file: tarball, cwd: layout, portable: true }, ['oci-layout', 'index.json', 'blobs']);
    return { reference, tarball, entrypoint: '' };
  } finally {
    fs.rmSync(layout, { recursive: true, force: true });
  }
}
