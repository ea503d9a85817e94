import * as fs from 'fs';
import * as path from 'path';
import { CRIO_VERSION_OUTPUTS } from './crio-fixtures';
import { crioBench, served, snapshot, systemctlCalls } from './crio-standins';
import { FakeHost } from '../support/fake-host';
import { runBundle } from '../support/installer-bundle';
import { eventually } from '../support/rest';

// CRI-O nodes after the install: CRI-O replaced under an installed handler (a package upgrade
// changes `crio --version`), and a crio.service that is failed or goes down. On fake hosts
// with the stand-ins of crio-standins.ts: NO CRI-O RUNS HERE. What is proven: what the
// installer records, compares, reports and changes (or not), and the commands it runs.

jest.setTimeout(180_000);

const bench = crioBench({ name: 'crio-drift' });
const { bundle, crio, args, expectOk } = bench;

const DROP_IN = 'etc/crio/crio.conf.d/99-rcm-rcmtest.conf';
const STATE = 'opt/rcm/state/rcmtest.json';

/** A package upgrade (or downgrade) of CRI-O: `crio --version` tells another version from now on. */
function replaceCrio(host: FakeHost, version: keyof typeof CRIO_VERSION_OUTPUTS): void {
  fs.writeFileSync(path.join(host.root, 'etc/crio-standin/version'), CRIO_VERSION_OUTPUTS[version]);
}

const read = (host: FakeHost, file: string) => fs.readFileSync(path.join(host.root, file), 'utf8');

test('CRI-O replaced (1.23 → 1.29): status reports it; the install verifies the handler with the new CRI-O, records it, reloads nothing', async () => {
  // GIVEN a handler installed on CRI-O 1.23 (one restart)
  const host = await crio.host('1.23.2');
  expectOk(await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]));
  expect(JSON.parse(read(host, STATE)).crio.build).toMatch(/^crio version 1\.23\.2 Version:\s+1\.23\.2 GitCommit:\s+9a36bb8/);
  const dropIn = read(host, DROP_IN);
  expect((await runBundle(bundle, 'status', args(host))).result).toMatchObject({ installed: true });

  // WHEN a package upgrade replaces CRI-O with 1.29
  replaceCrio(host, '1.29.1');
  // THEN status says the handler must be verified with it (the node agent's drift check takes the gate away on that)
  const status = await runBundle(bundle, 'status', args(host));
  expect(status.result).toMatchObject({
    installed: false,
    crioVersion: '1.29.1',
    message: expect.stringMatching(/recorded as installed, but CRI-O was replaced since \(crio version 1\.23\.2 .* → crio version 1\.29\.1 .*\): the handler has to be verified with it again$/),
  });

  // WHEN the install runs again (the controller admits it again)
  const again = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);
  // THEN the running CRI-O serves the handler: it counts as installed, the new version is recorded, nothing else changed
  expectOk(again);
  expect(again.result).toMatchObject({ outcome: 'installed', message: 'handler rcmtest verified with the CRI-O that replaced the one it was installed with' });
  expect(again.result.changed).toEqual([expect.stringMatching(/^verified handler rcmtest with CRI-O 1\.29\.1 \(installed with crio version 1\.23\.2 /)]);
  expect(JSON.parse(read(host, STATE)).crio.build).toMatch(/^crio version 1\.29\.1 /);
  expect(read(host, DROP_IN)).toBe(dropIn);
  expect(systemctlCalls(host)).toEqual(['restart crio']);
  expect((await runBundle(bundle, 'status', args(host))).result).toMatchObject({ installed: true });
  expect((await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`])).result.outcome).toBe('unchanged');
});

test('CRI-O replaced by one that refuses the handler\'s -v1 shim (1.37, made up, → 1.29): exit 4 ReplacedCrioRefusesHandler, nothing changed', async () => {
  // GIVEN a -v1 shim installed on a CRI-O that runs -v1 shims (after 1.36)
  const host = await crio.host('1.37.0');
  const install = await runBundle(bundle, 'install', [...args(host), `--location=${bench.v1Shim.url}`, `--sha256=${bench.v1Shim.sha256}`]);
  expectOk(install);
  expect(install.result.paths.binary).toMatch(/\/containerd-shim-rcmtest-v1$/);
  // WHEN CRI-O is replaced by 1.29, which runs only -v2 shims
  replaceCrio(host, '1.29.1');
  expect((await runBundle(bundle, 'status', args(host))).result).toMatchObject({ installed: false, message: expect.stringMatching(/CRI-O was replaced since/) });
  const before = { ...snapshot(host, 'etc/crio'), ...snapshot(host, 'opt/rcm') };
  const r = await runBundle(bundle, 'install', [...args(host), `--location=${bench.v1Shim.url}`, `--sha256=${bench.v1Shim.sha256}`]);
  // THEN the reason says so, and nothing on the host changed (no file, no reload)
  expect(r.code).toBe(4);
  expect(r.result).toMatchObject({
    outcome: 'failed',
    reason: 'ReplacedCrioRefusesHandler',
    message: expect.stringMatching(/^CRI-O was replaced \(crio version 1\.37\.0 .* → crio version 1\.29\.1 .*\) and does not take handler rcmtest: CRI-O 1\.29\.1 runs a containerd shim .* ends in -v2 .*containerd-shim-rcmtest-v1; nothing was changed/),
  });
  expect({ ...snapshot(host, 'etc/crio'), ...snapshot(host, 'opt/rcm') }).toEqual(before);
  expect(systemctlCalls(host)).toEqual(['restart crio']);
});

test('CRI-O replaced by one that does not serve the handler: exit 4 ReplacedCrioRefusesHandler from its running config, nothing changed', async () => {
  const host = await crio.host('1.29.1');
  expectOk(await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]));
  // GIVEN the upgrade's CRI-O refuses a configuration with the handler and was restarted by the package
  fs.writeFileSync(path.join(host.root, 'etc/crio-standin/refuse'), 'rcmtest');
  replaceCrio(host, '1.37.0');
  expect(() => host.run(['systemctl', 'restart', 'crio'])).toThrow();
  const before = { ...snapshot(host, 'etc/crio'), ...snapshot(host, 'opt/rcm') };
  const r = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`, `--sha256=${bench.shim.sha256}`]);
  expect(r.code).toBe(4);
  expect(r.result).toMatchObject({ reason: 'ReplacedCrioRefusesHandler', message: expect.stringMatching(/does not take handler rcmtest: CRI-O does not answer on \/var\/run\/crio\/crio.sock/) });
  expect({ ...snapshot(host, 'etc/crio'), ...snapshot(host, 'opt/rcm') }).toEqual(before);
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
});

