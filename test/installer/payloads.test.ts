import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ContainerdDaemon, installerArgsFor, startContainerd } from '../support/containerd-daemon';
import { ArtifactServer, buildInstaller, runBundle, sha256, startArtifactServer, tarGz } from '../support/installer-bundle';
import { buildOciImage } from '../support/oci-image';

// Multi-file runtimes (issue 11 §2): a payload of several files (here containerd's runc shim,
// a wrapper around runc that leaves a mark, and a config file) installed as one versioned
// folder on a real containerd 1.6, with runtime options that name files in it and the
// handler-level fields real runtimes set.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-payload-'));
const IMAGE = 'docker.io/library/rcm-busybox:payload';
let daemon: ContainerdDaemon;
let server: ArtifactServer;
let installer: string;
const artifacts: Record<string, { url: string; sha256: string }> = {};

/** A wrapper that records each runc call in `mark`, then runs the real runc. */
function wrapper(mark: string, version: string): Buffer {
  return Buffer.from(`#!/bin/sh\n# payload ${version}\necho "$*" >> ${mark}\nexec /usr/sbin/runc "$@"\n`);
}

async function publish(name: string, files: Record<string, Buffer>): Promise<void> {
  const tgz = await tarGz(work, files);
  artifacts[name] = { url: server.put(name, tgz), sha256: sha256(tgz) };
}

function hostArgs(handler = 'rcmpayload'): string[] {
  return installerArgsFor(daemon, handler);
}

/** The flags of a runc-based payload: the shim as runtime_path, runc options naming the wrapper. */
function payloadArgs(name: string): string[] {
  return [
    `--location=${artifacts[name].url}`, `--sha256=${artifacts[name].sha256}`,
    '--payload-shim=bin/containerd-shim-runc-v2', '--runtime-type=io.containerd.runc.v2',
    '--runtime-option=BinaryName=${PAYLOAD}/bin/runc-wrapper',
  ];
}

function dump(): string {
  return execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
}

function tree(dir: string): string[] {
  return fs.existsSync(dir) ? fs.readdirSync(dir, { recursive: true }).map(String).sort() : [];
}

function snapshot(): { config: string; installRoot: string[] } {
  return { config: fs.readFileSync(daemon.config, 'utf8'), installRoot: tree(path.join(daemon.dir, 'opt')) };
}

/**
 * A container under the payload's shim. (ctr passes runc options only to the runtime named
 * io.containerd.runc.v2, so the wrapper named by BinaryName is exercised through the CRI
 * handler in the end-to-end suite, where kubelet pods use it.)
 */
async function runContainer(name: string, shim: string): Promise<number> {
  daemon.ctr(['-n', 'rcm', 'run', '-d', '--runtime', shim, IMAGE, name, '/bin/busybox', 'sleep', '60']);
  const pid = execFileSync('pgrep', ['-f', '--', `^${shim} `], { encoding: 'utf8' }).trim().split('\n')[0];
  return Number(pid);
}

async function removeContainer(name: string): Promise<void> {
  daemon.ctr(['-n', 'rcm', 'tasks', 'kill', '-s', 'SIGKILL', name]);
  for (let i = 0; i < 40 && /RUNNING/.test(daemon.ctr(['-n', 'rcm', 'tasks', 'ls'])); i++) await new Promise(r => setTimeout(r, 100));
  daemon.ctr(['-n', 'rcm', 'tasks', 'delete', name]);
  daemon.ctr(['-n', 'rcm', 'containers', 'delete', name]);
}

beforeAll(async () => {
  installer = buildInstaller(work);
  daemon = await startContainerd();
  server = await startArtifactServer();
  const shim = fs.readFileSync('/usr/bin/containerd-shim-runc-v2');
  const mark = path.join(work, 'runc-calls');
  await publish('payload-v1.tgz', {
    'bin/containerd-shim-runc-v2': shim,
    'bin/runc-wrapper': wrapper(mark, 'v1'),
    'share/config.toml': Buffer.from('platform = "ptrace"\n'),
  });
  await publish('payload-v2.tgz', {
    'bin/containerd-shim-runc-v2': shim,
    'bin/runc-wrapper': wrapper(mark, 'v2'),
    'share/config.toml': Buffer.from('platform = "ptrace"\n'),
  });
  await publish('no-shim.tgz', { 'bin/runc-wrapper': wrapper(mark, 'v1') });
  await buildOciImage({ name: IMAGE, files: [{ source: '/usr/bin/busybox', target: '/bin/busybox' }], entrypoint: ['/bin/busybox'] }, path.join(work, 'image.tar'));
  daemon.ctr(['-n', 'rcm', 'images', 'import', path.join(work, 'image.tar')]);
}, 120_000);

