import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { containerdConfigFor } from './containerd-daemon';
import { ControlPlane, freePort, startControlPlane } from './control-plane';
import { renderK3sConfig } from './k3s';
import { kubeletArgs, kubeletConfig, nodeReady } from './kubelet';
import { layOut, NodeFile, NodeHost, removeCgroups, startNodeHost } from './node-host';
import { eventually } from './rest';
import { BUSYBOX_IMAGE, buildBusybox } from './single-node-cluster';
import { CONTAINERD_BINARIES, kubeBinary } from './tools';

// A cluster of three real nodes on one machine, each a NodeHost (own mount and pid
// namespaces, own containerd, kubelet 1.20.2, config, install root and kubelet state), all
// against one control plane on 127.0.0.1. The nodes are shaped as in a mixed fleet:
//
// - "plain": containerd 1.6 from Debian bookworm at /usr/bin, /etc/containerd/config.toml,
//   unit `containerd`;
// - "custom": containerd 1.7 from Debian trixie at /usr/bin, an admin-customised config
//   (comments, runc options written out, other settings changed) kept under
//   /etc/node-config and linked from /etc/containerd/config.toml, unit `containerd`;
// - "k3s": containerd 1.6 only in /var/lib/rancher/k3s/data/current/bin (none on PATH), its
//   config rendered at every start of the unit `k3s-agent` from the node's
//   config.toml.tmpl and k3s's base, socket /run/k3s/containerd/containerd.sock.

export type NodeShape = 'plain' | 'custom' | 'k3s';

export interface ClusterNode {
  readonly name: string;
  readonly shape: NodeShape;
  readonly host: NodeHost;
  /** The unit that restarts this node's containerd. */
  readonly containerdUnit: string;
  /** containerd's socket, as the node sees it. */
  readonly socket: string;
  /** The containerd and ctr binaries, as the node sees them. */
  readonly containerd: string;
  readonly ctrBinary: string;
  /** The config containerd reads (for k3s the rendered file), as the node sees it. */
  readonly effectiveConfig: string;
  /** The file an admin edits (k3s: the template). */
  readonly editedConfig: string;
  /** The node's cgroup root (its pods' cgroups are below). */
  readonly cgroupRoot: string;
  /** ctr against this node's containerd, in the node. */
  ctr(args: string[]): string;
  /** `containerd config dump` with the node's own binary and config. */
  configDump(): string;
  /** Imports an OCI tarball (a machine path; the node sees the machine's /tmp) into the CRI's namespace. */
  importImage(tarball: string): void;
  logTails(lines?: number): string;
}

export interface MultiNodeCluster {
  readonly dir: string;
  readonly controlPlane: ControlPlane;
  readonly nodes: ClusterNode[];
  node(name: string): ClusterNode;
  importImage(tarball: string): void;
  logTails(lines?: number): string;
  stop(): Promise<void>;
}

export const K3S_ETC = '/var/lib/rancher/k3s/agent/etc/containerd';
export const K3S_BIN = '/var/lib/rancher/k3s/data/current/bin';
const K3S_DATA = '/var/lib/rancher/k3s/data/8e9d5ba8a7a7';
/** The node's own template: k3s's base plus a site-specific runtime, as k3s's docs show. */
export const K3S_TEMPLATE = `{{ template "base" . }}

# Site customisation (kept by every k3s upgrade): an extra runc handler for debugging.
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."runc-debug"]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."runc-debug".options]
  BinaryName = "${K3S_BIN}/runc"
`;

const LO_ONLY = JSON.stringify({ cniVersion: '0.4.0', name: 'lo-only', plugins: [{ type: 'loopback' }] });
const STANDARD_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

interface Shape {
  readonly unit: string;
  readonly socket: string;
  readonly containerd: string;
  readonly ctr: string;
  readonly effectiveConfig: string;
  readonly editedConfig: string;
  readonly privateDirs: string[];
  readonly files: Record<string, NodeFile>;
  /** The containerd unit's start script (after the fault hook). */
  readonly start: string;
}

