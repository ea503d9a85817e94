import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { hostLockPath, HostLockError, withHostLock } from '../../src/installer/host-lock';
import { Logger } from '../../src/shared/log';
import { FakeHost, startFakeHost } from '../support/fake-host';
import { ArtifactServer, buildInstaller, publishShim, runBundle, startArtifactServer } from '../support/installer-bundle';

// The host lock is a kernel lock (util-linux flock on a file in the host's /run/lock): other
// processes see it held exactly while its holder lives, and `flock -n` from outside is the
// oracle of whether it is held.

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-lock-'));
const log = new Logger(false);
const started: ChildProcess[] = [];
afterAll(() => {
  for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
  fs.rmSync(work, { recursive: true, force: true });
});

/** Whether someone holds the flock on `file`, asked of the kernel by another process. */
function heldByAnother(file: string): boolean {
  return spawnSync('flock', ['--nonblock', file, 'true']).status === 1;
}

/** A process that takes the flock on `file` and keeps it until killed. */
async function holder(file: string): Promise<ChildProcess> {
  // --no-fork: the holder is sleep itself (a forked child would keep the lock after flock dies).
  const child = spawn('flock', ['--no-fork', file, 'sleep', '120'], { stdio: 'ignore' });
  started.push(child);
  for (let i = 0; i < 50 && !heldByAnother(file); i++) await new Promise(r => setTimeout(r, 50));
  expect(heldByAnother(file)).toBe(true);
  return child;
}

describe('withHostLock', () => {
  test('holds the kernel lock while the work runs and not after; the file stays and holds no pid', async () => {
    const file = path.join(work, 'a', 'held.lock');
    const during = await withHostLock(file, 5000, log, async () => heldByAnother(file));
    expect(during).toBe(true);
    expect(heldByAnother(file)).toBe(false);
    expect(fs.readFileSync(file, 'utf8')).toBe('');
  });

  test('is released when the work throws', async () => {
    const file = path.join(work, 'throws.lock');
    await expect(withHostLock(file, 5000, log, async () => { throw new Error('boom'); })).rejects.toThrow('boom');
    expect(heldByAnother(file)).toBe(false);
  });

  test('waits for a live holder, and times out with a clear error', async () => {
    const file = path.join(work, 'busy.lock');
    const other = await holder(file);
    const t = Date.now();
    await expect(withHostLock(file, 1000, log, async () => 'ran')).rejects.toThrow(/timed out after 1s waiting for the host lock .*busy\.lock \(another installer holds it\)/);
    expect(Date.now() - t).toBeLessThan(3000);
    other.kill('SIGKILL');
  });

  test('a holder killed with SIGKILL frees the lock at once: the waiter goes on', async () => {
    const file = path.join(work, 'killed.lock');
    const other = await holder(file);
    const waiting = withHostLock(file, 30_000, log, async () => Date.now());
    await new Promise(r => setTimeout(r, 500));
    const killedAt = Date.now();
    other.kill('SIGKILL');
    const ranAt = await waiting;
    expect(ranAt - killedAt).toBeLessThan(1500);
  });

  test('without a flock program it refuses to run unlocked', async () => {
    const file = path.join(work, 'noflock.lock');
    await expect(withHostLock(file, 1000, log, async () => 'ran', '/nonexistent/flock')).rejects.toThrow(HostLockError);
    await expect(withHostLock(file, 1000, log, async () => 'ran', '/nonexistent/flock')).rejects.toThrow(/needs util-linux's flock/);
  });

  test('the lock file lives in the host\'s /run/lock, one per install root', () => {
    expect(hostLockPath('/opt/rcm')).toBe('/run/lock/rcm-node-installer/_opt_rcm.lock');
    expect(hostLockPath('/var/lib/rcm')).not.toBe(hostLockPath('/opt/rcm'));
  });
});

describe('the installer and its lock, on a fake host', () => {
  let bundle: string;
  let server: ArtifactServer;
  let host: FakeHost;
  let url: string;
  const CONFIG = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n';

  beforeAll(async () => {
    bundle = buildInstaller(work);
    server = await startArtifactServer();
    url = (await publishShim(server, work)).url;
    host = await startFakeHost({
      'usr/bin/containerd': { copy: '/usr/bin/containerd' },
      'etc/containerd/config.toml': CONFIG,
      // what the previous installer version left: a pid-file lock naming a live process (the host's init)
      'opt/rcm/.lock': '{"pid":1,"since":"2026-01-01T00:00:00.000Z"}',
    }, 'while true; do sleep 1; done');
  }, 60_000);
  afterAll(async () => {
    await host?.stop();
    await server?.close();
  });

  const args = (handler: string) => [`--host-root=${host.root}`, `--host-pid=${host.pid}`, '--distro=containerd', `--handler=${handler}`, '--retries=0'];

  test('an installer SIGKILLed while it holds the lock blocks nobody; status never waits', async () => {
    // GIVEN an installer stuck in its restart, holding the lock
    const lockFile = path.join(host.root, hostLockPath('/opt/rcm'));
    const resultFile = path.join(work, 'stuck.json');
    // (no gather window: a written change that waits for others of its set takes the lock in
    // short polls, and a check between two would see it free)
    const stuck = spawn(process.execPath, [bundle, 'install', ...args('rcmtest'), `--location=${url}`, '--restart=command',
      '--restart-command=sleep 60', '--health-timeout=1', '--set-gather=0', `--result-file=${resultFile}`], { stdio: 'ignore' });
    started.push(stuck);
    // Held, and still held half a second later: the installer is in its restart, not in a short hold before it.
    const sleep = (ms: number) => new Promise(r => setTimeout(r, ms));
    for (let i = 0; i < 100; i++) {
      if (heldByAnother(lockFile)) {
        await sleep(500);
        if (heldByAnother(lockFile)) break;
      }
      await sleep(100);
    }
    expect(heldByAnother(lockFile)).toBe(true);

    // WHEN status is asked meanwhile THEN it answers at once
    const status = await runBundle(bundle, 'status', args('rcmtest'));
    expect(status.code).toBe(0);
    expect(status.ms).toBeLessThan(3000);

    // WHEN the holder is killed THEN the lock is free, and the next installer goes on at once
    stuck.kill('SIGKILL');
    await new Promise(r => stuck.once('exit', r));
    expect(heldByAnother(lockFile)).toBe(false);
    const next = await runBundle(bundle, 'install', [...args('othertest'), `--location=${url}`, '--shim-name=rcmtest', '--restart=none']);
    expect(next.code).toBe(0);
    expect(next.result.timings.lockWaitMs).toBeLessThan(1000);
    // AND the old pid-file lock of a live process did not wedge anything
    expect(fs.existsSync(path.join(host.root, 'opt/rcm/.lock'))).toBe(true);
  }, 60_000);

  test('a second installer waits while the first holds the lock, then goes on', async () => {
    const lockFile = path.join(host.root, hostLockPath('/opt/rcm'));
    const other = await holder(lockFile);
    const second = runBundle(bundle, 'uninstall', [...args('othertest'), '--restart=none']);
    await new Promise(r => setTimeout(r, 2000));
    expect(heldByAnother(lockFile)).toBe(true); // still the holder's: the installer waits
    other.kill('SIGKILL');
    const r = await second;
    expect(r.stderr).toMatch(/waiting for the host lock/);
    expect(r.code).toBe(0);
    expect(r.result.outcome).toBe('uninstalled');
    expect(r.result.timings.lockWaitMs).toBeGreaterThanOrEqual(1500);
  }, 60_000);
});
