import * as fs from 'fs';
import * as path from 'path';
import { ControlPlane, freePort } from './control-plane';
import { put } from './files';
import { kubeletArgs, kubeletRuntimeSettings } from './kubelet';
import { BUSYBOX_IMAGE } from './single-node-cluster';
import { bootSystemdNode, SystemdNode, SystemdNodeOptions } from './systemd-node';
import { KUBE_VERSION, kubeBinary } from './tools';

/**
 * A "production-shaped" Kubernetes node: a systemd node (systemd-node.ts: PID 1 is systemd 252,
 * Debian's stock containerd.service with its default start limit, runc with SystemdCgroup =
 * true) whose kubelet (KUBE_VERSION) runs as `kubelet.service` with `cgroupDriver: systemd`, against the
 * node's containerd, registered with a control plane on 127.0.0.1. Ported from
 * ../shared/notes/systemd-node.sh (the facts behind each step: systemd-kubelet-nodes.md there).
 *
 * - The kubelet binary is bind-mounted read-only at /usr/local/bin/kubelet; its kubeconfig
 *   carries the API server's CA (the machine's files are not the node's).
 * - `/dev/kmsg` and CAP_SYSLOG: the kubelet exits without them.
 * - `kubelet-prep.service` shows the kubelet the sysctl values it wants (bind mounts in the
 *   node's mount namespace: /proc/sys is read-only there and not namespaced, so the machine's
 *   are never written).
 * - CNI: a loopback-only network config and the loopback plugin at /opt/cni/bin (the defaults'
 *   folders); pods use the host network. containerd's sandbox image is the busybox image,
 *   imported into `k8s.io` by `import-images.service` before the kubelet starts.
 * - A test hook, the unit itself unchanged: a drop-in adds
 *   `ExecStartPre=/bin/sh -c '[ ! -f /etc/rcm-node/fault/containerd ] || sh /etc/rcm-node/fault/containerd'`
 *   to containerd.service, so a script put there fails containerd's starts the way a broken
 *   node refuses a restart (systemd then counts a failed start, and Restart=always tries again).
 * - The kubelet listens on 127.0.0.1 on ports of its own (nodes share the machine's network);
 *   `kubectl logs/exec` do not reach it: pod logs are under /var/log/pods in the node.
 */
export interface SystemdKubeletNode {
  readonly node: SystemdNode;
  readonly kubeletPort: number;
}

export interface SystemdKubeletNodeOptions {
  readonly controlPlane: ControlPlane;
  /** The busybox image tarball (pause and workload image, BUSYBOX_IMAGE). */
  readonly busyboxTarball: string;
  /** Changes the node's containerd config (already made ready for the kubelet: sandbox image). */
  readonly containerdConfig?: (config: string) => string;
  /** Lays out more files in the node's root before it boots (after everything of this module). */
  readonly prepare?: (root: string) => void;
  /** Where node folders go (systemd-node.ts's default otherwise). */
  readonly nodesDir?: string;
  /** containerd (and runc) installed over Debian's 1.6 (SystemdNodeOptions.containerdFrom). */
  readonly containerdFrom?: string;
  /**
   * Another CRI runtime than containerd (a CRI-O node: crio-node.ts lays it out in `prepare`):
   * its unit (the kubelet's Wants/After), its socket (the kubelet's containerRuntimeEndpoint) and
   * the command that succeeds once it serves. Its images are `prepare`'s to lay out: no
   * import-images.service then.
   */
  readonly runtime?: { readonly unit: string; readonly socket: string; readonly ready: string[] };
  /** More systemd-nspawn arguments (after the kubelet's own). */
  readonly nspawnArgs?: string[];
}

/**
 * The sandbox ("pause") image in containerd's default config of any version: `sandbox_image`
 * (config version 2) or `pinned_images.sandbox` (versions 3 and 4, containerd 2.x).
 */