function shapeOf(shape: NodeShape): Shape {
  const c16 = CONTAINERD_BINARIES[0];
  const c17 = CONTAINERD_BINARIES.find(c => c.version === '1.7')!;
  const cri = { sandboxImage: BUSYBOX_IMAGE, cniConfDir: '/etc/cni/net.d', cniBinDir: '/opt/cni/bin' };
  const plainPaths = { root: '/var/lib/containerd', state: '/run/containerd', socket: '/run/containerd/containerd.sock' };
  const plainFiles: Record<string, NodeFile> = {
    '/etc/cni/net.d/10-lo-only.conflist': LO_ONLY,
    '/opt/cni/bin': { link: '/usr/lib/cni' },
  };
  const defaults = (binary: string) => execFileSync(binary, ['config', 'default'], { encoding: 'utf8' });
  switch (shape) {
    case 'plain':
      return {
        unit: 'containerd',
        socket: plainPaths.socket,
        containerd: '/usr/bin/containerd',
        ctr: '/usr/bin/ctr',
        effectiveConfig: '/etc/containerd/config.toml',
        editedConfig: '/etc/containerd/config.toml',
        privateDirs: ['/var/lib/containerd'],
        files: { ...plainFiles, '/etc/containerd/config.toml': containerdConfigFor(defaults(c16.binary), plainPaths, cri) },
        start: 'exec /usr/bin/containerd',
      };
    case 'custom': {
      const bin = path.dirname(c17.binary);
      // An admin's config: written out from 1.7's defaults, then customised; cgroupfs stays the
      // driver (SystemdCgroup = true needs systemd, which these machines do not run).
      const config = '# Managed by the site\'s configuration management: containerd 1.7, node pool "custom".\n' +
        containerdConfigFor(defaults(c17.binary), plainPaths, cri)
          .replace(/max_concurrent_downloads = \d+/, 'max_concurrent_downloads = 6')
          .replace(/(\[plugins\."io\.containerd\.grpc\.v1\.cri"\.containerd\.runtimes\.runc\.options\][^[]*?)BinaryName = ""/, '$1BinaryName = "/usr/bin/runc"')
          .replace(/(\[plugins\."io\.containerd\.grpc\.v1\.cri"\.containerd\.runtimes\.runc\.options\][^[]*?)SystemdCgroup = false/, '$1SystemdCgroup = false # cgroupfs, as the kubelet');
      return {
        unit: 'containerd',
        socket: plainPaths.socket,
        containerd: '/usr/bin/containerd',
        ctr: '/usr/bin/ctr',
        effectiveConfig: '/etc/containerd/config.toml',
        editedConfig: '/etc/node-config/containerd/config.toml',
        privateDirs: ['/var/lib/containerd'],
        files: {
          ...plainFiles,
          // Debian trixie's containerd package, installed over bookworm's.
          '/usr/bin/containerd': { copy: path.join(bin, 'containerd') },
          '/usr/bin/ctr': { copy: path.join(bin, 'ctr') },
          '/usr/bin/containerd-shim-runc-v2': { copy: path.join(bin, 'containerd-shim-runc-v2') },
          '/etc/node-config/containerd/config.toml': config,
          '/etc/containerd/config.toml': { link: '/etc/node-config/containerd/config.toml' },
        },
        start: 'exec /usr/bin/containerd',
      };
    }
    case 'k3s': {
      const socket = '/run/k3s/containerd/containerd.sock';
      const base = containerdConfigFor(defaults(c16.binary), { root: '/var/lib/rancher/k3s/agent/containerd', state: '/run/k3s/containerd', socket },
        { sandboxImage: BUSYBOX_IMAGE, cniConfDir: '/var/lib/rancher/k3s/agent/etc/cni/net.d', cniBinDir: K3S_BIN });
      return {
        unit: 'k3s-agent',
        socket,
        containerd: `${K3S_BIN}/containerd`,
        ctr: `${K3S_BIN}/ctr`,
        effectiveConfig: `${K3S_ETC}/config.toml`,
        editedConfig: `${K3S_ETC}/config.toml.tmpl`,
        privateDirs: ['/var/lib/rancher/k3s/agent/containerd'],
        files: {
          // No containerd on this node's PATH: k3s brings its own.
          '/usr/bin/containerd': { remove: true },
          '/usr/bin/ctr': { remove: true },
          '/usr/bin/containerd-shim-runc-v2': { remove: true },
          '/usr/bin/containerd-shim': { remove: true },
          '/usr/bin/containerd-shim-runc-v1': { remove: true },
          '/usr/bin/runc': { remove: true },
          '/etc/containerd': { remove: true },
          [`${K3S_DATA}/bin/containerd`]: { copy: '/usr/bin/containerd' },
          [`${K3S_DATA}/bin/ctr`]: { copy: '/usr/bin/ctr' },
          [`${K3S_DATA}/bin/containerd-shim-runc-v2`]: { copy: '/usr/bin/containerd-shim-runc-v2' },
          [`${K3S_DATA}/bin/runc`]: { copy: '/usr/bin/runc' },
          [`${K3S_DATA}/bin/loopback`]: { copy: '/usr/lib/cni/loopback' },
          [`${K3S_DATA}/base-config.toml`]: base,
          '/var/lib/rancher/k3s/data/current': { link: K3S_DATA },
          '/var/lib/rancher/k3s/agent/etc/cni/net.d/10-lo-only.conflist': LO_ONLY,
          [`${K3S_ETC}/config.toml.tmpl`]: K3S_TEMPLATE,
          // An agent node: the installer restarts k3s-agent.
          '/etc/systemd/system/k3s-agent.service': '[Service]\nExecStart=/usr/local/bin/k3s agent\nKillMode=process\n',
        },
        // What k3s does at every start: render config.toml from the template, then run its containerd.
        start: [
          renderK3sConfig(K3S_ETC, 'config.toml.tmpl', '/var/lib/rancher/k3s/data/current/base-config.toml'),
          `PATH=${K3S_BIN}:${STANDARD_PATH} exec ${K3S_BIN}/containerd --config ${K3S_ETC}/config.toml`,
        ].join('\n'),
      };
    }
  }
}

/**
 * A test hook in every containerd unit: a script at /etc/rcm-node/fault/<unit> runs before the
 * daemon starts, and its failure fails the start (the way a broken node refuses a restart).
 */
function unitScript(unit: string, start: string): string {
  return `export PATH=${STANDARD_PATH}
if [ -f /etc/rcm-node/fault/${unit} ]; then sh /etc/rcm-node/fault/${unit} || exit 1; fi
${start}
`;
}

async function startNode(controlPlane: ControlPlane, dir: string, name: string, shape: NodeShape, busybox: string): Promise<ClusterNode> {
  const s = shapeOf(shape);
  const cgroupRoot = `/rcm-e2e/${name}`;
  const [port, healthzPort] = [await freePort(), await freePort()];
  const kubelet = ['exec', kubeBinary('kubelet'), ...kubeletArgs({
    kubeconfig: controlPlane.kubeconfig, config: '/var/lib/kubelet/config.yaml', containerdSocket: s.socket, nodeName: name,
  })].join(' ');
  // The kubelet wants its cgroup root to exist in every hierarchy.
  for (const hierarchy of fs.existsSync('/sys/fs/cgroup') ? fs.readdirSync('/sys/fs/cgroup') : []) {
    const top = path.join('/sys/fs/cgroup', hierarchy);
    if (fs.existsSync(path.join(top, 'cgroup.procs'))) fs.mkdirSync(path.join(top, cgroupRoot), { recursive: true });
  }
  const host = await startNodeHost({
    name,
    dir,
    privateDirs: [...s.privateDirs, '/var/lib/kubelet', '/var/log/pods', '/var/log/containers'],
    units: { [s.unit]: unitScript(s.unit, s.start), kubelet: `export PATH=${STANDARD_PATH}\n${kubelet}\n` },
  });
  const ctr = (args: string[]) => host.run([s.ctr, '--address', s.socket, ...args]);
  const node: ClusterNode = {
    name,
    shape,
    host,
    containerdUnit: s.unit,
    socket: s.socket,
    containerd: s.containerd,
    ctrBinary: s.ctr,
    effectiveConfig: s.effectiveConfig,
    editedConfig: s.editedConfig,
    cgroupRoot,
    ctr,
    configDump: () => host.run([s.containerd, '--config', s.effectiveConfig, 'config', 'dump']),
    importImage: tarball => void ctr(['-n', 'k8s.io', 'images', 'import', tarball]),
    logTails: (lines = 30) => [
      `--- ${name}: kubelet (last ${lines} lines) ---\n${lastLines(host.read('/var/log/kubelet.log'), lines)}`,
      `--- ${name}: ${s.unit} (containerd; last ${lines} lines) ---\n${lastLines(host.read(`/var/log/${s.unit}.log`), lines)}`,
      `--- ${name}: unit starts and exits ---\n${lastLines(host.read(`/var/log/rcm-units/${s.unit}.log`), 10)}\n${lastLines(host.read('/var/log/rcm-units/kubelet.log'), 10)}`,
    ].join('\n'),
  };
  try {
    layOut(host, { ...s.files, '/etc/rcm-node/name': `${name}\n`, '/var/lib/kubelet/config.yaml': kubeletConfig({ port, healthzPort, cgroupRoot }) });
    host.startUnits();
    await eventually(async () => ctr(['version']) !== undefined, 30_000, () => `${name}: containerd did not answer\n${node.logTails()}`);
    node.importImage(busybox);
  } catch (e) {
    await host.stop();
    throw e;
  }
  return node;
}

function lastLines(text: string | undefined, lines: number): string {
  return (text ?? '').split('\n').slice(-lines).join('\n');
}

function killAllTasks(node: ClusterNode): void {
  try {
    for (const id of node.ctr(['-n', 'k8s.io', 'tasks', 'ls', '-q']).split('\n').filter(Boolean)) {
      try {
        node.ctr(['-n', 'k8s.io', 'tasks', 'kill', '--all', '--signal', 'SIGKILL', id]);
        node.ctr(['-n', 'k8s.io', 'tasks', 'delete', '--force', id]);
      } catch {
        // it ended on its own
      }
    }
  } catch {
    // containerd is not answering: the pid namespace's end takes the rest
  }
}

/**
 * Starts the control plane and one node per entry of `nodes` (name -> shape), each Ready,
 * with the busybox image (sandbox and workloads) imported. The node monitor's grace period
 * is short (15 s, a stock flag) so that a stopped kubelet shows as NotReady soon.
 */
export async function startMultiNodeCluster(nodes: Record<string, NodeShape>): Promise<MultiNodeCluster> {
  if (process.getuid?.() !== 0) throw new Error('the multi-node cluster needs root (namespaces, containerd and kubelets)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-fleet-'));
  const started: ClusterNode[] = [];
  let controlPlane: ControlPlane | undefined;
  const stop = async () => {
    if (controlPlane && started.length > 0) {
      try {
        controlPlane.kubectl(['delete', 'pods', '--all', '--all-namespaces', '--grace-period=1', '--timeout=60s', '--wait=true']);
      } catch {
        // a kubelet may be gone already
      }
    }
    for (const node of started) {
      node.host.tryRun(['systemctl', 'stop', 'kubelet']);
      killAllTasks(node);
      await node.host.stop().catch(() => undefined);
      removeCgroups(node.cgroupRoot);
    }
    removeCgroups('/rcm-e2e');
    await controlPlane?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    const busybox = path.join(dir, 'busybox.tar');
    await buildBusybox(busybox);
    controlPlane = await startControlPlane({
      controllerManager: true,
      scheduler: true,
      controllerManagerArgs: ['--node-monitor-grace-period=15s', '--node-monitor-period=2s'],
    });
    for (const [name, shape] of Object.entries(nodes)) {
      started.push(await startNode(controlPlane, path.join(dir, name), name, shape, busybox));
    }
    const cp = controlPlane;
    for (const node of started) {
      await eventually(async () => nodeReady(cp, node.name), 90_000, () => `node ${node.name} did not become Ready\n${node.logTails(40)}`);
    }
    const logTails = (lines = 30) => [cp.logTails(lines), ...started.map(n => n.logTails(lines))].join('\n');
    return {
      dir,
      controlPlane: cp,
      nodes: started,
      node: name => started.find(n => n.name === name) ?? (() => {
        throw new Error(`no node ${name}`);
      })(),
      importImage: tarball => started.forEach(n => n.importImage(tarball)),
      logTails,
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
