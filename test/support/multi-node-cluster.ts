import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { containerdConfigFor } from './containerd-daemon';
import { ControlPlane, freePort, startControlPlane } from './control-plane';
import { CRICTL_BINARY, CRIO_BINARY, CRIO_DROPIN_DIR, CRIO_NSPAWN_ARGS, CRIO_SOCKET, CRIO_TEST_BED_CONFIG, copyIntoStorage, liveStorage, ociImageId, prepareCrioRoot } from './crio-node';
import { renderK3sConfig } from './k3s';
import { kubeletArgs, kubeletConfig, nodeReady, printNodeInfo } from './kubelet';
import { layOut, NodeFile, NodeHost, removeCgroups, startNodeHost } from './node-host';
import { eventually } from './rest';
import { BUSYBOX_IMAGE, buildBusybox } from './single-node-cluster';
import { bootSystemdKubeletNode } from './systemd-kubelet-node';
import { SystemdNode } from './systemd-node';
import { CONTAINERD_BINARIES, kubeBinary, STACK_BIN_DIR } from './tools';

// A cluster of three real nodes on one machine, all against one control plane on 127.0.0.1,
// each with its own containerd, a kubelet of this run's Kubernetes (KUBE_VERSION), config,
// install root and kubelet state. The nodes are shaped as in a mixed fleet:
//
// - "plain": a production-shaped node (systemd-kubelet-node.ts): PID 1 is a real systemd 252
//   (systemd-nspawn, Debian bookworm), containerd 2.4 (built from the Go module proxy)
//   installed over bookworm's 1.6 (runc stays Debian's 1.1.5) under Debian's stock containerd.service (systemd's default
//   start limit: 5 starts in 10 s), its config containerd 2.4's own `config default` (version 4)
//   with runc's SystemdCgroup = true at /etc/containerd/config.toml, the kubelet as
//   kubelet.service with `cgroupDriver: systemd`; its kubelet lists `status.runtimeHandlers`;
// - "custom": the same kind of node with Debian trixie's containerd 1.7 installed over
//   bookworm's binaries, and an admin-customised config (comments, runc options written out,
//   other settings changed; SystemdCgroup = true) kept under /etc/node-config and linked from
//   /etc/containerd/config.toml; containerd 1.7 reports no runtime handlers, so its kubelet
//   lists none: health there comes from the installer's own checks;
// - "k3s": a NodeHost (own mount and pid namespaces, a `systemctl` stand-in, cgroupfs):
//   containerd 1.6 only in /var/lib/rancher/k3s/data/current/bin (none on PATH), its config
//   rendered at every start of the unit `k3s-agent` from the node's config.toml.tmpl and k3s's
//   base, socket /run/k3s/containerd/containerd.sock;
// - "crio": a production-shaped node whose runtime is CRI-O 1.34 (crio-node.ts: built from the Go
//   module proxy, Debian's conmon, a pinns stand-in) under CRI-O's own crio.service, containerd.service
//   masked, the kubelet on /var/run/crio/crio.sock; its images are copied into its storage before it
//   boots (startMultiNodeCluster's `preloadImages`).
//
// An installer Job (privileged, hostPID, the host's /) on a systemd node reaches the node's
// real systemd through `nsenter --target 1`: its `systemctl restart containerd` is systemd's,
// start limit included.

export type NodeShape = 'plain' | 'custom' | 'k3s' | 'crio';

/** One start or end of a unit, as a scenario sees it on any kind of node. */
export interface UnitEvent {
  /** When (ms since the epoch, the machine's clock). */
  readonly at: number;
  /**
   * - `start`: a NodeHost's supervisor started the unit's script (a refused start too); on a
   *   systemd node, containerd's daemon booted ("containerd successfully booted", at the time it
   *   logged), or for another unit systemd's start job succeeded ("Started <unit>").
   * - `exit`: the unit's process ended (on a systemd node: its main or a start-up process
   *   exited, or it was deactivated).
   * - `failed`: systemd's start job failed ("Failed to start <unit>"; systemd nodes only).
   */
  readonly event: 'start' | 'exit' | 'failed';
  /** The process (NodeHost; on a systemd node containerd's daemon for its starts, else 0). */
  readonly pid: number;
}

