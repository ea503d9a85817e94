import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ArtifactServer, buildInstaller, InstallerRun, runBundle, sha256, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';
import { bootSystemdNode, SystemdNode } from '../support/systemd-node';

// Many installers at once on a node shaped like production: PID 1 is systemd, containerd is
// Debian's stock containerd.service with systemd's default start limit (5 starts in 10 s).
// Each installer runs as in its pod: the node's root file system as its host root, the node's systemd as the
// process whose namespaces its host commands enter, `systemctl restart containerd` as the
// restart. Restarts are counted from the node's journal, as an operator would.

jest.setTimeout(300_000);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-sd-sets-'));
const HANDLERS = ['wave-a', 'wave-b', 'wave-c', 'wave-d', 'wave-e', 'wave-f', 'wave-g', 'wave-h'];
const CONFIG = '/etc/containerd/config.toml';
let bundle: string;
let node: SystemdNode;
let server: ArtifactServer;
const artifacts: Record<string, { url: string; sha256: string }> = {};

beforeAll(async () => {
  bundle = buildInstaller(work);
  server = await startArtifactServer();
  for (const handler of HANDLERS) {
    const tgz = await tarGz(work, { [`containerd-shim-${handler}-v2`]: shimBinary() });
    artifacts[handler] = { url: server.put(`${handler}.tgz`, tgz), sha256: sha256(tgz) };
  }
  node = await bootSystemdNode('rcm-sd-sets');
  // The boot's own start of containerd must not count against the first wave's limit.
  node.exec(['systemctl', 'reset-failed', 'containerd']);
});