afterAll(async () => {
  await server?.close();
  await daemon?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

describe('a payload of several files', () => {
  test('is installed as one folder, the handler names its shim and its files, and uninstall leaves nothing', async () => {
    // GIVEN the node as it is
    const original = fs.readFileSync(daemon.config, 'utf8');
    const originalDump = dump();

    // WHEN a runc-based payload is installed with options naming its wrapper, and handler fields
    const install = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz'),
      '--pod-annotation=io.katacontainers.*', '--container-annotation=dev.gvisor.spec/*', '--privileged-without-host-devices=true']);

    // THEN the payload is one versioned folder holding every file
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    const folder = path.join(daemon.dir, 'opt', 'rcm', 'payloads', 'rcmpayload', artifacts['payload-v1.tgz'].sha256.slice(0, 16));
    expect(tree(folder)).toEqual(['bin', 'bin/containerd-shim-runc-v2', 'bin/runc-wrapper', 'share', 'share/config.toml']);
    expect(install.result.paths.binary).toBe(`${folder}/bin/containerd-shim-runc-v2`);
    // AND containerd's effective config gives the handler the runc type, the payload's shim
    // as runtime_path, the wrapper as runc's BinaryName, and the handler fields
    const effective = dump();
    const table = effective.slice(effective.indexOf('runtimes.rcmpayload]'));
    expect(table).toMatch(/runtime_type = "io.containerd.runc.v2"/);
    expect(table).toContain(`runtime_path = "${folder}/bin/containerd-shim-runc-v2"`);
    expect(table).toContain('pod_annotations = ["io.katacontainers.*"]');
    expect(table).toContain('container_annotations = ["dev.gvisor.spec/*"]');
    expect(table).toMatch(/privileged_without_host_devices = true/);
    expect(fs.readFileSync(daemon.config, 'utf8')).toContain(`BinaryName = "${folder}/bin/runc-wrapper"`);

    // AND a container runs under the payload's shim
    const shimPid = await runContainer('payload-v1', `${folder}/bin/containerd-shim-runc-v2`);
    try {
      expect(fs.readlinkSync(`/proc/${shimPid}/exe`)).toBe(`${folder}/bin/containerd-shim-runc-v2`);
    } finally {
      await removeContainer('payload-v1');
    }

    // WHEN the same install runs again THEN nothing changes
    const again = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz'),
      '--pod-annotation=io.katacontainers.*', '--container-annotation=dev.gvisor.spec/*', '--privileged-without-host-devices=true']);
    expect(again.result.outcome).toBe('unchanged');

    // WHEN it is uninstalled THEN the node is as it was, byte for byte, and no file is left
    const uninstall = await runBundle(installer, 'uninstall', hostArgs());
    expect(uninstall.code).toBe(0);
    expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
    expect(dump()).toBe(originalDump);
    expect(tree(path.join(daemon.dir, 'opt', 'rcm', 'payloads'))).toEqual([]);
    expect(tree(path.join(daemon.dir, 'opt', 'rcm', 'state'))).toEqual([]);
  });

  test('a previous version stays while a container runs from it, and goes once none does', async () => {
    // GIVEN version 1 installed and a container running under its shim
    const v1 = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz')]);
    expect(v1.code).toBe(0);
    const v1Folder = path.dirname(path.dirname(v1.result.paths.binary));
    await runContainer('old-payload', v1.result.paths.binary);
    try {
      // WHEN version 2 is installed
      const v2 = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v2.tgz')]);
      // THEN the config names version 2, and version 1 is still whole (a shim runs its payload's files again to stop a container)
      expect(v2.code).toBe(0);
      const v2Folder = path.dirname(path.dirname(v2.result.paths.binary));
      expect(v2Folder).not.toBe(v1Folder);
      expect(fs.readFileSync(daemon.config, 'utf8')).toContain(`${v2Folder}/bin/runc-wrapper`);
      expect(fs.readFileSync(daemon.config, 'utf8')).not.toContain(v1Folder);
      expect(tree(v1Folder)).toContain('bin/runc-wrapper');
      expect(v2.stderr).toMatch(/an old payload stays while a process runs from it/);
    } finally {
      await removeContainer('old-payload');
    }
    // WHEN the next installer runs (here: the same version again) THEN the unused version 1 is removed
    const later = await runBundle(installer, 'uninstall', hostArgs());
    expect(later.code).toBe(0);
    expect(fs.existsSync(v1Folder)).toBe(false);
    expect(tree(path.join(daemon.dir, 'opt', 'rcm', 'payloads'))).toEqual([]);
  });

  test('symbolic links inside a payload (a library\'s soname link) are installed as links, checked, and removed with it', async () => {
    // GIVEN a payload whose wrapper finds a file through a soname link, as a library folder from Debian's packages has them
    const src = fs.mkdtempSync(path.join(work, 'links-'));
    fs.mkdirSync(path.join(src, 'bin'));
    fs.mkdirSync(path.join(src, 'lib'));
    fs.copyFileSync('/usr/bin/containerd-shim-runc-v2', path.join(src, 'bin', 'containerd-shim-runc-v2'));
    fs.writeFileSync(path.join(src, 'bin', 'runc-wrapper'), wrapper(path.join(work, 'runc-calls'), 'links'), { mode: 0o755 });
    fs.writeFileSync(path.join(src, 'lib', 'libdemo.so.1.2.3'), 'library bytes');
    fs.symlinkSync('libdemo.so.1.2.3', path.join(src, 'lib', 'libdemo.so.1'));
    const tgz = path.join(work, 'links.tgz');
    execFileSync('tar', ['-czf', tgz, '-C', src, 'bin', 'lib']);
    artifacts['links.tgz'] = { url: server.put('links.tgz', fs.readFileSync(tgz)), sha256: sha256(fs.readFileSync(tgz)) };
    // WHEN it is installed
    const install = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('links.tgz')]);
    expect(install.stderr).not.toMatch(/ERROR/);
    expect(install.code).toBe(0);
    // THEN the installed folder holds the link as a link, resolving inside it
    const folder = path.dirname(path.dirname(install.result.paths.binary));
    expect(fs.readlinkSync(path.join(folder, 'lib', 'libdemo.so.1'))).toBe('libdemo.so.1.2.3');
    expect(fs.readFileSync(path.join(folder, 'lib', 'libdemo.so.1'), 'utf8')).toBe('library bytes');
    // AND the installed payload counts as intact (its digest covers the link)
    expect((await runBundle(installer, 'status', hostArgs())).result).toMatchObject({ installed: true });
    // WHEN the link is pointed elsewhere by hand THEN the payload is damaged, and the next install repairs it
    fs.rmSync(path.join(folder, 'lib', 'libdemo.so.1'));
    fs.symlinkSync('../bin/runc-wrapper', path.join(folder, 'lib', 'libdemo.so.1'));
    expect((await runBundle(installer, 'status', hostArgs())).result).toMatchObject({ installed: false, message: expect.stringMatching(/damaged or incomplete/) });
    const repair = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('links.tgz')]);
    expect(repair.code).toBe(0);
    expect(fs.readlinkSync(path.join(folder, 'lib', 'libdemo.so.1'))).toBe('libdemo.so.1.2.3');
    // AND uninstall leaves nothing
    expect((await runBundle(installer, 'uninstall', hostArgs())).code).toBe(0);
    expect(tree(path.join(daemon.dir, 'opt', 'rcm', 'payloads'))).toEqual([]);
  });

  test('a damaged payload (a file removed by hand) is repaired by the next install', async () => {
    const first = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz')]);
    const folder = path.dirname(path.dirname(first.result.paths.binary));
    fs.rmSync(path.join(folder, 'share', 'config.toml'));
    const status = await runBundle(installer, 'status', hostArgs());
    expect(status.result).toMatchObject({ installed: false, message: expect.stringMatching(/payload .* is damaged or incomplete/) });
    const repair = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz')]);
    expect(repair.code).toBe(0);
    expect(repair.result.changed.join('\n')).toMatch(/repaired .*payloads\/rcmpayload/);
    expect(tree(folder)).toContain('share/config.toml');
    await runBundle(installer, 'uninstall', hostArgs());
    expect(tree(path.join(daemon.dir, 'opt', 'rcm', 'payloads'))).toEqual([]);
  });

  test('a config rewritten without the handler is repaired from the intact installed payload: the same config, nothing downloaded or rewritten', async () => {
    // GIVEN an installed payload, then the config written again without our handler (cloud-init, Ansible, an admin)
    const before = fs.readFileSync(daemon.config, 'utf8');
    const first = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz')]);
    expect(first.code).toBe(0);
    const installed = snapshot();
    fs.writeFileSync(daemon.config, before);
    expect((await runBundle(installer, 'status', hostArgs())).result.installed).toBe(false);
    // WHEN the same install runs again, with the artifact server refusing every download
    const repair = await runBundle(installer, 'install', [...hostArgs(), ...payloadArgs('payload-v1.tgz').map(a => (a.startsWith('--location=') ? `--location=${server.base}/gone.tgz` : a))]);
    // THEN the handler is back as it was installed (its config, its payload folder untouched), from the installed copy
    expect(repair.code).toBe(0);
    expect(repair.result.outcome).toBe('installed');
    expect(repair.result.changed.join('\n')).not.toMatch(/payloads\/rcmpayload/);
    // (a backup of the config it replaced is new: the config changed)
    const withoutBackups = (t: ReturnType<typeof snapshot>) => ({ ...t, installRoot: t.installRoot.filter(f => !f.startsWith('rcm/backups')) });
    expect(withoutBackups(snapshot())).toEqual(withoutBackups(installed));
    expect(dump()).toContain(first.result.paths.binary);
    await runBundle(installer, 'uninstall', hostArgs());
    expect(fs.readFileSync(daemon.config, 'utf8')).toBe(before);
  });
});

