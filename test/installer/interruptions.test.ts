import { ChildProcess, execFileSync, spawn, spawnSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { hostLockPath } from '../../src/installer/host-lock';
import { Journal, recoveryFor } from '../../src/installer/journal';
import { ContainerdDaemon, startContainerd } from '../support/containerd-daemon';
import { ArtifactServer, buildInstaller, publishShim, runBundle, startArtifactServer } from '../support/installer-bundle';

// Fault tests: the installer killed (SIGKILL) or stopped (SIGTERM, as when its pod is
// deleted) at each step of an install against a real containerd 1.6 daemon under the test
// supervisor. The next run must converge: the install done, or the original config byte for
// byte; no stale lock; status answering at once. The installer's RCM_TEST_PAUSE_AT hook
// holds it at a named step until it is signalled; "during the restart" needs no hook (a slow
// restart command).

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-faults-'));
let daemon: ContainerdDaemon;
let bundle: string;
let server: ArtifactServer;
let artifact: { url: string; sha256: string };
let slowUrl: string;
const trickles: NodeJS.Timeout[] = [];

beforeAll(async () => {
  bundle = buildInstaller(work);
  server = await startArtifactServer();
  artifact = await publishShim(server, work);
  slowUrl = server.handle('slow.tgz', (_req, res) => {
    res.writeHead(200, { 'content-length': 1_000_000 });
    trickles.push(setInterval(() => res.write(Buffer.from([0x1f])), 200));
  });
  daemon = await startContainerd();
}, 60_000);

afterAll(async () => {
  trickles.forEach(clearInterval);
  await server?.close();
  await daemon?.stop();
  fs.rmSync(work, { recursive: true, force: true });
});

const installRoot = () => path.join(daemon.dir, 'opt', 'rcm');
function args(restartCommand = daemon.restartCommand): string[] {
  return ['--host-root=/', `--install-root=${installRoot()}`, `--config=${daemon.config}`, `--socket=${daemon.socket}`, '--distro=containerd',
    '--restart=command', `--restart-command=${restartCommand}`, '--handler=rcmtest', '--health-timeout=20', '--retries=0',
    `--location=${artifact.url}`, `--sha256=${artifact.sha256}`];
}

/** Starts the installer; resolves once its stderr shows `marker`, with the child and how it ended. */
function startUntil(command: string, argv: string[], marker: RegExp, env: NodeJS.ProcessEnv = {}):
Promise<{ child: ChildProcess; ended: Promise<{ code: number | null; signal: string | null; stderr: string }> }> {
  const child = spawn(process.execPath, [bundle, command, `--result-file=${path.join(work, `r-${crypto.randomBytes(3).toString('hex')}.json`)}`, ...argv],
    { env: { PATH: process.env.PATH, ...env } });
  let stderr = '';
  const ended = new Promise<{ code: number | null; signal: string | null; stderr: string }>(resolve => {
    child.on('exit', (code, signal) => resolve({ code, signal, stderr }));
  });
  return new Promise((resolve, reject) => {
    child.stderr!.on('data', d => {
      stderr += d;
      if (marker.test(stderr)) resolve({ child, ended });
    });
    void ended.then(e => reject(new Error(`the installer ended before ${marker}: ${e.stderr}`)));
  });
}

function effectiveRuntimeType(): string | undefined {
  const dump = execFileSync('containerd', ['--config', daemon.config, 'config', 'dump'], { encoding: 'utf8' });
  return /runtimes\.rcmtest\]\s*\n(?:\s+\S.*\n)*?\s+runtime_type = "([^"]+)"/.exec(dump)?.[1];
}

function lockIsFree(): boolean {
  return spawnSync('flock', ['--nonblock', hostLockPath(installRoot()), 'true']).status === 0;
}

/** The converged node: the handler served from its one installed version, no journal, a free lock, status at once. */
async function expectInstalled(): Promise<void> {
  const status = await runBundle(bundle, 'status', args());
  expect(status.ms).toBeLessThan(3000);
  expect(status.result).toMatchObject({ installed: true, interrupted: [] });
  expect(effectiveRuntimeType()).toBe(status.result.state.binary);
  expect(fs.readdirSync(path.join(installRoot(), 'shims', 'rcmtest'))).toHaveLength(1);
  expect(fs.existsSync(path.join(installRoot(), 'journal'))).toBe(false);
  expect(lockIsFree()).toBe(true);
}

let original: string;
beforeEach(() => {
  original = fs.readFileSync(daemon.config, 'utf8');
});
afterEach(async () => {
  await daemon.waitReady();
  await runBundle(bundle, 'uninstall', args());
  expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
  // only the backups of the config stay
  expect(fs.existsSync(installRoot()) ? fs.readdirSync(installRoot()) : []).toEqual(expect.not.arrayContaining(['shims', 'state', 'journal']));
});