export function withSandboxImage(config: string, image: string): string {
  const out = config
    .replace(/sandbox_image = (["'])[^"']*\1/, `sandbox_image = "${image}"`)
    .replace(/(\.pinned_images\][^[]*?sandbox = )(["'])[^"']*\2/, `$1"${image}"`);
  if (out === config) throw new Error(`containerd's default config names no sandbox image: ${config}`);
  return out;
}

/** The containerd unit's drop-in: the test bed's fault hook (the unit file stays Debian's). */
export const FAULT_HOOK_DROP_IN = '/etc/systemd/system/containerd.service.d/10-rcm-fault-hook.conf';
const FAULT_HOOK = `# Test bed only: a script at /etc/rcm-node/fault/containerd that fails fails containerd's start.
[Service]
ExecStartPre=/bin/sh -c '[ ! -f /etc/rcm-node/fault/containerd ] || sh /etc/rcm-node/fault/containerd'
`;

/** What the kubelet wants of sysctls it would otherwise try to write (not namespaced: never the machine's). */
const KUBELET_SYSCTLS = {
  'vm/overcommit_memory': '1',
  'vm/panic_on_oom': '0',
  'kernel/panic': '10',
  'kernel/panic_on_oops': '1',
  'kernel/keys/root_maxkeys': '1000000',
  'kernel/keys/root_maxbytes': '25000000',
};
const KUBELET_PREP = `#!/bin/sh
# The kubelet writes these sysctls when they differ from what it wants; /proc/sys is read-only in
# this node and they are not namespaced: show the kubelet its values in the node's mounts only.
set -e
mkdir -p /run/fake-sysctl
for kv in ${Object.entries(KUBELET_SYSCTLS).map(([k, v]) => `${k}=${v}`).join(' ')}; do
  k=\${kv%=*}; v=\${kv#*=}; f=/run/fake-sysctl/$(echo $k | tr / _)
  if [ "$(cat /proc/sys/$k)" != "$v" ]; then echo $v > $f; mount --bind $f /proc/sys/$k; fi
done
`;
const KUBELET_PREP_UNIT = `[Unit]
Description=Show the kubelet the sysctl values it wants (nspawn test node)
DefaultDependencies=no
Before=kubelet.service
After=local-fs.target node-prep.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/kubelet-prep
[Install]
WantedBy=multi-user.target
`;
const IMPORT_IMAGES_UNIT = `[Unit]
Description=Import the busybox image (sandbox and workloads) into containerd's k8s.io namespace
After=containerd.service
Requires=containerd.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/ctr -n k8s.io images import /var/lib/test-images/busybox.tar
[Install]
WantedBy=multi-user.target
`;

const LO_ONLY = JSON.stringify({ cniVersion: '0.4.0', name: 'lo-only', plugins: [{ type: 'loopback' }] });

/** The kubelet's config on a systemd node: the systemd cgroup driver and the kubelet's own cgroup defaults (QoS cgroups, allocatable on pods). */
export function systemdKubeletConfig(options: { port: number; healthzPort: number; socket?: string }): string {
  return [
    'apiVersion: kubelet.config.k8s.io/v1beta1',
    'kind: KubeletConfiguration',
    ...kubeletRuntimeSettings(options.socket ?? '/run/containerd/containerd.sock'),
    'cgroupDriver: systemd',
    'failSwapOn: false',
    'address: 127.0.0.1',
    `port: ${options.port}`,
    'readOnlyPort: 0',
    'healthzBindAddress: 127.0.0.1',
    `healthzPort: ${options.healthzPort}`,
    'authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}',
    'authorization: {mode: AlwaysAllow}',
    'clusterDomain: cluster.local',
    // Frequent status updates make pod phases visible to the test sooner.
    'nodeStatusUpdateFrequency: 4s',
    'syncFrequency: 5s',
    '',
  ].join('\n');
}

/** A kubeconfig for the node: the control plane's, with its CA inline. */
function nodeKubeconfig(controlPlane: ControlPlane): string {
  const ca = fs.readFileSync(controlPlane.caFile).toString('base64');
  return [
    'apiVersion: v1', 'kind: Config',
    `clusters: [{name: test, cluster: {server: "${controlPlane.server}", certificate-authority-data: "${ca}"}}]`,
    `users: [{name: admin, user: {token: "${controlPlane.adminToken}"}}]`,
    'contexts: [{name: test, context: {cluster: test, user: admin}}]',
    'current-context: test', '',
  ].join('\n');
}

function enable(root: string, unit: string): void {
  const link = path.join(root, 'etc/systemd/system/multi-user.target.wants', unit);
  fs.rmSync(link, { force: true });
  fs.symlinkSync(`/etc/systemd/system/${unit}`, link);
}

/**
 * Boots a node named `name` (its hostname and its Node's name) whose kubelet registers with
 * `controlPlane`. Resolves once containerd answers (the kubelet is starting then; wait for the
 * Node's Ready condition yourself).
 */
export async function bootSystemdKubeletNode(name: string, options: SystemdKubeletNodeOptions): Promise<SystemdKubeletNode> {
  const [port, healthzPort] = [await freePort(), await freePort()];
  const kubelet = fs.realpathSync(kubeBinary('kubelet'));
  const runtime = options.runtime;
  const deps = runtime ? `${runtime.unit}.service kubelet-prep.service` : 'containerd.service import-images.service kubelet-prep.service';
  const unit = [
    '[Unit]',
    `Description=kubelet ${KUBE_VERSION}`,
    `Wants=${deps}`,
    `After=${deps}`,
    '[Service]',
    `ExecStart=/usr/local/bin/kubelet ${kubeletArgs({
      kubeconfig: '/etc/kubernetes/kubelet.conf',
      config: '/var/lib/kubelet/config.yaml',
      nodeName: name,
    }).join(' ')}`,
    'Restart=always',
    'RestartSec=2',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
  const opts: SystemdNodeOptions = {
    nodesDir: options.nodesDir,
    containerdFrom: options.containerdFrom,
    containerdConfig: config => {
      const withSandbox = withSandboxImage(config, BUSYBOX_IMAGE);
      return options.containerdConfig ? options.containerdConfig(withSandbox) : withSandbox;
    },
    nspawnArgs: [`--bind-ro=${kubelet}:/usr/local/bin/kubelet`, '--bind-ro=/dev/kmsg', '--capability=CAP_SYSLOG', ...options.nspawnArgs ?? []],
    ...(runtime ? { runtimeReady: { argv: runtime.ready, unit: runtime.unit } } : {}),
    prepare: root => {
      put(root, '/usr/local/bin/kubelet', ''); // the bind mount's mount point
      put(root, '/etc/rcm-node/name', `${name}\n`);
      put(root, FAULT_HOOK_DROP_IN, FAULT_HOOK);
      put(root, '/etc/cni/net.d/10-lo-only.conflist', LO_ONLY);
      put(root, '/opt/cni/bin/loopback', fs.readFileSync('/usr/lib/cni/loopback'), 0o755);
      if (!runtime) put(root, '/var/lib/test-images/busybox.tar', fs.readFileSync(options.busyboxTarball));
      put(root, '/usr/local/sbin/kubelet-prep', KUBELET_PREP, 0o755);
      put(root, '/etc/systemd/system/kubelet-prep.service', KUBELET_PREP_UNIT);
      if (!runtime) put(root, '/etc/systemd/system/import-images.service', IMPORT_IMAGES_UNIT);
      put(root, '/etc/kubernetes/kubelet.conf', nodeKubeconfig(options.controlPlane), 0o600);
      put(root, '/var/lib/kubelet/config.yaml', systemdKubeletConfig({ port, healthzPort, socket: runtime?.socket }));
      put(root, '/etc/systemd/system/kubelet.service', unit);
      for (const u of ['kubelet-prep.service', ...(runtime ? [] : ['import-images.service']), 'kubelet.service']) enable(root, u);
      options.prepare?.(root);
    },
  };
  const node = await bootSystemdNode(name, opts);
  return { node, kubeletPort: port };
}
