import { spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { parse } from 'smol-toml';
import { crioConf5Problems } from './crio-fixtures';
import { crioBench, DEFAULT_DROPIN, served, snapshot, systemctlCalls } from './crio-standins';
import { startFakeHost } from '../support/fake-host';
import { runBundle, sha256, shimBinary, tarGz } from '../support/installer-bundle';
import { eventually } from '../support/rest';

// CRI-O nodes on fake hosts, with the stand-ins of crio-standins.ts for crio, its daemon and
// systemctl. NO CRI-O RUNS HERE (no CRI-O package exists for these machines).
// What is proven: the files the installer writes and removes (byte for byte), the commands it
// runs and in which case, its refusals and rollbacks, and that it shares the lock, journal
// and change sets of containerd nodes. Not proven: anything CRI-O itself does with the files.

jest.setTimeout(180_000);

const bench = crioBench({ name: 'crio' });
const { work, bundle, crio, args, expectOk } = bench;

test('CRI-O 1.29: detected, our drop-in written and CRI-O restarted (a reload would leave the handler unusable: crioApplyBy), served, uninstalled byte for byte', async () => {
  // GIVEN a CRI-O node with the distribution's crio.conf and drop-in and kata-deploy's drop-in
  const host = await crio.host('1.29.1');
  const etcBefore = snapshot(host, 'etc/crio');

  // WHEN the shim is installed (nothing says CRI-O: it is detected)
  const install = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);

  // THEN it is a CRI-O install, CRI-O restarted once, and its running config lists the handler
  expectOk(install);
  const dropIn = '/etc/crio/crio.conf.d/99-rcm-rcmtest.conf';
  expect(install.result).toMatchObject({
    outcome: 'installed',
    distro: 'crio',
    crioVersion: '1.29.1',
    paths: { config: dropIn },
    state: { runtime: 'crio', crio: { kind: 'vm', runtimePath: install.result.paths.binary } },
  });
  expect(install.result.containerdVersion).toBeUndefined();
  expect(install.stderr).not.toMatch(/containerd was not found/);
  expect(systemctlCalls(host)).toEqual(['restart crio']);
  expect(served(host).crio.runtime.runtimes.rcmtest).toEqual({ runtime_type: 'vm', runtime_path: install.result.paths.binary, runtime_root: '/run/rcm/crio/rcmtest' });
  // AND the one file written is ours alone, checked against crio.conf(5); the others are byte for byte as they were
  const etcAfter = snapshot(host, 'etc/crio');
  expect(Object.keys(etcAfter).sort()).toEqual([...Object.keys(etcBefore), dropIn.slice(1)].sort());
  for (const [file, bytes] of Object.entries(etcBefore)) expect(etcAfter[file]).toBe(bytes);
  const written: any = parse(etcAfter[dropIn.slice(1)]);
  expect(Object.keys(written.crio.runtime.runtimes)).toEqual(['rcmtest']);
  expect(crioConf5Problems(written.crio.runtime.runtimes.rcmtest)).toEqual([]);
  expect(fs.readFileSync(path.join(host.root, install.result.paths.binary)).equals(shimBinary())).toBe(true);

  // WHEN status is asked, and the same artifact installed again
  const status = await runBundle(bundle, 'status', args(host));
  const again = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);
  // THEN it is installed, and nothing changes (no restart)
  expect(status.result).toMatchObject({ outcome: 'status', installed: true });
  expect(again.result.outcome).toBe('unchanged');
  expect(systemctlCalls(host)).toEqual(['restart crio']);

  // WHEN our drop-in is removed by someone, status says so
  const ours = path.join(host.root, dropIn);
  const kept = fs.readFileSync(ours);
  fs.rmSync(ours);
  expect((await runBundle(bundle, 'status', args(host))).result).toMatchObject({ installed: false, message: expect.stringMatching(/its drop-in .*99-rcm-rcmtest.conf is missing/) });
  fs.writeFileSync(ours, kept);

  // WHEN it is uninstalled
  const uninstall = await runBundle(bundle, 'uninstall', args(host));
  // THEN CRI-O's files are byte for byte as before the install, nothing of ours is left, and CRI-O was restarted
  expectOk(uninstall);
  expect(uninstall.result.outcome).toBe('uninstalled');
  expect(snapshot(host, 'etc/crio')).toEqual(etcBefore);
  expect(fs.readdirSync(path.join(host.root, 'opt/rcm')).filter(d => !['backups'].includes(d))).toEqual([]);
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
  expect(served(host).crio.runtime.runtimes.rcmtest).toBeUndefined();
});

