import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

/**
 * Makes this machine's cgroup v1 ("hybrid") layout what systemd sets up on a real host:
 * every controller bound to a v1 hierarchy of its own. These machines leave `hugetlb`
 * unbound, so it shows in the unified (v2) hierarchy, and crun refuses such a host ("cgroups
 * in hybrid mode not supported, drop all controllers from cgroupv2"), where runc does not.
 * Idempotent; returns the controllers it bound.
 */
export function bindStrayControllersToV1(): string[] {
  const unified = '/sys/fs/cgroup/unified/cgroup.controllers';
  if (!fs.existsSync(unified)) return []; // pure v1 or pure v2: nothing to do
  const stray = fs.readFileSync(unified, 'utf8').split(/\s+/).filter(Boolean);
  for (const controller of stray) {
    const mountPoint = path.join('/sys/fs/cgroup', controller);
    fs.mkdirSync(mountPoint, { recursive: true });
    execFileSync('mount', ['-t', 'cgroup', '-o', controller, 'cgroup', mountPoint]);
  }
  return stray;
}
