import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ContainerdDaemon, installerArgsFor, startContainerd } from '../support/containerd-daemon';
import { ArtifactServer, buildInstaller, InstallerRun, publishShim, runBundle, startArtifactServer } from '../support/installer-bundle';
import { eventually } from '../support/rest';

// Declared change sets: the controller tells each installer the node's change set it belongs
// to (--change-set <id>/<size>), and the set restarts containerd once all its members are
// accounted for, however far apart their pods start. A real containerd 1.6 under a supervisor;
// the restart command records when it ran (it is the only thing that restarts containerd).
// These cannot pass by a timing window: members start further apart than the old 3 s gather
// window, and a member that never comes would hold the others for --set-wait (60 s here).

jest.setTimeout(120_000);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-declared-sets-'));
const restartLog = path.join(work, 'restarts.log');
const WAIT = '--set-wait=60';
let bundle: string;
let daemon: ContainerdDaemon;
let server: ArtifactServer;
let shim: { url: string; sha256: string };

beforeAll(async () => {
  bundle = buildInstaller(work);
  daemon = await startContainerd();
  server = await startArtifactServer();
  shim = await publishShim(server, work);
}, 120_000);

afterAll(async () => {
  await server?.close();
  await daemon?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

beforeEach(() => fs.rmSync(restartLog, { force: true }));

/** When containerd was restarted (ms since the epoch), in order. */
function restarts(): number[] {
  return fs.existsSync(restartLog) ? fs.readFileSync(restartLog, 'utf8').split('\n').filter(Boolean).map(Number) : [];
}

function args(handler: string, set: string | undefined, extra: string[]): string[] {
  return [...installerArgsFor(daemon, handler), `--restart-command=date +%s%3N >> ${restartLog}; ${daemon.restartCommand}`,
    '--shim-name=rcmtest', ...(set ? [`--change-set=${set}`] : []), ...extra];
}

function install(handler: string, set: string | undefined, extra: string[] = [WAIT]): Promise<InstallerRun> {
  return runBundle(bundle, 'install', [...args(handler, set, extra), `--location=${shim.url}`, `--sha256=${shim.sha256}`]);
}

function uninstall(handler: string, set: string | undefined): Promise<InstallerRun> {
  return runBundle(bundle, 'uninstall', args(handler, set, [WAIT]));
}

const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));
const installRoot = () => path.join(daemon.dir, 'opt', 'rcm');
const effectiveConfig = () => execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });

function expectInstalled(runs: InstallerRun[]): void {
  for (const run of runs) expect({ code: run.code, outcome: run.result?.outcome, stderr: run.code === 0 ? '' : run.stderr }).toEqual({ code: 0, outcome: 'installed', stderr: '' });
  const dump = effectiveConfig();
  for (const run of runs) expect(dump).toContain(run.result.paths.binary);
}

/** When the run's change was planned (its state's installedAt: just before its journal and config are written). */
const plannedAt = (run: InstallerRun) => Date.parse(run.result.state.installedAt);

test('three installers of one set of three, the third started 6 s after the others: one restart for the three, after the third came', async () => {
  // WHEN two members of set `a1` start together and the third 6 s later (twice the old gather window)
  const first = [install('ds-a1', 'a1/3'), install('ds-a2', 'a1/3')];
  await sleep(6000);
  const thirdStarted = Date.now();
  const third = await install('ds-a3', 'a1/3');
  const runs = [...await Promise.all(first), third];

  // THEN all three are installed and served, with one containerd restart, made once the third was there
  expectInstalled(runs);
  expect(restarts()).toHaveLength(1);
  expect(restarts()[0]).toBeGreaterThanOrEqual(thirdStarted);
  // AND the set's mark says it restarted (a late member of it would wait for nobody); no journal is left
  expect(fs.readdirSync(path.join(installRoot(), 'journal'))).toEqual(['sets']);
  expect(fs.readdirSync(path.join(installRoot(), 'journal', 'sets', 'a1'))).toEqual(['restarted']);

  // WHEN the three are uninstalled as one set, together THEN one restart again
  fs.rmSync(restartLog, { force: true });
  const uninstalls = await Promise.all(['ds-a1', 'ds-a2', 'ds-a3'].map(h => uninstall(h, 'u1/3')));
  for (const run of uninstalls) expect({ code: run.code, outcome: run.result?.outcome }).toEqual({ code: 0, outcome: 'uninstalled' });
  expect(restarts()).toHaveLength(1);
});

