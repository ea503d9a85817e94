// The host's own tools (containerd, ctr, systemctl, sh), found on the host.
//
// A command run through nsenter inherits the installer's environment, so the pod's PATH
// would decide which binary runs, and on k3s, rke2, k0s and microk8s containerd is on no
// PATH at all: each keeps it in a folder of its own. So tools are looked up here, in the
// distribution's folder first and then in the host's standard PATH, inside the host root;
// they are run by their absolute host path, and every host command gets that host PATH.
import * as fs from 'fs';
import { resolveInHostRoot } from './host-paths';
import { Distro } from './options';

/** Where each distribution keeps containerd and ctr (read from kata-deploy and the original runtime-class-manager). */
export const DISTRO_BIN_DIRS: Record<Distro, string[]> = {
  containerd: [],
  k3s: ['/var/lib/rancher/k3s/data/current/bin'],
  rke2: ['/var/lib/rancher/rke2/bin'],
  k0s: ['/var/lib/k0s/bin'],
  microk8s: ['/snap/microk8s/current/bin'],
  // CRI-O's packages and OpenShift's node image put crio in /usr/bin (the standard PATH).
  crio: [],
};

/** The PATH of a standard Linux host (systemd's default for services, plus /usr/local). */
export const STANDARD_HOST_PATH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

/** The folders searched on the host for `distro`'s tools, in order. */
export function hostSearchPath(distro: Distro): string[] {
  return [...DISTRO_BIN_DIRS[distro], ...STANDARD_HOST_PATH];
}

/**
 * The host path of the executable `name` in the first folder of `dirs` that has one (as the
 * host's shell would pick it), or undefined. The path is returned as the host names it (for
 * k3s `.../data/current/bin/containerd`, `current` being a link the host follows itself).
 */
export function findHostTool(hostRoot: string, dirs: string[], name: string): string | undefined {
  for (const dir of dirs) {
    const hostPath = `${dir}/${name}`;
    if (isExecutableFile(resolveInHostRoot(hostRoot, hostPath))) return hostPath;
  }
  return undefined;
}

function isExecutableFile(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}