describe.each(['binary-written', 'config-written', 'state-written'])('interrupted after step %s', step => {
  test('SIGKILL: status answers at once and names it; the next install finishes or undoes it and converges', async () => {
    const { child, ended } = await startUntil('install', args(), new RegExp(`paused at ${step}`), { RCM_TEST_PAUSE_AT: step });
    child.kill('SIGKILL');
    expect((await ended).signal).toBe('SIGKILL');
    expect(lockIsFree()).toBe(true);
    const status = await runBundle(bundle, 'status', args());
    expect(status.ms).toBeLessThan(3000);
    expect(status.result.interrupted).toEqual(['rcmtest']);

    const retry = await runBundle(bundle, 'install', args());
    expect(retry.stderr).toMatch(/an installer was interrupted during the install of rcmtest: (undo|finish|complete)/);
    expect(retry.code).toBe(0);
    expect(['installed', 'unchanged']).toContain(retry.result.outcome);
    await expectInstalled();
  }, 60_000);

  test('SIGTERM: the installer finishes the change before it exits', async () => {
    const { child, ended } = await startUntil('install', args(), new RegExp(`paused at ${step}`), { RCM_TEST_PAUSE_AT: step });
    child.kill('SIGTERM');
    const end = await ended;
    expect(end.stderr).toMatch(/SIGTERM: finishing the change in progress first/);
    expect(end.code).toBe(0);
    await expectInstalled();
  }, 60_000);
});

describe('interrupted during the restart', () => {
  const slowRestart = () => `sleep 1.5; ${daemon.restartCommand}`;

  test('SIGKILL: the next run restarts again, checks, and completes the install', async () => {
    const { child, ended } = await startUntil('install', args(slowRestart()), /restarting containerd/);
    await new Promise(r => setTimeout(r, 300));
    child.kill('SIGKILL');
    await ended;
    await daemon.waitReady();
    const retry = await runBundle(bundle, 'install', args());
    expect(retry.stderr).toMatch(/interrupted during the install of rcmtest: finish/);
    expect(retry.code).toBe(0);
    expect(retry.result.outcome).toBe('unchanged');
    await expectInstalled();
  }, 60_000);

  test('SIGTERM: the restart and its check finish before the installer exits', async () => {
    const { child, ended } = await startUntil('install', args(slowRestart()), /restarting containerd/);
    child.kill('SIGTERM');
    const end = await ended;
    expect(end.code).toBe(0);
    await expectInstalled();
  }, 60_000);

  test('SIGKILL with a restart that fails: the next run undoes it, the config is the original byte for byte, exit 5', async () => {
    // a restart command that restarts containerd but reports failure while the handler is configured
    const breaking = `sleep 1; ${daemon.restartCommand}; ! grep -q rcmtest ${daemon.config}`;
    const { child, ended } = await startUntil('install', args(breaking), /restarting containerd/);
    child.kill('SIGKILL');
    await ended;
    await daemon.waitReady();
    const retry = await runBundle(bundle, 'install', args(breaking));
    expect(retry.code).toBe(5);
    expect(retry.result).toMatchObject({ reason: 'RestartFailedRolledBack' });
    expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
    expect(fs.existsSync(path.join(installRoot(), 'journal'))).toBe(false);
    expect(fs.existsSync(path.join(installRoot(), 'shims'))).toBe(false);
    expect(lockIsFree()).toBe(true);
    await daemon.waitReady();
    expect(effectiveRuntimeType()).toBeUndefined();
  }, 60_000);
});

test('SIGTERM while downloading (nothing on the host changed yet): it stops at once', async () => {
  const argv = args().map(a => (a.startsWith('--location=') ? `--location=${slowUrl}` : a)).filter(a => !a.startsWith('--sha256'));
  const { child, ended } = await startUntil('install', [...argv, '--download-timeout=30'], /install starting/);
  await new Promise(r => setTimeout(r, 700));
  const t = Date.now();
  child.kill('SIGTERM');
  const end = await ended;
  expect(Date.now() - t).toBeLessThan(1500);
  expect(end.code).toBe(143);
  expect(end.stderr).toMatch(/SIGTERM before anything on the host changed: stopping/);
  expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
  expect(fs.existsSync(path.join(installRoot(), 'shims'))).toBe(false);
  expect(fs.existsSync(path.join(installRoot(), 'journal'))).toBe(false);
  expect(lockIsFree()).toBe(true);
}, 60_000);

test('an uninstall SIGKILLed after its config write is finished by the next run', async () => {
  expect((await runBundle(bundle, 'install', args())).code).toBe(0);
  const { child, ended } = await startUntil('uninstall', args(), /paused at config-written/, { RCM_TEST_PAUSE_AT: 'config-written' });
  child.kill('SIGKILL');
  await ended;
  const status = await runBundle(bundle, 'status', args());
  expect(status.result.interrupted).toEqual(['rcmtest']);
  const retry = await runBundle(bundle, 'uninstall', args());
  expect(retry.stderr).toMatch(/interrupted during the uninstall of rcmtest: finish/);
  expect(retry.code).toBe(0);
  expect(fs.readFileSync(daemon.config, 'utf8')).toBe(original);
  expect(effectiveRuntimeType()).toBeUndefined();
  expect(fs.existsSync(path.join(installRoot(), 'shims'))).toBe(false);
  expect(fs.existsSync(path.join(installRoot(), 'journal'))).toBe(false);
}, 60_000);

test.each([
  ['prepared', 'old', 'undo'],
  ['prepared', 'new', 'finish'],
  ['config-written', 'new', 'finish'],
  ['config-written', 'old', 'undo-restart'],
  ['restarted', 'new', 'complete'],
  ['rolling-back', 'old', 'undo-restart'],
  ['rolling-back', 'new', 'finish'],
  ['config-written', 'an admin\'s', 'abandon'],
])('recoveryFor: phase %s, the config holds the %s bytes -> %s', (phase, holds, expected) => {
  const journal = { phase, original: 'old', edited: 'new' } as unknown as Journal;
  expect(recoveryFor(journal, holds === 'an admin\'s' ? 'other' : holds)).toBe(expected);
});
