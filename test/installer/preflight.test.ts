import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { effectiveConfigProblem } from '../../src/installer/containerd-config';
import { hostLockPath } from '../../src/installer/host-lock';
import { containerdBaseConfig, FakeHost, startFakeHost } from '../support/fake-host';
import { ArtifactServer, buildInstaller, publishShim, runBundle, sha256, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';
import { CONTAINERD_BINARIES } from '../support/tools';

// Before a restart, the host's containerd reads the candidate config (`config dump`): what
// it would not serve is refused with exit 4, the host untouched and containerd never
// restarted. The restart command of these hosts only leaves a mark: had the installer
// restarted, the mark would be there (and, without a daemon, it would end in exit 6).

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-preflight-'));
const C16 = CONTAINERD_BINARIES[0];
const C21 = CONTAINERD_BINARIES.find(c => c.version === '2.1')!;
// Docker's containerd.io package ships this (comments shortened): no version, CRI disabled.
const DOCKER_CONFIG = `#   Copyright 2018-2022 Docker Inc.
#   Licensed under the Apache License, Version 2.0

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
`;
let bundle: string;
let server: ArtifactServer;
let url: string;
let artifactSha256: string;
const hosts: FakeHost[] = [];
const started: ChildProcess[] = [];

beforeAll(async () => {
  bundle = buildInstaller(work);
  server = await startArtifactServer();
  ({ url, sha256: artifactSha256 } = await publishShim(server, work));
});
afterAll(async () => {
  for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
  for (const host of hosts) await host.stop();
  await server?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

test('effectiveConfigProblem reads containerd\'s dump', () => {
  expect(effectiveConfigProblem('disabled_plugins = ["cri"]\nversion = 2\n', 'x', '/b')).toMatch(/CRI plugin is disabled \(disabled_plugins has "cri"/);
  expect(effectiveConfigProblem("version = 3\ndisabled_plugins = ['io.containerd.grpc.v1.cri']\n", 'x', '/b')).toMatch(/"io.containerd.grpc.v1.cri"/);
  const other = 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.x]\n  runtime_type = "io.containerd.other.v2"\n';
  expect(effectiveConfigProblem(other, 'x', '/b')).toMatch(/gives "x" runtime_type "io.containerd.other.v2"/);
  expect(effectiveConfigProblem(other, 'x', undefined)).toMatch(/already defined .* by a file this installer does not edit/);
  expect(effectiveConfigProblem(other.replace('io.containerd.other.v2', '/b'), 'x', '/b')).toBeUndefined();
  expect(effectiveConfigProblem('version = 2\n', 'x', undefined)).toBeUndefined();
});

async function hostWith(containerd: { binary: string }, files: Record<string, string>): Promise<FakeHost> {
  const host = await startFakeHost({ 'usr/bin/containerd': { copy: containerd.binary }, ...files }, 'while true; do sleep 1; done');
  hosts.push(host);
  return host;
}

/** Everything under the host root but the kernel's folders. */
const listing = (host: FakeHost) => fs.readdirSync(host.root, { recursive: true }).map(String).filter(p => !/^(proc|sys|dev)(\/|$)/.test(p)).sort();
const args = (host: FakeHost) => [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', '--handler=rcmtest', '--retries=0',
  `--location=${url}`, '--restart=command', '--restart-command=echo restarted >> /run/restarts', '--health-timeout=2'];

test.each([
  ['Docker\'s packaged config (CRI disabled), containerd 1.6', C16, { 'etc/containerd/config.toml': DOCKER_CONFIG },
    /containerd's CRI plugin is disabled \(disabled_plugins has "cri", as in Docker's packaged config\)/],
  ['the handler also defined in an imported file, containerd 2.1', C21, {
    'etc/containerd/config.toml': 'version = 3\nimports = ["/etc/containerd/extra.toml"]\n',
    'etc/containerd/extra.toml': 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.rcmtest]\n  runtime_type = "io.containerd.other.v2"\n',
  }, /containerd would not use the new handler: its effective config gives "rcmtest" runtime_type "io.containerd.other.v2"/],
  ['the handler already in another drop-in of the imported folder, containerd 2.1', C21, {
    'etc/containerd/config.toml': 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
    'etc/containerd/conf.d/10-vendor.toml': 'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.rcmtest]\n  runtime_type = "io.containerd.other.v2"\n',
  }, /handler "rcmtest" is already defined in containerd's effective config \(runtime_type "io.containerd.other.v2"\)/],
  ['a config containerd refuses as a whole (a key twice), containerd 1.6', C16, {
    'etc/containerd/config.toml': 'version = 2\nimports = ["/etc/containerd/broken.toml"]\n',
    'etc/containerd/broken.toml': 'version = 2\noom_score = 1\noom_score = 2\n',
  }, /containerd refuses the new config: .*oom_score/],
])('%s: exit 4 before any restart, host untouched', async (_what, containerd, files, message) => {
  const host = await hostWith(containerd, files);
  const before = listing(host);
  const contents = Object.keys(files).map(f => fs.readFileSync(path.join(host.root, f), 'utf8'));
  // (with --sha256 the preflight runs ahead too, while the artifact downloads: the same refusal, the same untouched host)
  for (const sha256Flag of [[], [`--sha256=${artifactSha256}`]]) {
    const r = await runBundle(bundle, 'install', [...args(host), ...sha256Flag]);
    expect(r.stderr).toMatch(message);
    expect(r.code).toBe(4);
    expect(r.result).toMatchObject({ outcome: 'failed', reason: 'ContainerdConfigInvalid' });
    expect(fs.existsSync(path.join(host.root, 'run/restarts'))).toBe(false);
    expect(listing(host).filter(p => !p.startsWith('run/lock'))).toEqual(before);
    expect(Object.keys(files).map(f => fs.readFileSync(path.join(host.root, f), 'utf8'))).toEqual(contents);
  }
}, 60_000);

test('a config containerd accepts passes the preflight and leaves no candidate behind', async () => {
  const config = containerdBaseConfig(C16.binary, { root: '/var/lib/containerd', state: '/run/containerd', socket: '/run/containerd/containerd.sock' });
  const host = await hostWith(C16, { 'etc/containerd/config.toml': config });
  const r = await runBundle(bundle, 'install', [...args(host), '--restart=none']);
  expect(r.code).toBe(0);
  expect(r.result.timings.preflightMs).toBeGreaterThan(0);
  expect(fs.readdirSync(path.join(host.root, 'etc/containerd'))).toEqual(['config.toml']);
  expect(fs.readdirSync(path.join(host.root, 'opt/rcm')).sort()).toEqual(['backups', 'shims', 'state']);
}, 60_000);

// With --sha256 the preflight runs while the artifact downloads, on the config as it is then
// and the binary path the artifact will most likely have. It counts only if the edit made
// under the host lock is that very text for that very binary.
describe('the preflight run ahead of the host lock', () => {
  const acceptedConfig = () => containerdBaseConfig(C16.binary, { root: '/var/lib/containerd', state: '/run/containerd', socket: '/run/containerd/containerd.sock' });

  test('judges the config the install then writes: no second config dump', async () => {
    const host = await hostWith(C16, { 'etc/containerd/config.toml': acceptedConfig() });
    const r = await runBundle(bundle, 'install', [...args(host), `--sha256=${artifactSha256}`, '--restart=none']);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/containerd judged this very config while the artifact downloaded/);
    expect(r.result.timings.preflightAheadMs).toBeGreaterThan(0);
    expect(r.result.timings.preflightMs).toBeUndefined();
    expect(fs.readdirSync(path.join(host.root, 'etc/containerd'))).toEqual(['config.toml']);
  }, 60_000);

  test('a shim file name other than the likely one is judged again under the lock', async () => {
    const host = await hostWith(C16, { 'etc/containerd/config.toml': acceptedConfig() });
    const tgz = await tarGz(work, { 'containerd-shim-rcmtest-v1': shimBinary() });
    const v1 = server.put('shim-v1.tgz', tgz);
    const r = await runBundle(bundle, 'install', [...args(host), `--location=${v1}`, `--sha256=${sha256(tgz)}`, '--restart=none']);
    expect(r.code).toBe(0);
    expect(r.result.paths.binary).toMatch(/containerd-shim-rcmtest-v1$/);
    expect(r.result.timings.preflightAheadMs).toBeGreaterThan(0);
    expect(r.result.timings.preflightMs).toBeGreaterThan(0);
  }, 60_000);

  test('a config changed while the installer waited for the lock is judged again, and refused', async () => {
    // GIVEN another installer holding the host lock
    const host = await hostWith(C16, {
      'etc/containerd/config.toml': acceptedConfig(),
      'etc/containerd/broken.toml': 'version = 2\noom_score = 1\noom_score = 2\n',
    });
    const lockFile = path.join(host.root, hostLockPath('/opt/rcm'));
    fs.mkdirSync(path.dirname(lockFile), { recursive: true });
    const holder = spawn('flock', ['--no-fork', lockFile, 'sleep', '120'], { stdio: 'ignore' });
    started.push(holder);
    for (let i = 0; i < 50 && spawnSync('flock', ['--nonblock', lockFile, 'true']).status !== 1; i++) await new Promise(r => setTimeout(r, 50));
    // WHEN an installer has judged the config ahead and waits for the lock
    const run = runBundle(bundle, 'install', [...args(host), `--sha256=${artifactSha256}`]);
    const waiting = Date.now();
    // (the installer waits in a flock child of its own, started once the judging ahead is done)
    const installerWaits = () => spawnSync('pgrep', ['-f', '--', `--host-root=${host.root} `], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean)
      .some(pid => spawnSync('pgrep', ['-P', pid, '-x', 'flock']).status === 0);
    while (!installerWaits() && Date.now() - waiting < 30_000) await new Promise(r => setTimeout(r, 50));
    expect(installerWaits()).toBe(true);
    // AND the config changes meanwhile into one containerd refuses
    const config = path.join(host.root, 'etc/containerd/config.toml');
    const before = fs.readFileSync(config, 'utf8');
    expect(before).toMatch(/^imports = \[\]$/m);
    fs.writeFileSync(config, before.replace(/^imports = \[\]$/m, 'imports = ["/etc/containerd/broken.toml"]'));
    const changed = fs.readFileSync(config, 'utf8');
    holder.kill('SIGKILL');
    // THEN the installer judges the new text under the lock: exit 4, nothing restarted or written
    const r = await run;
    expect(r.stderr).toMatch(/containerd refuses the new config: .*oom_score/);
    expect(r.code).toBe(4);
    expect(fs.existsSync(path.join(host.root, 'run/restarts'))).toBe(false);
    expect(fs.readFileSync(config, 'utf8')).toBe(changed);
    expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims'))).toBe(false);
  }, 60_000);
});
