import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ContainerdDaemon, installerArgsFor, startContainerd } from '../support/containerd-daemon';
import { ArtifactServer, buildInstaller, InstallerRun, runBundle, sha256, shimBinary, startArtifactServer, tarGz } from '../support/installer-bundle';

// Many installers on one node at once (a node joining a cluster with many Shims, a wave of
// spec changes, a mass delete): their changes go into change sets, and containerd restarts
// once per set instead of once per installer. A real containerd 1.6 under a supervisor; the
// restart command counts the restarts (it is the only thing that restarts containerd here).

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-sets-'));
const HANDLERS = ['wave-a', 'wave-b', 'wave-c', 'wave-d', 'wave-e', 'wave-f', 'wave-g', 'wave-h'];
let bundle: string;
let daemon: ContainerdDaemon;
let server: ArtifactServer;
const artifacts: Record<string, { url: string; sha256: string }> = {};
const restartLog = path.join(work, 'restarts.log');

beforeAll(async () => {
  bundle = buildInstaller(work);
  daemon = await startContainerd();
  server = await startArtifactServer();
  for (const handler of HANDLERS) {
    const tgz = await tarGz(work, { [`containerd-shim-${handler}-v2`]: shimBinary() });
    artifacts[handler] = { url: server.put(`${handler}.tgz`, tgz), sha256: sha256(tgz) };
  }
}, 120_000);

afterAll(async () => {
  await server?.close();
  await daemon?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

/** The restart command: counts the restart, restarts, then fails when `refuse` is in the config (containerd refusing it). */
function restartCommand(refuse?: string): string {
  const count = `echo restart >> ${restartLog}`;
  return refuse ? `${count}; ${daemon.restartCommand}; ! grep -q ${refuse} ${daemon.config}` : `${count}; ${daemon.restartCommand}`;
}

function restarts(): number {
  return fs.existsSync(restartLog) ? fs.readFileSync(restartLog, 'utf8').split('\n').filter(Boolean).length : 0;
}

function args(handler: string, refuse?: string): string[] {
  return [...installerArgsFor(daemon, handler), `--restart-command=${restartCommand(refuse)}`];
}

function wave(command: 'install' | 'uninstall', refuse?: string): Promise<InstallerRun[]> {
  return Promise.all(HANDLERS.map(h => runBundle(bundle, command, [...args(h, refuse),
    ...(command === 'install' ? [`--location=${artifacts[h].url}`, `--sha256=${artifacts[h].sha256}`] : [])])));
}

function effectiveConfig(): string {
  return execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
}

const installRoot = () => path.join(daemon.dir, 'opt', 'rcm');

test('eight installs at once, then eight uninstalls: every change made, containerd restarted once or twice per wave', async () => {
  // GIVEN a node with none of the handlers
  const original = fs.readFileSync(daemon.config, 'utf8');
  fs.rmSync(restartLog, { force: true });

  // WHEN eight installers for eight handlers run at once
  const installs = await wave('install');

  // THEN each reports its own handler installed
  for (const [i, run] of installs.entries()) {
    expect({ handler: HANDLERS[i], code: run.code, outcome: run.result?.outcome }).toEqual({ handler: HANDLERS[i], code: 0, outcome: 'installed' });
  }
  // AND containerd serves every one of them from one config
  const dump = effectiveConfig();
  for (const run of installs) expect(dump).toContain(run.result.paths.binary);
  await daemon.waitReady();
  // AND it restarted far fewer times than once per installer (the first installer restarts
  // alone when nobody waits yet; the others wait for it and share the next restart)
  const installRestarts = restarts();
  process.stdout.write(`change sets: 8 installs at once -> ${installRestarts} containerd restart(s)\n`);
  expect(installRestarts).toBeGreaterThanOrEqual(1);
  expect(installRestarts).toBeLessThanOrEqual(3);
  // AND nothing is left pending: no journal, no outcome nobody read
  expect(fs.existsSync(path.join(installRoot(), 'journal'))).toBe(false);

  // WHEN the eight are uninstalled at once
  fs.rmSync(restartLog, { force: true });
  const uninstalls = await wave('uninstall');

  // THEN each is gone, the config is the original byte for byte, in few restarts
  for (const run of uninstalls) expect({ code: run.code, outcome: run.result?.outcome }).toEqual({ code: 0, outcome: 'uninstalled' });
  expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
  const uninstallRestarts = restarts();
  process.stdout.write(`change sets: 8 uninstalls at once -> ${uninstallRestarts} containerd restart(s)\n`);
  expect(uninstallRestarts).toBeGreaterThanOrEqual(1);
  expect(uninstallRestarts).toBeLessThanOrEqual(3);
  expect(fs.readdirSync(installRoot())).toEqual(expect.not.arrayContaining(['shims', 'state', 'journal']));
}, 180_000);

test('a set containerd refuses is rolled back and retried change by change: the good ones install, the bad one alone fails and leaves nothing', async () => {
  // GIVEN a node where containerd refuses any config that holds handler wave-c
  const original = fs.readFileSync(daemon.config, 'utf8');
  fs.rmSync(restartLog, { force: true });

  // WHEN eight installers run at once
  const runs = await wave('install', 'wave-c');

  // THEN the seven others are installed, each reporting so itself
  const byHandler = Object.fromEntries(runs.map((r, i) => [HANDLERS[i], r]));
  for (const handler of HANDLERS.filter(h => h !== 'wave-c')) {
    expect({ handler, code: byHandler[handler].code, outcome: byHandler[handler].result?.outcome }).toEqual({ handler, code: 0, outcome: 'installed' });
  }
  // AND the bad one failed with its own exit code and reason, rolled back
  expect(byHandler['wave-c'].code).toBe(5);
  expect(byHandler['wave-c'].result).toMatchObject({ outcome: 'failed', reason: 'RestartFailedRolledBack' });
  // AND nothing of it is left: not in the config, no binary, no state
  await daemon.waitReady();
  const dump = effectiveConfig();
  expect(dump).not.toContain('wave-c');
  for (const handler of HANDLERS.filter(h => h !== 'wave-c')) expect(dump).toContain(byHandler[handler].result.paths.binary);
  expect(fs.existsSync(path.join(installRoot(), 'shims', 'wave-c'))).toBe(false);
  expect(fs.existsSync(path.join(installRoot(), 'state', 'wave-c.json'))).toBe(false);
  expect(fs.existsSync(path.join(installRoot(), 'journal'))).toBe(false);
  process.stdout.write(`change sets: 8 installs, one refused -> ${restarts()} containerd restart(s)\n`);

  // Clean up: the seven go again, in one wave
  const cleanup = await Promise.all(HANDLERS.filter(h => h !== 'wave-c').map(h => runBundle(bundle, 'uninstall', args(h))));
  expect(cleanup.map(r => r.code)).toEqual(cleanup.map(() => 0));
  expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
}, 240_000);
