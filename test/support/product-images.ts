import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { buildSync } from 'esbuild';
import { environmentOf, nodeFlagsOf } from './dockerfile';
import { buildOciImage, LayerFile } from './oci-image';
import { NODE_24 } from './tools';

// The controller and node-installer images as OCI tarballs, without a Docker engine: the
// official Node.js 24 binary and the shared libraries it needs, nsenter and flock for the installer,
// and the esbuild bundles (the installer's with its compile cache), with the Dockerfiles'
// entrypoints and environment.

export const CONTROLLER_IMAGE = 'docker.io/library/rcm-controller:test';
export const INSTALLER_IMAGE = 'docker.io/library/rcm-node-installer:test';

/** A binary and the shared libraries `ldd` lists for it, at their own paths. */
function withLibraries(binary: string, target: string): LayerFile[] {
  const libs = execFileSync('ldd', [binary], { encoding: 'utf8' }).split('\n')
    .map(line => /(\/\S+) \(0x/.exec(line)?.[1])
    .filter((lib): lib is string => lib !== undefined);
  return [{ source: binary, target }, ...libs.map(lib => ({ source: fs.realpathSync(lib), target: lib, mode: 0o755 }))];
}

/** As `npx projen bundle:programs` bundles them: RCM_VERSION is the package version (the release has bumped it by then). */
function bundle(entry: string, outfile: string): void {
  const version = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')).version;
  buildSync({ entryPoints: [entry], bundle: true, platform: 'node', target: 'node20', outfile, logLevel: 'error', define: { RCM_VERSION: JSON.stringify(version) } });
}

/**
 * V8's compile cache of the installer bundle, made as the Dockerfile makes it (one run of
 * `--help` with NODE_COMPILE_CACHE set), for the bundle at `/usr/local/lib/rcm/`: the bundle
 * runs from a folder laid out as there, and the portable cache names it relative to itself.
 * Returns the cache's files as layer files.
 */
function installerCompileCache(bundleFile: string, dir: string): LayerFile[] {
  const lib = path.join(dir, 'installer-lib');
  fs.rmSync(lib, { recursive: true, force: true });
  fs.mkdirSync(lib);
  fs.copyFileSync(bundleFile, path.join(lib, 'rcm-node-installer.js'));
  execFileSync(NODE_24, [path.join(lib, 'rcm-node-installer.js'), '--help'], {
    stdio: 'ignore', env: { PATH: process.env.PATH, NODE_COMPILE_CACHE: path.join(lib, 'compile-cache'), NODE_COMPILE_CACHE_PORTABLE: '1' },
  });
  const files = fs.readdirSync(path.join(lib, 'compile-cache'), { recursive: true }).map(String)
    .filter(f => fs.statSync(path.join(lib, 'compile-cache', f)).isFile());
  if (files.length === 0) throw new Error('node wrote no compile cache for the installer bundle');
  return files.map(f => ({ source: path.join(lib, 'compile-cache', f), target: `/usr/local/lib/rcm/compile-cache/${f}`, mode: 0o644 }));
}

/** An image's environment: a PATH for its few binaries, and what images/Dockerfile sets for its stage. */
function imageEnv(stage: string): string[] {
  return ['PATH=/bin:/usr/bin', ...Object.entries(environmentOf(stage)).map(([k, v]) => `${k}=${v}`)];
}

/** Builds both images into `dir`; returns the tarball paths. */
export async function buildProductImages(dir: string): Promise<{ controller: string; installer: string }> {
  if (!fs.existsSync(NODE_24)) throw new Error(`${NODE_24} is missing: run scripts/provision.sh`);
  const root = path.join(__dirname, '..', '..');
  bundle(path.join(root, 'src', 'runtime', 'main.ts'), path.join(dir, 'rcm-controller.js'));
  bundle(path.join(root, 'src', 'installer', 'main.ts'), path.join(dir, 'rcm-node-installer.js'));
  bundle(path.join(root, 'src', 'agent', 'main.ts'), path.join(dir, 'rcm-node-agent.js'));
  const node = withLibraries(NODE_24, '/usr/local/bin/node');
  const controller = path.join(dir, 'rcm-controller.tar');
  const installer = path.join(dir, 'rcm-node-installer.tar');
  await buildOciImage({
    name: CONTROLLER_IMAGE,
    files: [...node, { source: path.join(dir, 'rcm-controller.js'), target: '/usr/local/lib/rcm/rcm-controller.js', mode: 0o644 }],
    directories: ['/tmp'],
    env: imageEnv('controller'),
    entrypoint: ['/usr/local/bin/node', ...nodeFlagsOf('controller'), '/usr/local/lib/rcm/rcm-controller.js'],
    cmd: ['--help'],
    user: '65532:65532',
  }, controller);
  await buildOciImage({
    name: INSTALLER_IMAGE,
    // nsenter for host commands, flock for the host lock (both util-linux, as in the Dockerfile's base),
    // and a static busybox that copies artifacts out of images without a shell (Debian's busybox-static).
    files: [...node, ...withLibraries('/usr/bin/nsenter', '/usr/bin/nsenter'), ...withLibraries('/usr/bin/flock', '/usr/bin/flock'),
      { source: '/bin/busybox', target: '/usr/local/lib/rcm/busybox', mode: 0o755 },
      { source: path.join(dir, 'rcm-node-installer.js'), target: '/usr/local/lib/rcm/rcm-node-installer.js', mode: 0o644 },
      // The node agent (install mode NodeAgent): the same image, started with this file.
      { source: path.join(dir, 'rcm-node-agent.js'), target: '/usr/local/lib/rcm/rcm-node-agent.js', mode: 0o644 },
      ...installerCompileCache(path.join(dir, 'rcm-node-installer.js'), dir)],
    directories: ['/tmp'],
    env: imageEnv('node-installer'),
    entrypoint: ['/usr/local/bin/node', '/usr/local/lib/rcm/rcm-node-installer.js'],
    cmd: ['--help'],
  }, installer);
  return { controller, installer };
}

// `npx projen images`: the tarballs for `ctr -n k8s.io images import` on a test node.
if (require.main === module) {
  const out = path.resolve(process.argv[2] ?? 'dist/images');
  fs.mkdirSync(out, { recursive: true });
  buildProductImages(out).then(images => {
    process.stdout.write(`${images.controller} (${CONTROLLER_IMAGE})\n${images.installer} (${INSTALLER_IMAGE})\n`);
  }, e => {
    process.stderr.write(`${(e as Error).message}\n`);
    process.exit(1);
  });
}