test('a member that fails before writing (a bad checksum) is accounted for: the other two restart once, without waiting for --set-wait', async () => {
  // WHEN two members of set `b1` start, and the third, whose artifact fails its check, 4 s later
  const started = Date.now();
  const good = [install('ds-b1', 'b1/3'), install('ds-b2', 'b1/3')];
  await sleep(4000);
  const badStarted = Date.now();
  const bad = await runBundle(bundle, 'install', [...args('ds-b3', 'b1/3', [WAIT]), `--location=${shim.url}`, `--sha256=${'0'.repeat(64)}`]);
  const runs = await Promise.all(good);

  // THEN the bad one failed with its own exit code, and left a mark that it ended without a change
  expect(bad.code).toBe(3);
  expect(bad.result).toMatchObject({ outcome: 'failed', reason: 'ChecksumMismatch' });
  // AND the two were installed with one restart, made after the third was known to have ended, long before --set-wait
  expectInstalled(runs);
  expect(restarts()).toHaveLength(1);
  expect(restarts()[0]).toBeGreaterThanOrEqual(badStarted);
  expect(restarts()[0] - started).toBeLessThan(30_000);
  const marks = fs.readdirSync(path.join(installRoot(), 'journal', 'sets', 'b1')).sort();
  expect(marks).toEqual([expect.stringMatching(/^ds-b3-\d+-[0-9a-f]{8}\.ended$/), 'restarted']);
  expect(fs.existsSync(path.join(installRoot(), 'state', 'ds-b3.json'))).toBe(false);
});

test('a member that never comes holds the others at most --set-wait; one that comes after its set restarted waits for nobody', async () => {
  // WHEN one member of set `c1` (of two) runs alone, with --set-wait=3
  const lonely = await install('ds-c1', 'c1/2', ['--set-wait=3']);

  // THEN it waited the bound for the missing member, said so, and restarted for its own change
  expectInstalled([lonely]);
  expect(lonely.stderr).toMatch(/1 of the 2 members of change set c1 did not come within --set-wait \(3s\)/);
  expect(restarts()).toHaveLength(1);
  expect(restarts()[0] - plannedAt(lonely)).toBeGreaterThanOrEqual(3000);

  // WHEN the missing member starts afterwards (its pod was very late), with the default bound (120 s)
  const late = await install('ds-c2', 'c1/2', []);

  // THEN it restarts for its own change at once: its set restarted, nobody is left to wait for
  expectInstalled([late]);
  expect(restarts()).toHaveLength(2);
  expect(restarts()[1] - plannedAt(late)).toBeLessThan(2500);
  expect(late.stderr).not.toMatch(/did not come within/);
});

test('without --change-set, an installer alone on the node restarts at once (no gather window)', async () => {
  const run = await install('ds-d1', undefined, []);
  expectInstalled([run]);
  expect(restarts()).toHaveLength(1);
  // (the gather window this replaces waited 3 s here)
  expect(restarts()[0] - plannedAt(run)).toBeLessThan(2500);
  expect(fs.existsSync(path.join(installRoot(), 'journal', 'sets', 'd1'))).toBe(false);
});

test('a change of another set finds an open set: that set restarts first, then its own; the first set\'s late member waits for nobody', async () => {
  // GIVEN a member of set `e1` (of two) whose change is written and waits for the other member
  const waiting = install('ds-e1', 'e1/2');
  const journal = path.join(installRoot(), 'journal', 'ds-e1.json');
  await eventually(async () => fs.existsSync(journal) && JSON.parse(fs.readFileSync(journal, 'utf8')).phase === 'config-written', 30_000,
    () => 'the first member never wrote its change');
  expect(JSON.parse(fs.readFileSync(journal, 'utf8')).changeSet).toBe('e1');

  // WHEN the one member of another set (`f1`, of one) comes
  const other = await install('ds-f1', 'f1/1');

  // THEN the open set restarted first, alone, then the other set's change: two restarts, both done
  const first = await waiting;
  expectInstalled([first, other]);
  expect(restarts()).toHaveLength(2);

  // WHEN the first set's other member comes afterwards THEN it restarts on its own, at once
  const late = await install('ds-e2', 'e1/2');
  expectInstalled([late]);
  expect(restarts()).toHaveLength(3);
  expect(restarts()[2] - plannedAt(late)).toBeLessThan(2500);
});
