import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ContainerdDaemon, startContainerd } from './containerd-daemon';
import { ControlPlane, startControlPlane } from './control-plane';
import { tail, unmountBelow } from './files';
import { Kubelet, printNodeInfo, startKubelet } from './kubelet';
import { buildOciImage } from './oci-image';
import { stackBinary } from './tools';

// A whole single-node cluster on 127.0.0.1, as ../shared/notes/test-cluster.md describes:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet of this run's
// Kubernetes (tools.ts: KUBE_VERSION) and a supervised containerd 2 (the current stack's build,
// with its runc on PATH) whose CRI uses a loopback-only CNI config and a busybox sandbox image.

/** busybox as an image: the sandbox ("pause") image and the workloads' image at once. */
export const BUSYBOX_IMAGE = 'docker.io/library/rcm-busybox:test';

export interface SingleNodeCluster {
  readonly dir: string;
  readonly controlPlane: ControlPlane;
  readonly containerd: ContainerdDaemon;
  readonly kubelet: Kubelet;
  readonly nodeName: string;
  /** Imports an OCI image tarball into the CRI's namespace. */
  importImage(tarball: string): void;
  /** Every component's log tail. */
  logTails(lines?: number): string;
  stop(): Promise<void>;
}

export async function buildBusybox(file: string): Promise<void> {
  const applets = ['sh', 'sleep', 'cat', 'echo', 'ls', 'readlink', 'true', 'false'];
  await buildOciImage({
    name: BUSYBOX_IMAGE,
    files: [{ source: fs.realpathSync('/bin/busybox'), target: '/bin/busybox' }],
    links: Object.fromEntries(applets.map(a => [`/bin/${a}`, 'busybox'])),
    directories: ['/tmp'],
    entrypoint: ['/bin/sleep', '2147483647'],
  }, file);
}

function listing(folder: string): string[] {
  return fs.existsSync(folder) ? fs.readdirSync(folder).map(entry => path.join(folder, entry)) : [];
}

function killAllTasks(containerd: ContainerdDaemon): void {
  const ids = containerd.ctr(['-n', 'k8s.io', 'tasks', 'ls', '-q']).split('\n').filter(Boolean);
  for (const id of ids) {
    try {
      containerd.ctr(['-n', 'k8s.io', 'tasks', 'kill', '--all', '--signal', 'SIGKILL', id]);
      containerd.ctr(['-n', 'k8s.io', 'tasks', 'delete', '--force', id]);
    } catch {
      // it ended on its own
    }
  }
}

/**
 * Kills every process still running a binary from the bed's folder (a shim the installer put
 * under its install root). containerd forgets some shims without stopping them: a runwasi shim
 * it took for leaked after a restart (it implements no Task.Pids), whose process stays; and
 * runwasi's shims do not exit when their pod's sandbox ends with the cluster (runwasi#703). Left
 * running, they would outlive this bed into the next suite's.
 */
function killStrayShims(dir: string): void {
  for (const pid of fs.readdirSync('/proc').filter(p => /^\d+$/.test(p))) {
    let exe: string;
    try {
      exe = fs.readlinkSync(`/proc/${pid}/exe`);
    } catch {
      continue;
    }
    if (exe.startsWith(`${dir}/`)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // it ended meanwhile
      }
    }
  }
}

export async function startSingleNodeCluster(nodeName = 'rcm-e2e-node'): Promise<SingleNodeCluster> {
  if (process.getuid?.() !== 0) throw new Error('the single-node cluster needs root (containerd and the kubelet run as root)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-e2e-'));
  const stops: (() => Promise<void>)[] = [];
  // The kubelet writes pod logs to fixed host folders; what this cluster adds goes again.
  const logFolders = ['/var/log/pods', '/var/log/containers'];
  const logsBefore = new Set(logFolders.flatMap(listing));
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
    unmountBelow(dir);
    try {
      execFileSync('umount', ['-l', dir], { stdio: 'ignore' });
    } catch {
      // not mounted (the cluster failed before)
    }
    fs.rmSync(dir, { recursive: true, force: true });
    for (const entry of logFolders.flatMap(listing)) {
      if (!logsBefore.has(entry)) fs.rmSync(entry, { recursive: true, force: true });
    }
  };
  try {
    // The kubelet's volumes (tmpfs mounts under its folder) must reach containerd's own mount
    // namespace (containerd-daemon.ts): the folder is a shared mount, as / is on a host that
    // boots systemd (this machine's is private).
    execFileSync('mount', ['--bind', dir, dir]);
    execFileSync('mount', ['--make-shared', dir]);
    const cniConfDir = path.join(dir, 'cni');
    fs.mkdirSync(cniConfDir);
    // Loopback only: pods use the host's network; no bridge, no private-range address.
    fs.writeFileSync(path.join(cniConfDir, '10-lo-only.conflist'),
      JSON.stringify({ cniVersion: '0.4.0', name: 'lo-only', plugins: [{ type: 'loopback' }] }));
    // containerd 2 with runc 1.4, both built from the Go module proxy (the current stack)
    const containerd = await startContainerd(stackBinary('containerd'), path.join(dir, 'containerd'),
      { sandboxImage: BUSYBOX_IMAGE, cniConfDir, cniBinDir: path.dirname(stackBinary('loopback')) });
    stops.push(() => containerd.stop());
    const importImage = (tarball: string) => {
      containerd.ctr(['-n', 'k8s.io', 'images', 'import', tarball]);
    };
    const busybox = path.join(dir, 'busybox.tar');
    await buildBusybox(busybox);
    importImage(busybox);

    const controlPlane = await startControlPlane({ controllerManager: true, scheduler: true });
    stops.push(() => controlPlane.stop());
    const kubelet = await startKubelet({ controlPlane, containerdSocket: containerd.socket, nodeName, dir: path.join(dir, 'kubelet') });
    stops.push(async () => {
      // Pods end the way the kubelet ends them; whatever is left is killed through containerd.
      try {
        controlPlane.kubectl(['delete', 'pods', '--all', '--all-namespaces', '--grace-period=1', '--timeout=60s', '--wait=true']);
      } catch {
        // the kubelet may be gone already
      }
      await kubelet.stop();
      killAllTasks(containerd);
      killStrayShims(dir);
    });

    printNodeInfo(controlPlane);
    const logTails = (lines = 30) => [
      controlPlane.logTails(lines),
      `--- kubelet (last ${lines} lines) ---\n${kubelet.logTail(lines)}`,
      `--- containerd (last ${lines} lines) ---\n${tail(containerd.log, lines)}`,
    ].join('\n');
    return { dir, controlPlane, containerd, kubelet, nodeName, importImage, logTails, stop: stopAll };
  } catch (e) {
    await stopAll();
    throw e;
  }
}