test('CRI-O 1.23 (before 1.26): the same change restarts CRI-O instead, install and uninstall', async () => {
  const host = await crio.host('1.23.2');
  const etcBefore = snapshot(host, 'etc/crio');
  const install = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  expectOk(install);
  expect(install.result.crioVersion).toBe('1.23.2');
  expect(systemctlCalls(host)).toEqual(['restart crio']);
  expect(served(host).crio.runtime.runtimes.rcmtest.runtime_path).toBe(install.result.paths.binary);
  // The restart was paced like containerd's: the unit's start limit was read first.
  expect(fs.readFileSync(path.join(host.root, 'run/crio-standin/systemctl.log'), 'utf8')).toMatch(/show -p StartLimitBurst -p StartLimitIntervalUSec .* crio\nrestart crio/);
  expectOk(await runBundle(bundle, 'uninstall', args(host)));
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
  expect(snapshot(host, 'etc/crio')).toEqual(etcBefore);
});

test.each([
  ['a -v1 shim (CRI-O up to 1.36 runs only -v2 shims)', () => [`--location=${bench.v1Shim.url}`], /ends in -v2 .*containerd-shim-rcmtest-v1/, {}],
  ['a per-handler snapshotter', () => [`--location=${bench.shim.url}`, '--snapshotter=stargz'], /no per-handler snapshotter/, {}],
  ['an option CRI-O has no field for', () => [`--location=${bench.shim.url}`, '--runtime-option=Debug=true'], /option Debug cannot be given to a vm runtime/, {}],
  ['a handler another tool\'s drop-in defines', () => [`--location=${bench.shim.url}`], /already defined by \/etc\/crio\/crio.conf.d\/50-other/,
    { 'etc/crio/crio.conf.d/50-other': '[crio.runtime.runtimes.rcmtest]\nruntime_path = "/usr/bin/other"\n' }],
  ['our file name taken by a file that is not ours', () => [`--location=${bench.shim.url}`], /99-rcm-rcmtest.conf exists and was not written by the installer/,
    { 'etc/crio/crio.conf.d/99-rcm-rcmtest.conf': '[crio.runtime.runtimes.rcmtest]\nruntime_path = "/usr/bin/other"\n' }],
])('refused, with nothing changed: %s', async (_what, extra, message, files) => {
  const host = await crio.host('1.29.1', files);
  const etcBefore = snapshot(host, 'etc/crio');
  const r = await runBundle(bundle, 'install', [...args(host), ...extra()]);
  expect(r.code).toBe(4);
  expect(r.result).toMatchObject({ outcome: 'failed', reason: 'CrioHandlerRefused', message: expect.stringMatching(message) });
  expect(snapshot(host, 'etc/crio')).toEqual(etcBefore);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims'))).toBe(false);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/state'))).toBe(false);
  expect(systemctlCalls(host)).toEqual([]);
});

test.each([
  ['1.29.1', 'restart', ['restart crio', 'restart crio']],
  ['1.23.2', 'restart', ['restart crio', 'restart crio']],
] as const)('CRI-O %s refuses the new config after the %s: rolled back (exit 5), served as before', async (version, _how, calls) => {
  // GIVEN a CRI-O (stand-in) that refuses any configuration defining rcmtest
  const host = await crio.host(version, { 'etc/crio-standin/refuse': 'rcmtest' });
  const etcBefore = snapshot(host, 'etc/crio');
  // WHEN installing
  const r = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  // THEN the check failed, the drop-in and binary are gone, CRI-O was restarted again and serves without the handler
  expect(r.code).toBe(5);
  expect(r.result).toMatchObject({ reason: 'RestartFailedRolledBack' });
  // (every version is restarted: crioApplyBy)
  expect(r.result.message).toMatch(/^CRI-O \(crio.service\) failed after the change \(systemctl restart crio exited 1 \(crio.service\): Job for crio.service failed .*CRI-O \(crio.service\) is serving again$/);
  expect(snapshot(host, 'etc/crio')).toEqual(etcBefore);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims/rcmtest'))).toBe(false);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/journal/rcmtest.json'))).toBe(false);
  expect(systemctlCalls(host)).toEqual(calls);
  expect(served(host).crio.runtime.runtimes).toEqual(expect.objectContaining({ 'runc': expect.anything(), 'kata-qemu': expect.anything() }));
  expect(served(host).crio.runtime.runtimes.rcmtest).toBeUndefined();
});