afterAll(async () => {
  await server?.close();
  await node?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

function args(handler: string): string[] {
  process.env.X=''; return [`--host-root=${node.root}`, `--host-pid=${node.pid}`, '--restart=systemd', `--handler=${handler}`, '--retries=1', '--health-timeout=30'];
}

async function wave(command: 'install' | 'uninstall', handlers = HANDLERS): Promise<InstallerRun[]> {
  const runs = await Promise.all(handlers.map(h => runBundle(bundle, command, [...args(h),
    ...(command === 'install' ? [`--location=${artifacts[h].url}`, `--sha256=${artifacts[h].sha256}`] : [])])));
  // A failure's own words, for the log of a red run.
  for (const [i, run] of runs.entries()) if (run.code !== 0) process.stdout.write(`${command} ${handlers[i]}: exit ${run.code}: ${run.result?.message ?? run.stderr.slice(-2000)}\n`);
  return runs;
}

const config = () => node.exec(['cat', CONFIG]);
const effective = () => node.exec(['containerd', '--config', CONFIG, 'config', 'dump']);
const starts = () => node.startsOf('containerd');

function expectServing(): void {
  expect(node.unitState('containerd')).toMatchObject({ activeState: 'active', subState: 'running' });
  expect(node.startLimitHits('containerd')).toBe(0);
  expect(node.exec(['ctr', 'version'])).toMatch(/Server:/);
}

test('eight installs at once, then eight uninstalls: each wave restarts containerd once or twice, systemd never refuses a start', async () => {
  const original = config();

  // WHEN eight installers run at once on the node
  let before = starts();
  const installs = await wave('install');
  const installRestarts = starts() - before;

  // THEN each reports its own handler installed, containerd is active and serves all eight
  for (const [i, run] of installs.entries()) {
    expect({ handler: HANDLERS[i], code: run.code, outcome: run.result?.outcome, reason: run.result?.reason })
      .toEqual({ handler: HANDLERS[i], code: 0, outcome: 'installed', reason: undefined });
  }
  const dump = effective();
  for (const run of installs) expect(dump).toContain(run.result.paths.binary);
  expectServing();
  process.stdout.write(`systemd node: 8 installs at once -> ${installRestarts} containerd restart(s) (journal)\n`);
  expect(installRestarts).toBeGreaterThanOrEqual(1);
  expect(installRestarts).toBeLessThanOrEqual(2);

  // WHEN the eight are uninstalled at once
  before = starts();
  const uninstalls = await wave('uninstall');
  const uninstallRestarts = starts() - before;

  // THEN each is gone, the config is the original byte for byte
  for (const run of uninstalls) expect({ code: run.code, outcome: run.result?.outcome }).toEqual({ code: 0, outcome: 'uninstalled' });
  expect(config()).toBe(original);
  expectServing();
  process.stdout.write(`systemd node: 8 uninstalls at once -> ${uninstallRestarts} containerd restart(s) (journal)\n`);
  expect(uninstallRestarts).toBeGreaterThanOrEqual(1);
  expect(uninstallRestarts).toBeLessThanOrEqual(2);
  expect(fs.existsSync(path.join(node.root, 'opt', 'rcm', 'shims'))).toBe(false);
});

test('eight installs where containerd refuses one handler: the seven install, the bad one fails alone, restarts are paced under the start limit', async () => {
  // GIVEN containerd's unit refuses to start while its config names wave-c: what containerd
  // does with a config it cannot load (systemd counts the failed start against the limit)
  const dropIn = path.join(node.root, 'etc', 'systemd', 'system', 'containerd.service.d', '50-refuse-wave-c.conf');
  fs.mkdirSync(path.dirname(dropIn), { recursive: true });
  fs.writeFileSync(dropIn, `[Service]\nExecStartPre=/bin/sh -c '! grep -q wave-c ${CONFIG}'\n`);
  node.exec(['systemctl', 'daemon-reload']);
  const original = config();
  try {
    // WHEN eight installers run at once
    const before = starts();
    const attemptsBefore = node.startAttemptsOf('containerd');
    const t = Date.now();
    const runs = await wave('install');
    const seconds = (Date.now() - t) / 1000;

    // THEN the seven others are installed, each reporting so itself
    const byHandler = Object.fromEntries(runs.map((r, i) => [HANDLERS[i], r]));
    for (const handler of HANDLERS.filter(h => h !== 'wave-c')) {
      expect({ handler, code: byHandler[handler].code, outcome: byHandler[handler].result?.outcome })
        .toEqual({ handler, code: 0, outcome: 'installed' });
    }
    // AND the bad one ended with its own exit code: rolled back, containerd serving again
    expect(byHandler['wave-c'].code).toBe(5);
    expect(byHandler['wave-c'].result).toMatchObject({ outcome: 'failed', reason: 'RestartFailedRolledBack' });
    // AND nothing of it is left
    const dump = effective();
    expect(dump).not.toContain('wave-c');
    expect(fs.existsSync(path.join(node.root, 'opt', 'rcm', 'shims', 'wave-c'))).toBe(false);
    expect(fs.existsSync(path.join(node.root, 'opt', 'rcm', 'state', 'wave-c.json'))).toBe(false);
    // AND systemd never refused a start: the restarts were paced within its limit
    expectServing();
    const attempts = node.startAttemptsOf('containerd') - attemptsBefore;
    process.stdout.write(`systemd node: 8 installs, one refused -> ${attempts} start attempts (${starts() - before} succeeded) in ${seconds.toFixed(1)} s, no start-limit-hit\n`);
    expect(attempts).toBeGreaterThan(5); // more than the limit allows at once: the pacing was needed

    // Clean up: the seven go in one wave
    const cleanup = await wave('uninstall', HANDLERS.filter(h => h !== 'wave-c'));
    expect(cleanup.map(r => r.code)).toEqual(cleanup.map(() => 0));
    expect(config()).toBe(original);
  } finally {
    fs.rmSync(dropIn, { force: true });
    node.exec(['systemctl', 'daemon-reload']);
  }
});

test('a containerd unit systemd already gave up on is reported with exit 7 and left as it is: nothing installed, nothing reset', async () => {
  // GIVEN containerd stopped by systemd's start limit (restarts in a row: the sixth within 10 s
  // is refused; a loaded machine may need a few more)
  for (let i = 0; i < 12 && node.unitState('containerd').result !== 'start-limit-hit'; i++) node.tryExec(['systemctl', 'restart', 'containerd']);
  expect(node.unitState('containerd')).toMatchObject({ activeState: 'failed', result: 'start-limit-hit' });
  const original = config();

  // WHEN an installer starts
  const run = await runBundle(bundle, 'install', [...args('wave-a'), `--location=${artifacts['wave-a'].url}`, `--sha256=${artifacts['wave-a'].sha256}`]);

  // THEN it reports the unit's state with its own exit code and reason, and how a human recovers it
  expect(run.code).toBe(7);
  expect(run.result).toMatchObject({ outcome: 'failed', reason: 'ContainerdUnitFailed' });
  expect(run.result.message).toMatch(/containerd.service is failed \(start-limit-hit\)/);
  expect(run.result.message).toMatch(/systemctl reset-failed containerd && systemctl start containerd/);
  // AND it changed nothing: the unit is still failed (not reset), the config and install root untouched
  expect(node.unitState('containerd')).toMatchObject({ activeState: 'failed', result: 'start-limit-hit' });
  expect(config()).toBe(original);
  expect(fs.existsSync(path.join(node.root, 'opt', 'rcm', 'shims', 'wave-a'))).toBe(false);

  // The human's recovery
  node.exec(['systemctl', 'reset-failed', 'containerd']);
  node.exec(['systemctl', 'start', 'containerd']);
  expect(node.unitState('containerd')).toMatchObject({ activeState: 'active' });
});
