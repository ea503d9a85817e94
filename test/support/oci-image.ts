import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as tar from 'tar';

/** A file to put into an image layer: where it comes from, where it goes, its mode. */
export interface LayerFile {
  readonly source: string;
  readonly target: string;
  readonly mode?: number;
}

export interface ImageSpec {
  /** Empty folders to create (mode 1777, like /tmp). */
  readonly directories?: string[];
  /**
   * Fully qualified name, e.g. docker.io/library/rcm-busybox:test (the CRI normalises short
   * names). A name ending in `@sha256` is completed with the manifest's digest: the image is
   * then known by its digest reference only, as one pulled by digest is.
   */
  readonly name: string;
  readonly files: LayerFile[];
  /** Symbolic links: path in the image -> what it points to (e.g. busybox applets). */
  readonly links?: Record<string, string>;
  readonly entrypoint: string[];
  readonly cmd?: string[];
  readonly env?: string[];
  /** The image's user, e.g. 65532:65532. */
  readonly user?: string;
}

function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/**
 * Writes an OCI image layout tarball (oci-layout, index.json, blobs) that
 * `ctr images import` accepts: no Docker engine needed. Returns the image's name (with the
 * manifest digest filled in for a name ending in `@sha256`).
 */
export async function buildOciImage(spec: ImageSpec, outFile: string): Promise<string> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-image-'));
  try {
    const rootfs = path.join(work, 'rootfs');
    for (const d of spec.directories ?? []) {
      fs.mkdirSync(path.join(rootfs, d), { recursive: true });
      fs.chmodSync(path.join(rootfs, d), 0o1777);
    }
    for (const f of spec.files) {
      const dest = path.join(rootfs, f.target);
      fs.mkdirSync(path.dirname(dest), { recursive: true });
      fs.copyFileSync(f.source, dest);
      fs.chmodSync(dest, f.mode ?? 0o755);
    }
    for (const [link, target] of Object.entries(spec.links ?? {})) {
      const at = path.join(rootfs, link);
      fs.mkdirSync(path.dirname(at), { recursive: true });
      fs.symlinkSync(target, at);
    }
    const layerFile = path.join(work, 'layer.tar');
    const entries = fs.readdirSync(rootfs);
    await tar.c({ file: layerFile, cwd: rootfs, portable: true, noMtime: true }, entries);
    const layer = fs.readFileSync(layerFile);
    const layerDigest = sha256(layer);

    const config = Buffer.from(JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Entrypoint: spec.entrypoint, Cmd: spec.cmd ?? [], Env: spec.env ?? ['PATH=/bin:/usr/bin'], ...(spec.user ? { User: spec.user } : {}) },
      rootfs: { type: 'layers', diff_ids: [`sha256:${layerDigest}`] },
    }));
    const manifest = Buffer.from(JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: `sha256:${sha256(config)}`, size: config.length },
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: `sha256:${layerDigest}`, size: layer.length }],
    }));
    const layout = path.join(work, 'layout');
    const blobs = path.join(layout, 'blobs', 'sha256');
    fs.mkdirSync(blobs, { recursive: true });
    for (const blob of [layer, config, manifest]) fs.writeFileSync(path.join(blobs, sha256(blob)), blob);
    fs.writeFileSync(path.join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    const name = spec.name.endsWith('@sha256') ? `${spec.name}:${sha256(manifest)}` : spec.name;
    fs.writeFileSync(path.join(layout, 'index.json'), JSON.stringify({
      schemaVersion: 2,
      manifests: [{
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        digest: `sha256:${sha256(manifest)}`,
        size: manifest.length,
        annotations: { 'io.containerd.image.name': name, 'org.opencontainers.image.ref.name': name.split(':').pop() },
      }],
    }));
    await tar.c({ file: outFile, cwd: layout, portable: true }, ['oci-layout', 'index.json', 'blobs']);
    return name;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}