test('two Shims installed at once on a CRI-O node: one restart for both (the change sets of containerd nodes)', async () => {
  const host = await crio.host('1.29.1');
  const [a, b] = await Promise.all(['rcm-a', 'rcm-b'].map(handler => runBundle(bundle, 'install', [
    `--host-root=${host.root}`, `--host-pid=${host.pid}`, `--handler=${handler}`, '--shim-name=rcmtest', '--retries=0', '--health-timeout=5',
    '--set-gather=5', `--location=${bench.shim.url}`,
  ])));
  expectOk(a);
  expectOk(b);
  expect(systemctlCalls(host)).toEqual(['restart crio']);
  const runtimes = served(host).crio.runtime.runtimes;
  expect(runtimes['rcm-a'].runtime_path).toBe(a.result.paths.binary);
  expect(runtimes['rcm-b'].runtime_path).toBe(b.result.paths.binary);
  expect(fs.readdirSync(path.join(host.root, 'etc/crio/crio.conf.d')).sort()).toEqual(['00-default.conf', '99-kata-deploy', '99-rcm-rcm-a.conf', '99-rcm-rcm-b.conf']);
});

test('an OCI runtime in a payload (runc\'s shim type): oci with the payload\'s runtime as runtime_path; uninstall collects the payload', async () => {
  // GIVEN a payload as a gVisor-like Shim ships it: runc's shim and a runtime wrapper
  const host = await crio.host('1.29.1');
  const etcBefore = snapshot(host, 'etc/crio');
  const tgz = await tarGz(work, { 'bin/containerd-shim-runc-v2': shimBinary(), 'bin/runc-wrapper': Buffer.from('#!/bin/sh\nexec runc "$@"\n') });
  const url = bench.server.put('oci-payload.tgz', tgz);
  // WHEN installed with runc's shim type and the wrapper as BinaryName
  const install = await runBundle(bundle, 'install', [...args(host), `--location=${url}`, '--payload-shim=bin/containerd-shim-runc-v2',
    '--runtime-type=io.containerd.runc.v2', '--runtime-option=BinaryName=${PAYLOAD}/bin/runc-wrapper', '--privileged-without-host-devices=true']);
  // THEN CRI-O gets an oci handler running the wrapper from the installed payload
  expectOk(install);
  const folder = path.posix.dirname(path.posix.dirname(install.result.paths.binary));
  expect(folder).toMatch(/^\/opt\/rcm\/payloads\/rcmtest\/[0-9a-f]{16}$/);
  const table = served(host).crio.runtime.runtimes.rcmtest;
  expect(table).toEqual({ runtime_type: 'oci', runtime_path: `${folder}/bin/runc-wrapper`, privileged_without_host_devices: true });
  expect(crioConf5Problems(table)).toEqual([]);
  expect(fs.existsSync(path.join(host.root, folder, 'bin/runc-wrapper'))).toBe(true);
  // WHEN uninstalled THEN the payload goes with it and CRI-O's files are as before
  expectOk(await runBundle(bundle, 'uninstall', args(host)));
  expect(snapshot(host, 'etc/crio')).toEqual(etcBefore);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/payloads'))).toBe(false);
});

test('a new version: the drop-in is rewritten to the new binary, CRI-O restarted once, the old version removed', async () => {
  const host = await crio.host('1.29.1');
  const first = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  expectOk(first);
  const tgz = await tarGz(work, { 'containerd-shim-rcmtest-v2': Buffer.concat([shimBinary(), Buffer.from('version 2')]) });
  const second = await runBundle(bundle, 'install', [...args(host), `--location=${bench.server.put('shim-2.tgz', tgz)}`, `--sha256=${sha256(tgz)}`]);
  expectOk(second);
  expect(second.result.paths.binary).not.toBe(first.result.paths.binary);
  expect(second.result.changed).toEqual(expect.arrayContaining([
    'rewrote /etc/crio/crio.conf.d/99-rcm-rcmtest.conf: handler rcmtest (vm)', `removed previous version ${first.result.paths.binary}`,
  ]));
  expect(served(host).crio.runtime.runtimes.rcmtest.runtime_path).toBe(second.result.paths.binary);
  expect(fs.existsSync(path.join(host.root, path.posix.dirname(first.result.paths.binary)))).toBe(false);
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
});