test('crio.service failed, CRI-O down (its socket gone): still a CRI-O node; exit 7 with CRI-O\'s own reason (CrioUnitFailed) naming crio.service, nothing changed', async () => {
  // GIVEN CRI-O exited with an error (a reload it refused) in a unit without Restart=: the unit is failed, the socket gone
  const host = await crio.host('1.29.1', { 'etc/crio-standin/crash-on-refuse': '', 'etc/crio-standin/no-restart': '' });
  fs.writeFileSync(path.join(host.root, 'etc/crio-standin/refuse'), 'runc');
  host.run(['kill', '-HUP', read(host, 'run/crio-standin/pid').trim()]);
  await eventually(async () => fs.existsSync(path.join(host.root, 'run/crio-standin/failed')), 10_000, () => 'crio.service (stand-in) is not failed', 100);
  expect(fs.existsSync(path.join(host.root, 'run/crio/crio.sock'))).toBe(false);
  const before = snapshot(host, 'etc/crio');
  const r = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  expect(r.code).toBe(7);
  expect(r.result).toMatchObject({
    outcome: 'failed',
    reason: 'CrioUnitFailed',
    message: expect.stringMatching(/^crio\.service is failed \(exit-code\) on this node and the installer changed nothing: .*journalctl -u crio.*systemctl reset-failed crio && systemctl start crio/),
  });
  expect(snapshot(host, 'etc/crio')).toEqual(before);
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims'))).toBe(false);
  expect(systemctlCalls(host)).toEqual([]);
});

test('CRI-O exits on a configuration it refuses, in a unit without Restart=: the restart fails and the rollback starts crio.service again with the old files (exit 5, naming it)', async () => {
  // GIVEN a CRI-O (stand-in) that exits when it reads a configuration it refuses, in a unit without Restart=
  // (every version is restarted, not reloaded: crioApplyBy)
  const host = await crio.host('1.29.1', { 'etc/crio-standin/refuse': 'rcmtest', 'etc/crio-standin/crash-on-refuse': '', 'etc/crio-standin/no-restart': '' });
  const before = snapshot(host, 'etc/crio');
  // WHEN installing
  const r = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  // THEN the restart failed; the rollback put the old files back and restarted crio.service, which serves again
  expect(r.code).toBe(5);
  expect(r.result).toMatchObject({ reason: 'RestartFailedRolledBack' });
  expect(r.result.message).toMatch(/^CRI-O \(crio\.service\) failed after the change \(systemctl restart crio exited 1 \(crio\.service\): .*\); the previous config and binary were restored and CRI-O \(crio\.service\) is serving again$/);
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
  expect(snapshot(host, 'etc/crio')).toEqual(before);
  expect(served(host).crio.runtime.runtimes.rcmtest).toBeUndefined();
  expect(fs.existsSync(path.join(host.root, 'opt/rcm/shims/rcmtest'))).toBe(false);
});

test('a restart that leaves crio.service down for good: exit 6 naming crio.service, then the next installer stops at the failed unit (exit 7, CrioUnitFailed)', async () => {
  // GIVEN CRI-O 1.23 (changes restart it) in a unit without Restart=, which from now on refuses to start at all
  const host = await crio.host('1.23.2', { 'etc/crio-standin/no-restart': '' });
  fs.writeFileSync(path.join(host.root, 'etc/crio-standin/refuse'), 'runc');
  // WHEN installing: the restart fails, and so does the one after the rollback
  const r = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  expect(r.code).toBe(6);
  expect(r.result).toMatchObject({
    reason: 'RestartFailedNotRolledBack',
    message: expect.stringMatching(/^CRI-O \(crio\.service\) failed after the change \(systemctl restart crio exited 1 \(crio\.service\): Job for crio\.service failed .*\) and is still failing after restoring the previous config \(.*\): the node needs a human$/),
  });
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
  expect(read(host, 'run/crio-standin/failed')).toBe('exit-code\n');
  expect(fs.existsSync(path.join(host.root, 'run/crio/crio.sock'))).toBe(false);
  // THEN the next installer finds crio.service failed: CRI-O's reason, and it restarts nothing
  const next = await runBundle(bundle, 'install', [...args(host), `--location=${bench.shim.url}`]);
  expect(next.code).toBe(7);
  expect(next.result).toMatchObject({ reason: 'CrioUnitFailed', message: expect.stringMatching(/^crio\.service is failed \(exit-code\)/) });
  expect(systemctlCalls(host)).toEqual(['restart crio', 'restart crio']);
});
