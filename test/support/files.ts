import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

/** The last `lines` lines of a log file (empty when it does not exist yet), for failure messages. */
export function tail(file: string, lines: number): string {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n') : '';
}

/**
 * Lazily unmounts everything mounted below `dir` (pods' secret volumes, container root
 * filesystems), deepest first, so that the folder can be removed.
 */
export function unmountBelow(dir: string): void {
  const prefix = fs.realpathSync(dir) + '/';
  const mounts = fs.readFileSync('/proc/self/mounts', 'utf8').split('\n')
    .map(line => line.split(' ')[1]?.replace(/\\040/g, ' '))
    .filter((m): m is string => m !== undefined && m.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
  for (const mount of mounts) {
    try {
      execFileSync('umount', ['-l', mount], { stdio: 'ignore' });
    } catch {
      // already gone with its parent
    }
  }
}

/** Writes `file` below a node's root file system `root` with `mode`, replacing what was there (a link too). */
export function put(root: string, file: string, data: string | Buffer, mode = 0o644): void {
  const target = path.join(root, file);
  fs.mkdirSync(path.dirname(target), { recursive: true });
  fs.rmSync(target, { force: true });
  fs.writeFileSync(target, data, { mode });
  fs.chmodSync(target, mode);
}