test('an installer killed after writing the drop-in: the next run finishes the change (restart, check, record) from the journal', async () => {
  const host = await crio.host('1.29.1');
  // GIVEN an install held right after the drop-in was written, then SIGKILLed
  const child = spawn(process.execPath, [bundle, 'install', `--result-file=${path.join(work, 'killed.json')}`, ...args(host), `--location=${bench.shim.url}`],
    { env: { PATH: process.env.PATH, RCM_TEST_PAUSE_AT: 'config-written' } });
  let stderr = '';
  child.stderr.on('data', d => { stderr += d; });
  await eventually(async () => stderr.includes('paused at config-written'), 30_000, () => `the installer did not pause at config-written: ${stderr}`, 100);
  const exited = new Promise(res => child.on('exit', res));
  child.kill('SIGKILL');
  await exited;
  expect(systemctlCalls(host)).toEqual([]);
  expect((await runBundle(bundle, 'status', args(host))).result).toMatchObject({ installed: false, interrupted: ['rcmtest'] });
  // WHEN the next installer runs
  const next = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  // THEN it finished the interrupted change: restarted once, served, recorded, and its own install is then unchanged
  expectOk(next);
  expect(next.result.changed).toContain('recovered the interrupted install of rcmtest: finish');
  expect(next.result.outcome).toBe('unchanged');
  expect(systemctlCalls(host)).toEqual(['restart crio']);
  expect(served(host).crio.runtime.runtimes.rcmtest.runtime_type).toBe('vm');
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/journal'))).toBe(false);
  expect((await runBundle(bundle, 'status', args(host))).result).toMatchObject({ installed: true, interrupted: [] });
});

test('--distro=crio on a host without crio: refused (exit 4), nothing changed', async () => {
  const host = crio.add(await startFakeHost({ 'etc/crio/crio.conf.d/00-default.conf': DEFAULT_DROPIN }, 'while true; do sleep 1; done'));
  const r = await runBundle(bundle, 'install', [...args(host), '--distro=crio', `--location=${bench.shim.url}`]);
  expect(r.code).toBe(4);
  expect(r.result).toMatchObject({ reason: 'CrioHandlerRefused', message: expect.stringMatching(/^crio was not found on the host .*searched \/usr\/local\/sbin:/) });
  expect(snapshot(host, 'etc/crio')).toEqual({ 'etc/crio/crio.conf.d/00-default.conf': DEFAULT_DROPIN });
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims'))).toBe(false);
});

test('uninstall leaves a file at our path that is not ours (exit 4, named); without the drop-in it removes only our files', async () => {
  const host = await crio.host('1.29.1');
  const install = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  expectOk(install);
  const dropIn = path.join(host.root, 'etc/crio/crio.conf.d/99-rcm-rcmtest.conf');
  // GIVEN someone else's file where ours was
  const foreign = '[crio.runtime.runtimes.rcmtest]\nruntime_path = "/usr/bin/other"\n';
  fs.writeFileSync(dropIn, foreign);
  const refused = await runBundle(bundle, 'uninstall', args(host));
  expect(refused.code).toBe(4);
  expect(refused.result).toMatchObject({ reason: 'CrioHandlerRefused', message: expect.stringMatching(/99-rcm-rcmtest.conf was not written by the installer/) });
  expect(fs.readFileSync(dropIn, 'utf8')).toBe(foreign);
  expect(fs.existsSync(path.join(host.root, install.result.paths.binary))).toBe(true);
  // GIVEN no file there at all: the binary and the record go, nothing is restarted
  fs.rmSync(dropIn);
  const uninstall = await runBundle(bundle, 'uninstall', args(host));
  expectOk(uninstall);
  expect(uninstall.result.outcome).toBe('uninstalled');
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims'))).toBe(false);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/state'))).toBe(false);
  expect(systemctlCalls(host)).toEqual(['restart crio']);
});
