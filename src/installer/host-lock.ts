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
    const child = spawn(flockBinary, ['--exclusive', '--wait', waitSeconds, '3'], { stdio: ['ignore', 'ignore', 'pipe', fd] });
    let stderr = '';
    child.stderr!.on('data', d => { stderr += d; });
    const waiting = setTimeout(() => log.info('waiting for the host lock: another installer is working on this node', { lockFile }), 1000);
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
