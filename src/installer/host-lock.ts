// One installer at a time per host and install root: a kernel lock (flock(2)) on a file
// under the host's /run/lock.
//
// The lock belongs to an open file of this process, so the kernel drops it when the process
// ends, however it ends (SIGKILL, OOM, node reboot): there is no pid to check, no stale lock
// to break, and a pid reused by another process means nothing. Node.js has no flock API, so
// util-linux's `flock` takes it on our descriptor (`flock FD`, as in `exec 9>f; flock 9`)
// and exits: the lock stays with the open file, which only this process still holds.
// The file is never removed: removing a lock file lets a waiter lock a file nobody else sees.
import { spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Logger } from '../shared/log';

export class HostLockError extends Error {}

/** The lock file's host path for an install root (in /run: gone at reboot, like the lock). */
export function hostLockPath(installRoot: string): string {
  return `/run/lock/rcm-node-installer/${installRoot.replace(/[^A-Za-z0-9._-]/g, '_')}.lock`;
}

/**
 * Runs `fn` holding an exclusive flock on `lockFile` (a path in this process's view), waiting
 * at most `timeoutMs` for another holder. `flock` is the util-linux program of the
 * installer's image (found on its PATH, or `flockBinary`).
 */
export async function withHostLock<T>(lockFile: string, timeoutMs: number, log: Logger, fn: () => Promise<T>,
  flockBinary = 'flock'): Promise<T> {
  fs.mkdirSync(path.dirname(lockFile), { recursive: true });
  const fd = fs.openSync(lockFile, 'a', 0o600); // created when missing, never truncated
  try {
    await lock(fd, lockFile, timeoutMs, log, flockBinary);
    return await fn();
  } finally {
    fs.closeSync(fd); // releases the lock
  }
}

function lock(fd: number, lockFile: string, timeoutMs: number, log: Logger, flockBinary: string): Promise<void> {
  const waitSeconds = String(Math.max(1, Math.round(timeoutMs / 1000)));
  return new Promise((resolve, reject) => {
    // fd 3 of flock is our open file: the lock it takes is this process's.
    const wait = timeoutMs > 0 ? ['--wait', waitSeconds] : ['--nonblock'];
    const child = spawn(flockBinary, ['--exclusive', ...wait, '3'], { stdio: ['ignore', 'ignore', 'pipe', fd] });
    let stderr = '';
    child.stderr!.on('data', d => { stderr += d; });
    const waiting = timeoutMs > 0 ? setTimeout(() => log.info('waiting for the host lock: another installer is working on this node', { lockFile }), 1000) : undefined;
    child.on('error', e => {
      clearTimeout(waiting);
      reject(new HostLockError(`cannot take the host lock ${lockFile}: ${flockBinary} could not run (${e.message}); the installer needs util-linux's flock`));
    });
    child.on('exit', code => {
      clearTimeout(waiting);
      if (code === 0) return resolve();
      reject(new HostLockError(code === 1
        ? `timed out after ${waitSeconds}s waiting for the host lock ${lockFile} (another installer holds it)`
        : `cannot take the host lock ${lockFile}: flock exited ${code}: ${stderr.trim()}`));
    });
  });
}

/**
 * The installers waiting for the host lock with a change of their own: each holds a flock on
 * a marker file in `<lock file>.waiting/` while it waits. The holder of the host lock asks
 * whether anyone waits, to leave its restart to the last of them (one restart for all their
 * changes). A marker whose flock nobody holds is left by a process that ended: it counts for
 * nothing and is removed. The marker is locked before it is renamed into the folder, so a
 * marker there is never seen unlocked while its process lives.
 */
export class LockWaiters {
  constructor(private readonly lockFile: string, private readonly log: Logger, private readonly kind: 'waiting' | 'members' = 'waiting',
    private readonly flockBinary = 'flock') {}

  private get dir(): string {
    return `${this.lockFile}.${this.kind}`;
  }

  /** Whether the process that announced `id` still lives. */
  async alive(id: string): Promise<boolean> {
    const marker = path.join(this.dir, id);
    if (!fs.existsSync(marker)) return false;
    if (await this.held(marker)) return true;
    fs.rmSync(marker, { force: true });
    return false;
  }

  /** Announces this process as waiting; the returned function withdraws it. */
  async announce(id: string): Promise<() => void> {
    const temporary = path.join(this.dir, `.${id}.new`);
    const marker = path.join(this.dir, id);
    // The folders go again when this run made them and nobody else uses them: a run that
    // changes nothing leaves the host as it was. Another run may remove them between our
    // mkdir and open: make them again then.
    let created: string | undefined;
    let fd: number | undefined;
    for (let attempt = 0; fd === undefined; attempt++) {
      created = fs.mkdirSync(this.dir, { recursive: true }) ?? created;
      try {
        fd = fs.openSync(temporary, 'w', 0o600);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || attempt >= 5) throw e;
      }
    }
    const removeFolders = () => {
      // The markers' folder goes when empty, whoever made it; its parents only if this run made them.
      try {
        fs.rmdirSync(this.dir);
      } catch {
        return;
      }
      for (let d = path.dirname(this.dir); created !== undefined && d.startsWith(created); d = path.dirname(d)) {
        try {
          fs.rmdirSync(d);
        } catch {
          return; // not empty: another run's marker, or the lock file
        }
      }
    };
    try {
      await lock(fd, temporary, 0, this.log, this.flockBinary);
      fs.renameSync(temporary, marker);
    } catch (e) {
      fs.closeSync(fd);
      fs.rmSync(temporary, { force: true });
      removeFolders();
      throw e;
    }
    let withdrawn = false;
    return () => {
      if (withdrawn) return;
      withdrawn = true;
      fs.rmSync(marker, { force: true });
      fs.closeSync(fd!);
      removeFolders();
    };
  }

  /** How many other live processes wait; markers of ended ones are removed. */
  async others(id: string): Promise<number> {
    if (!fs.existsSync(this.dir)) return 0;
    let live = 0;
    for (const name of fs.readdirSync(this.dir)) {
      if (name === id || name.startsWith('.')) continue;
      const marker = path.join(this.dir, name);
      if (await this.held(marker)) live++;
      else fs.rmSync(marker, { force: true });
    }
    return live;
  }

  /** Whether a live process holds the flock on `file` (asked with a non-blocking try). */
  private held(file: string): Promise<boolean> {
    return new Promise(resolve => {
      const child = spawn(this.flockBinary, ['--exclusive', '--nonblock', file, 'true'], { stdio: 'ignore' });
      child.on('error', () => resolve(true)); // cannot tell: count it, so that nothing is left unfinished by us
      child.on('exit', code => resolve(code !== 0 && fs.existsSync(file)));
    });
  }
}
