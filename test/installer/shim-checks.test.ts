import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { elfHeadOf, elfProblem } from '../../src/installer/elf';
import { FakeHost, startFakeHost } from '../support/fake-host';
import { ArtifactServer, buildInstaller, runBundle, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';

// A shim must be a program this node can exec: an ELF binary of the node's architecture.
// `file` (libmagic) is the oracle of what a binary is built for.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-elf-'));
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

/** A copy of the runc shim whose header says it is built for ELF machine `machine` (183: aarch64). */
function retargeted(machine: number): string {
  const file = path.join(work, `shim-machine-${machine}`);
  const bytes = shimBinary();
  bytes.writeUInt16LE(machine, 18);
  fs.writeFileSync(file, bytes, { mode: 0o755 });
  return file;
}

describe('elfProblem', () => {
  test('the machine\'s own binaries fit linux/amd64 and no other architecture', () => {
    for (const binary of ['/usr/bin/containerd-shim-runc-v2', '/bin/busybox']) {
      expect(execFileSync('file', ['-L', binary], { encoding: 'utf8' })).toMatch(/ELF 64-bit LSB .*x86-64/);
      expect(elfProblem(elfHeadOf(binary), 'linux/amd64')).toBeUndefined();
      expect(elfProblem(elfHeadOf(binary), 'linux/arm64')).toBe('it is built for x86-64, the node is linux/arm64 (aarch64)');
    }
  });

  test('an aarch64 binary fits linux/arm64 only', () => {
    const arm = retargeted(183);
    expect(execFileSync('file', [arm], { encoding: 'utf8' })).toMatch(/ELF 64-bit LSB .*ARM aarch64/);
    expect(elfProblem(elfHeadOf(arm), 'linux/arm64')).toBeUndefined();
    expect(elfProblem(elfHeadOf(arm), 'linux/amd64')).toBe('it is built for aarch64, the node is linux/amd64 (x86-64)');
  });

  test.each([
    ['a shell script', Buffer.from('#!/bin/sh\nexec runc "$@"\n'), 'linux/amd64', 'it is not an ELF program (it is a script)'],
    ['a truncated binary', shimBinary().subarray(0, 10), 'linux/amd64', 'it is not an ELF program'],
    ['an empty file', Buffer.alloc(0), 'linux/amd64', 'it is not an ELF program'],
    ['a Linux binary on a Windows node', shimBinary(), 'windows/amd64', 'the node\'s platform windows/amd64 is not Linux'],
    ['a 32-bit header claiming x86-64', Buffer.concat([shimBinary().subarray(0, 4), Buffer.from([1]), shimBinary().subarray(5, 20)]), 'linux/amd64',
      'it is a 32-bit little-endian x86-64 program, the node is linux/amd64'],
  ])('%s is refused', (_what, bytes, platform, problem) => {
    const file = path.join(work, 'candidate');
    fs.writeFileSync(file, bytes);
    expect(elfProblem(elfHeadOf(file), platform)).toBe(problem);
  });
});

describe('the installer refuses a shim the node cannot run, before touching the host', () => {
  let bundle: string;
  let server: ArtifactServer;
  let host: FakeHost;
  const urls: Record<string, string> = {};
  const CONFIG = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n';

  beforeAll(async () => {
    bundle = buildInstaller(work);
    server = await startArtifactServer();
    urls.script = server.put('script.tgz', await tarGz(work, { 'bin/containerd-shim-rcmtest-v2': Buffer.from('#!/bin/sh\nexec /usr/bin/containerd-shim-runc-v2 "$@"\n') }));
    urls.arm = server.put('arm.tgz', await tarGz(work, { 'containerd-shim-rcmtest-v2': fs.readFileSync(retargeted(183)) }));
    urls.good = server.put('good.tgz', await tarGz(work, { 'containerd-shim-rcmtest-v2': shimBinary() }));
    host = await startFakeHost({ 'usr/bin/containerd': { copy: '/usr/bin/containerd' }, 'etc/containerd/config.toml': CONFIG }, 'while true; do sleep 1; done');
  }, 60_000);
  afterAll(async () => {
    await host?.stop();
    await server?.close();
  });

  const args = () => [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', '--handler=rcmtest', '--restart=none', '--retries=0'];
  const listing = () => fs.readdirSync(host.root, { recursive: true }).map(String).filter(p => !/^(proc|sys|dev)(\/|$)/.test(p)).sort();

  test.each([
    ['a shell script named like the shim', 'script', [], /containerd-shim-rcmtest-v2 from .* cannot run on this node: it is not an ELF program \(it is a script\)/],
    ['an aarch64 shim on an amd64 node', 'arm', ['--platform=linux/amd64'], /it is built for aarch64, the node is linux\/amd64 \(x86-64\)/],
    ['an amd64 shim on an arm64 node', 'good', ['--platform=linux/arm64'], /it is built for x86-64, the node is linux\/arm64 \(aarch64\)/],
  ])('%s: exit 3, host untouched', async (_what, artifact, extra, message) => {
    const before = listing();
    const r = await runBundle(bundle, 'install', [...args(), `--location=${urls[artifact]}`, ...extra]);
    expect(r.code).toBe(3);
    expect(r.result).toMatchObject({ outcome: 'failed', reason: 'ShimNotRunnable' });
    expect(r.stderr).toMatch(message);
    expect(listing()).toEqual(before);
  }, 30_000);

  test('status says so when the installed binary was deleted', async () => {
    const install = await runBundle(bundle, 'install', [...args(), `--location=${urls.good}`]);
    expect(install.code).toBe(0);
    expect((await runBundle(bundle, 'status', args())).result).toMatchObject({ installed: true, message: 'handler rcmtest is installed' });
    fs.rmSync(path.join(host.root, install.result.paths.binary));
    const status = await runBundle(bundle, 'status', args());
    expect(status.code).toBe(0);
    expect(status.result).toMatchObject({ installed: false, message: `handler rcmtest is recorded as installed, but its binary ${install.result.paths.binary} is missing` });
    // and the next install repairs it
    const again = await runBundle(bundle, 'install', [...args(), `--location=${urls.good}`]);
    expect(again.result.outcome).toBe('installed');
    expect((await runBundle(bundle, 'status', args())).result.installed).toBe(true);
    expect((await runBundle(bundle, 'uninstall', args())).code).toBe(0);
  }, 60_000);
});
