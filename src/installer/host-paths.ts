// Host paths as the host itself would resolve them, from inside a pod that has the host's /
// mounted somewhere else (--host-root).
//
// The kernel resolves a symlink found under the mount with the pod's root: an absolute target
// (`/etc/containerd/config.toml -> /etc/containerd/real.toml`, common with config
// management) would point into the pod, and a `..` could climb out of the mount. So every
// component is resolved here, by hand, the way the host resolves it: absolute targets start
// again at the host root, and `..` at the host root stays there (as in a chroot).
import * as fs from 'fs';
import * as path from 'path';

/** Linux gives up after 40 links in one lookup (ELOOP); so do we. */
const MAX_LINKS = 40;

export class HostPathError extends Error {}

/**
 * The path under `hostRoot` (as the installer sees it) that the host path `hostPath` names
 * on the host, with every symlink followed inside the host root. Components that do not
 * exist yet are kept as written, so the result is also where a new file goes. The result is
 * always `hostRoot` itself or below it.
 */
export function resolveInHostRoot(hostRoot: string, hostPath: string): string {
  let root: string;
  try {
    root = fs.realpathSync(hostRoot);
  } catch (e) {
    throw new HostPathError(`the host root ${hostRoot} cannot be used: ${(e as Error).message}`);
  }
  const pending = components(hostPath);
  let resolved: string[] = [];
  let links = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '..') {
      resolved.pop(); // at the host root this is a no-op, as for the host's own /..
      continue;
    }
    const candidate = [...resolved, part];
    const target = linkTarget(path.join(root, ...candidate));
    if (target === undefined) {
      resolved = candidate;
      continue;
    }
    if (++links > MAX_LINKS) throw new HostPathError(`too many levels of symbolic links resolving ${hostPath} under ${hostRoot}`);
    // An absolute target starts again at the host's /; a relative one from the link's folder.
    if (target.startsWith('/')) resolved = [];
    pending.unshift(...components(target));
  }
  return path.join(root, ...resolved);
}

/** The path's components, without empty ones and `.`; `..` is kept for the resolver. */
function components(p: string): string[] {
  return p.split('/').filter(c => c !== '' && c !== '.');
}

/** The target of a symlink; undefined for anything else, including a path that does not exist. */
function linkTarget(file: string): string | undefined {
  try {
    return fs.lstatSync(file).isSymbolicLink() ? fs.readlinkSync(file) : undefined;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw e;
  }
}