describe('bad payload input changes nothing', () => {
  const CASES: [string, (base: string) => string[], number, RegExp][] = [
    ['a payload without the named shim', () => [`--location=${artifacts['no-shim.tgz'].url}`, '--payload-shim=bin/containerd-shim-runc-v2'], 3, /the payload has no file bin\/containerd-shim-runc-v2; it holds: bin\/runc-wrapper/],
    ['a shim path leaving the payload', () => [`--location=${artifacts['payload-v1.tgz'].url}`, '--payload-shim=../bin/x'], 2, /--payload-shim: "..\/bin\/x" must be a relative path inside the payload/],
    ['${PAYLOAD} without a payload', () => [`--location=${artifacts['payload-v1.tgz'].url}`, '--runtime-option=BinaryName=${PAYLOAD}/x'], 2, /refers to \$\{PAYLOAD\}, which only a payload/],
    ['an annotation glob with TOML in it', () => [...payloadArgs('payload-v1.tgz'), '--pod-annotation=a"]\n[x'], 2, /--pod-annotation: [\s\S]* is not an annotation key or a glob/],
    ['a runtime type that is not a name', () => [...payloadArgs('payload-v1.tgz'), '--runtime-type=/usr/bin/x'], 2, /--runtime-type: "\/usr\/bin\/x" is not a runtime type name/],
    ['a snapshotter on containerd 1.6', () => [...payloadArgs('payload-v1.tgz'), '--snapshotter=native'], 4, /a per-handler snapshotter needs containerd 1.7 or later/],
  ];

  test.each(CASES)('%s', async (_what, args, exitCode, message) => {
    const before = snapshot();
    const r = await runBundle(installer, 'install', [...hostArgs(), ...args(server.base)]);
    expect(r.code).toBe(exitCode);
    expect(r.stderr).toMatch(message);
    expect(snapshot()).toEqual(before);
  });
});