/** What the scenarios do on a node, whichever kind it is: commands and files in the node's own view, its units. */
export interface NodeAccess {
  readonly name: string;
  /** Runs a command in the node's view; returns stdout, throws on failure. */
  run(argv: string[], input?: string | Buffer): string;
  tryRun(argv: string[]): { code: number; stdout: string; stderr: string };
  /** A file as the node sees it (symlinks followed in the node's view); undefined when absent. */
  read(file: string): string | undefined;
  write(file: string, data: string, mode?: number): void;
  /** `systemctl <command> <unit>` in the node (systemd's own, or the NodeHost's stand-in). */
  systemctl(command: 'restart' | 'stop' | 'start', unit: string): void;
  /** The unit's starts and ends, oldest first. */
  unitEvents(unit: string): UnitEvent[];
  /** What the unit printed (its log file, or its journal of this boot). */
  unitOutput(unit: string): string;
}

export interface ClusterNode {
  readonly name: string;
  readonly shape: NodeShape;
  /** 'systemd': PID 1 is systemd (systemd-nspawn); 'nodehost': a NodeHost with a systemctl stand-in. */
  readonly kind: 'systemd' | 'nodehost';
  readonly host: NodeAccess;
  /** The systemd node (kind 'systemd' only): journal counters, unit state. */
  readonly systemd?: SystemdNode;
  /** The unit that restarts this node's containerd (on a CRI-O node: crio). */
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
  /**
   * Where the node's pods' cgroups go: below this cgroup root (NodeHost, cgroupfs driver), or
   * below this machine folder of the node's own cgroup (systemd: the kubelet's kubepods.slice).
   */
  readonly cgroupRoot: string;
  /** ctr against this node's containerd, in the node (on a CRI-O node: crictl against CRI-O's socket). */
  ctr(args: string[]): string;
  /** `containerd config dump` with the node's own binary and config (on a CRI-O node: `crio status config`, the running config). */
  configDump(): string;
  /** Imports an OCI tarball (a machine path) into the CRI's namespace. */
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
/** Paths of the systemd nodes' containerd (Debian's defaults). */
const PLAIN = { unit: 'containerd', socket: '/run/containerd/containerd.sock', containerd: '/usr/bin/containerd', ctr: '/usr/bin/ctr' };

// ---- the k3s-shaped node: a NodeHost ----

interface K3sShape {
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

function k3sShape(): K3sShape {
  const c16 = CONTAINERD_BINARIES[0];
  const socket = '/run/k3s/containerd/containerd.sock';
  const defaults = execFileSync(c16.binary, ['config', 'default'], { encoding: 'utf8' });
  const base = containerdConfigFor(defaults, { root: '/var/lib/rancher/k3s/agent/containerd', state: '/run/k3s/containerd', socket },
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

/**
 * A test hook in the NodeHost's containerd unit: a script at /etc/rcm-node/fault/<unit> runs
 * before the daemon starts, and its failure fails the start (the way a broken node refuses a
 * restart). Systemd nodes have the same hook as a drop-in (systemd-kubelet-node.ts).
 */
function unitScript(unit: string, start: string): string {
  return `export PATH=${STANDARD_PATH}
if [ -f /etc/rcm-node/fault/${unit} ]; then sh /etc/rcm-node/fault/${unit} || exit 1; fi
${start}
`;
}

function nodeHostAccess(host: NodeHost): NodeAccess {
  return {
    name: host.name,
    run: host.run,
    tryRun: host.tryRun,
    read: host.read,
    write: host.write,
    systemctl: host.systemctl,
    unitEvents: host.unitEvents,
    unitOutput: unit => host.read(`/var/log/${unit}.log`) ?? '',
  };
}

async function startK3sNode(controlPlane: ControlPlane, dir: string, name: string,
  busybox: string): Promise<{ node: ClusterNode; stop: () => Promise<void> }> {
  const s = k3sShape();
  const cgroupRoot = `/rcm-e2e/${name}`;
  const [port, healthzPort] = [await freePort(), await freePort()];
  const kubelet = ['exec', kubeBinary('kubelet'), ...kubeletArgs({
    kubeconfig: controlPlane.kubeconfig, config: '/var/lib/kubelet/config.yaml', nodeName: name,
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
    shape: 'k3s',
    kind: 'nodehost',
    host: nodeHostAccess(host),
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
  const stop = async () => {
    host.tryRun(['systemctl', 'stop', 'kubelet']);
    killAllTasks(node);
    await host.stop().catch(() => undefined);
    removeCgroups(cgroupRoot);
  };
  try {
    layOut(host, { ...s.files, '/etc/rcm-node/name': `${name}\n`, '/var/lib/kubelet/config.yaml': kubeletConfig({ port, healthzPort, cgroupRoot, containerdSocket: s.socket }) });
    host.startUnits();
    await eventually(async () => ctr(['version']) !== undefined, 30_000, () => `${name}: containerd did not answer\n${node.logTails()}`);
    node.importImage(busybox);
  } catch (e) {
    await stop();
    throw e;
  }
  return { node, stop };
}

// ---- the production-shaped nodes: systemd as PID 1 ----

/** The admin's containerd 1.7 config of the "custom" node: written out from 1.7's defaults, then customised. */
function customConfig(defaults17: string): string {
  const runcOptions = /(\[plugins\."io\.containerd\.grpc\.v1\.cri"\.containerd\.runtimes\.runc\.options\][^[]*?)/;
  const replace = (text: string, from: RegExp, to: string) => {
    const out = text.replace(from, to);
    if (out === text) throw new Error(`containerd 1.7's default config has no ${from}`);
    return out;
  };
  let config = defaults17;
  config = replace(config, /sandbox_image = "[^"]*"/, `sandbox_image = "${BUSYBOX_IMAGE}"`);
  config = replace(config, /restrict_oom_score_adj = false/, 'restrict_oom_score_adj = true');
  config = replace(config, /max_concurrent_downloads = \d+/, 'max_concurrent_downloads = 6');
  config = replace(config, new RegExp(`${runcOptions.source}BinaryName = ""`), '$1BinaryName = "/usr/bin/runc"');
  config = replace(config, new RegExp(`${runcOptions.source}SystemdCgroup = false`), '$1SystemdCgroup = true # the systemd cgroup driver, as the kubelet');
  return '# Managed by the site\'s configuration management: containerd 1.7, node pool "custom".\n' + config;
}

/** The node's systemd journal of a unit this boot, as JSON entries. */
function journalEntries(node: SystemdNode, unit: string): Record<string, string>[] {
  const out = node.exec(['journalctl', '-b', '-u', unit.includes('.') ? unit : `${unit}.service`, '-o', 'json', '--no-pager',
    '--output-fields=MESSAGE,JOB_TYPE,JOB_RESULT,UNIT,_PID,_COMM']);
  return out.split('\n').filter(Boolean).map(l => JSON.parse(l));
}

/**
 * Starts and ends of a unit from its journal. systemd's own lines about the unit (PID 1's) say
 * when a start job succeeded or failed and when a process of the unit exited; but PID 1 drops a
 * line when journald does not take it within 10 ms (its socket's send timeout), which happens
 * here under load (a "Started containerd.service" was missing while containerd had booted and
 * served). So containerd's starts are counted from the daemon's own "containerd successfully
 * booted" lines, which reach journald through its output stream and are never dropped, at the
 * time the daemon wrote in them.
 */
function systemdUnitEvents(node: SystemdNode, unit: string): UnitEvent[] {
  const name = unit.includes('.') ? unit : `${unit}.service`;
  const events: UnitEvent[] = [];
  for (const e of journalEntries(node, unit)) {
    const message = typeof e.MESSAGE === 'string' ? e.MESSAGE : '';
    if (name === 'containerd.service' && e._COMM === 'containerd' && message.includes('containerd successfully booted')) {
      const logged = Date.parse(/time="([^"]+)"/.exec(message)?.[1] ?? '');
      events.push({ at: Number.isNaN(logged) ? Number(e.__REALTIME_TIMESTAMP) / 1000 : logged, event: 'start', pid: Number(e._PID) });
      continue;
    }
    if (e._PID !== '1' || e.UNIT !== name) continue;
    const at = Number(e.__REALTIME_TIMESTAMP) / 1000;
    if (e.JOB_TYPE === 'start' && e.JOB_RESULT === 'done') {
      if (name !== 'containerd.service') events.push({ at, event: 'start', pid: 0 });
    } else if (e.JOB_TYPE === 'start' && e.JOB_RESULT === 'failed') {
      events.push({ at, event: 'failed', pid: 0 });
    } else if (/: (Main|Control) process exited|: Deactivated successfully/.test(message)) {
      events.push({ at, event: 'exit', pid: 0 });
    }
  }
  return events.sort((x, y) => x.at - y.at);
}

function systemdAccess(node: SystemdNode): NodeAccess {
  return {
    name: node.name,
    run: (argv, input) => node.exec(argv, input),
    tryRun: argv => node.tryExec(argv),
    read: file => {
      const r = node.tryExec(['cat', file]);
      return r.code === 0 ? r.stdout : undefined;
    },
    write: (file, data, mode = 0o644) => void node.exec(['sh', '-c', `mkdir -p "$(dirname "$1")" && rm -f "$1" && cat > "$1" && chmod ${mode.toString(8)} "$1"`,
      'sh', file], data),
    systemctl: (command, unit) => void node.exec(['systemctl', command, unit]),
    unitEvents: unit => systemdUnitEvents(node, unit),
    unitOutput: unit => node.tryExec(['journalctl', '-b', '-u', unit, '-o', 'short-precise', '--no-pager']).stdout,
  };
}

async function startSystemdClusterNode(controlPlane: ControlPlane, name: string, shape: 'plain' | 'custom', busybox: string)
  : Promise<{ node: ClusterNode; stop: () => Promise<void> }> {
  let prepare: ((root: string) => void) | undefined;
  if (shape === 'custom') {
    const bin = path.dirname(CONTAINERD_BINARIES.find(c => c.version === '1.7')!.binary);
    const config = customConfig(execFileSync(path.join(bin, 'containerd'), ['config', 'default'], { encoding: 'utf8' }));
    prepare = root => {
      // Debian trixie's containerd package, installed over bookworm's.
      for (const b of ['containerd', 'ctr', 'containerd-shim-runc-v2']) {
        fs.rmSync(path.join(root, 'usr/bin', b), { force: true });
        fs.copyFileSync(path.join(bin, b), path.join(root, 'usr/bin', b));
        fs.chmodSync(path.join(root, 'usr/bin', b), 0o755);
      }
      fs.mkdirSync(path.join(root, 'etc/node-config/containerd'), { recursive: true });
      fs.writeFileSync(path.join(root, 'etc/node-config/containerd/config.toml'), config);
      fs.rmSync(path.join(root, 'etc/containerd/config.toml'), { force: true });
      fs.symlinkSync('/etc/node-config/containerd/config.toml', path.join(root, 'etc/containerd/config.toml'));
    };
  }
  // plain: containerd 2 (the current stack's build) over bookworm's 1.6, as a package upgrade would
  const containerdFrom = shape === 'plain' ? STACK_BIN_DIR : undefined;
  const { node: sd } = await bootSystemdKubeletNode(name, { controlPlane, busyboxTarball: busybox, prepare, containerdFrom });
  const host = systemdAccess(sd);
  const ctr = (args: string[]) => sd.exec([PLAIN.ctr, '--address', PLAIN.socket, ...args]);
  // The kubelet's kubepods.slice, in the node's own memory cgroup on this machine.
  const memory = sd.cgroups.find(c => /\/memory\//.test(c)) ?? sd.cgroups[0];
  const journalTail = (unit: string, lines: number) => sd.tryExec(['journalctl', '-b', '-u', unit, '-n', String(lines), '-o', 'short-precise', '--no-pager']).stdout;
  const node: ClusterNode = {
    name,
    shape,
    kind: 'systemd',
    host,
    systemd: sd,
    containerdUnit: PLAIN.unit,
    socket: PLAIN.socket,
    containerd: PLAIN.containerd,
    ctrBinary: PLAIN.ctr,
    effectiveConfig: '/etc/containerd/config.toml',
    editedConfig: shape === 'custom' ? '/etc/node-config/containerd/config.toml' : '/etc/containerd/config.toml',
    cgroupRoot: memory,
    ctr,
    configDump: () => sd.exec([PLAIN.containerd, '--config', '/etc/containerd/config.toml', 'config', 'dump']),
    importImage: tarball => {
      // The node sees its own root, not the machine's /tmp: the tarball goes there for the import.
      const inNode = `/var/tmp/import-${path.basename(tarball)}`;
      fs.copyFileSync(tarball, path.join(sd.root, inNode));
      try {
        ctr(['-n', 'k8s.io', 'images', 'import', inNode]);
      } finally {
        fs.rmSync(path.join(sd.root, inNode), { force: true });
      }
    },
    logTails: (lines = 30) => [
      `--- ${name}: kubelet.service (journal, last ${lines} lines) ---\n${journalTail('kubelet', lines)}`,
      `--- ${name}: containerd.service (journal, last ${lines} lines) ---\n${journalTail('containerd', lines)}`,
      `--- ${name}: containerd.service starts and ends (events) ---\n${(() => {
        try {
          return systemdUnitEvents(sd, 'containerd').slice(-12).map(e => `${new Date(e.at).toISOString()} ${e.event}${e.pid ? ` ${e.pid}` : ''}`).join('\n');
        } catch (e) {
          return String(e);
        }
      })()}`,
      `--- ${name}: systemd's lines about containerd.service (last 16) ---\n${sd.tryExec(['sh', '-c',
        'journalctl -b -u containerd -o short-precise --no-pager | grep -v " containerd\\[" | tail -n 16']).stdout}`,
    ].join('\n'),
  };
  const stop = async () => {
    sd.tryExec(['systemctl', 'stop', 'kubelet']);
    const tasks = killAllTasks(node);
    const { haltMs } = await sd.stop();
    process.stdout.write(`${name}: halted in ${(haltMs / 1000).toFixed(1)} s (containerd tasks left at the halt: ${tasks})\n`);
  };
  return { node, stop };
}

/**
 * The CRI-O node (crio-node.ts): a systemd kubelet node with CRI-O as its runtime, `images`
 * (OCI tarballs: the busybox image and the preloaded ones) copied into its storage before it
 * boots. Its ClusterNode: `containerd` is crio, `ctr` crictl, the configs the test bed's own
 * drop-in (the installer writes files of its own beside it, in CRI-O's drop-in folder).
 */
async function startCrioClusterNode(controlPlane: ControlPlane, name: string, images: string[])
  : Promise<{ node: ClusterNode; stop: () => Promise<void> }> {
  const { node: sd } = await bootSystemdKubeletNode(name, {
    controlPlane,
    busyboxTarball: images[0],
    runtime: { unit: 'crio', socket: CRIO_SOCKET, ready: [CRICTL_BINARY, '--runtime-endpoint', `unix://${CRIO_SOCKET}`, 'version'] },
    nspawnArgs: CRIO_NSPAWN_ARGS,
    prepare: root => prepareCrioRoot(root, images),
  });
  const host = systemdAccess(sd);
  const crictl = (args: string[]) => sd.exec([CRICTL_BINARY, '--runtime-endpoint', `unix://${CRIO_SOCKET}`, ...args]);
  const memory = sd.cgroups.find(c => /\/memory\//.test(c)) ?? sd.cgroups[0];
  const journalTail = (unit: string, lines: number) => sd.tryExec(['journalctl', '-b', '-u', unit, '-n', String(lines), '-o', 'short-precise', '--no-pager']).stdout;
  const node: ClusterNode = {
    name,
    shape: 'crio',
    kind: 'systemd',
    host,
    systemd: sd,
    containerdUnit: 'crio',
    socket: CRIO_SOCKET,
    containerd: CRIO_BINARY,
    ctrBinary: CRICTL_BINARY,
    effectiveConfig: CRIO_TEST_BED_CONFIG,
    editedConfig: CRIO_TEST_BED_CONFIG,
    cgroupRoot: memory,
    ctr: crictl,
    configDump: () => sd.exec([CRIO_BINARY, 'status', '--socket', CRIO_SOCKET, 'config']),
    importImage: tarball => {
      // preloaded before the boot: the same image (its ID) is there already
      if (crictl(['images', '-q', '--no-trunc']).split('\n').some(id => id.replace(/^sha256:/, '') === ociImageId(tarball))) return;
      // else into the running node's storage (containers/storage locks its files for both)
      const { graphRoot, runRoot } = liveStorage(sd.view);
      const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-crio-import-'));
      try {
        copyIntoStorage(graphRoot, runRoot, [tarball], scratch);
      } finally {
        fs.rmSync(scratch, { recursive: true, force: true });
      }
    },
    logTails: (lines = 30) => [
      `--- ${name}: kubelet.service (journal, last ${lines} lines) ---\n${journalTail('kubelet', lines)}`,
      `--- ${name}: crio.service (journal, last ${lines} lines) ---\n${journalTail('crio', lines)}`,
      `--- ${name}: ${CRIO_DROPIN_DIR} ---\n${sd.tryExec(['sh', '-c', `for f in ${CRIO_DROPIN_DIR}/*; do echo "# $f"; cat "$f"; done`]).stdout}`,
    ].join('\n'),
  };
  const stop = async () => {
    sd.tryExec(['systemctl', 'stop', 'kubelet']);
    const pods = sd.tryExec([CRICTL_BINARY, 'pods', '-q']).stdout.split('\n').filter(Boolean).length;
    sd.tryExec([CRICTL_BINARY, 'rmp', '--all', '--force']);
    const { haltMs } = await sd.stop();
    process.stdout.write(`${name}: halted in ${(haltMs / 1000).toFixed(1)} s (CRI-O pods left at the halt: ${pods})\n`);
  };
  return { node, stop };
}

function lastLines(text: string | undefined, lines: number): string {
  return (text ?? '').split('\n').slice(-lines).join('\n');
}

/** Kills and deletes every task of the node's containerd; returns how many there were. */
function killAllTasks(node: ClusterNode): number {
  let tasks = 0;
  try {
    for (const id of node.ctr(['-n', 'k8s.io', 'tasks', 'ls', '-q']).split('\n').filter(Boolean)) {
      tasks++;
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
  return tasks;
}

/**
 * Starts the control plane and one node per entry of `nodes` (name -> shape), the nodes at
 * once, each Ready, with the busybox image (sandbox and workloads) imported. The node
 * monitor's grace period is short (15 s, a stock flag) so that a stopped kubelet shows as
 * NotReady soon. `preloadImages` (OCI tarballs) go into a CRI-O node's storage before it boots
 * (its importImage then finds them there); other nodes import them with importImage as usual.
 */
export async function startMultiNodeCluster(nodes: Record<string, NodeShape>, options: { preloadImages?: string[] } = {}): Promise<MultiNodeCluster> {
  if (process.getuid?.() !== 0) throw new Error('the multi-node cluster needs root (namespaces, systemd-nspawn, containerd and kubelets)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-fleet-'));
  const started: { node: ClusterNode; stop: () => Promise<void> }[] = [];
  let controlPlane: ControlPlane | undefined;
  const stop = async () => {
    if (controlPlane && started.length > 0) {
      // Pods first: a systemd node halts slowly with pods running (their PID 1s ignore SIGTERM,
      // and in legacy cgroup mode systemd is not told when a container's scope empties, so each
      // scope waits out its stop timeouts: 20 s). Their owners go before them, or a Deployment's
      // pod deleted now is created again and runs at the halt.
      try {
        controlPlane.kubectl(['delete', 'deployments,replicasets,statefulsets,daemonsets,jobs', '--all', '--all-namespaces',
          '--cascade=foreground', '--timeout=60s', '--wait=true']);
      } catch {
        // the pods' deletion below still runs
      }
      try {
        controlPlane.kubectl(['delete', 'pods', '--all', '--all-namespaces', '--grace-period=1', '--timeout=60s', '--wait=true']);
      } catch {
        // a kubelet may be gone already
      }
    }
    const errors: string[] = [];
    await Promise.all(started.map(s => s.stop().catch((e: Error) => void errors.push(`${s.node.name}: ${e.message}`))));
    removeCgroups('/rcm-e2e');
    await controlPlane?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    if (errors.length > 0) throw new Error(`nodes not stopped cleanly:\n${errors.join('\n')}`);
  };
  try {
    const busybox = path.join(dir, 'busybox.tar');
    await buildBusybox(busybox);
    controlPlane = await startControlPlane({
      controllerManager: true,
      scheduler: true,
      controllerManagerArgs: ['--node-monitor-grace-period=15s', '--node-monitor-period=2s'],
    });
    const cp = controlPlane;
    const booting = await Promise.allSettled(Object.entries(nodes).map(([name, shape]) => (shape === 'k3s'
      ? startK3sNode(cp, path.join(dir, name), name, busybox)
      : shape === 'crio' ? startCrioClusterNode(cp, name, [busybox, ...options.preloadImages ?? []])
        : startSystemdClusterNode(cp, name, shape, busybox))));
    for (const b of booting) if (b.status === 'fulfilled') started.push(b.value);
    for (const b of booting) if (b.status === 'rejected') throw b.reason;
    const clusterNodes = started.map(s => s.node);
    for (const node of clusterNodes) {
      await eventually(async () => nodeReady(cp, node.name), 90_000, () => `node ${node.name} did not become Ready\n${node.logTails(40)}`);
    }
    printNodeInfo(cp);
    const logTails = (lines = 30) => [cp.logTails(lines), ...clusterNodes.map(n => n.logTails(lines))].join('\n');
    return {
      dir,
      controlPlane: cp,
      nodes: clusterNodes,
      node: name => clusterNodes.find(n => n.name === name) ?? (() => {
        throw new Error(`no node ${name}`);
      })(),
      importImage: tarball => clusterNodes.forEach(n => n.importImage(tarball)),
      logTails,
      stop,
    };
  } catch (e) {
    await stop().catch(() => undefined);
    throw e;
  }
}
