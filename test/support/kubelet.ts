import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { ControlPlane, freePort, stopProcess } from './control-plane';
import { tail, unmountBelow } from './files';
import { KUBE_VERSION, kubeBinary } from './tools';

/** A kubelet that registers one node and runs its pods through a containerd's CRI. */
export interface Kubelet {
  readonly nodeName: string;
  /** Tail of its log, for failure messages. */
  logTail(lines?: number): string;
  stop(): Promise<void>;
}

export interface KubeletOptions {
  readonly controlPlane: ControlPlane;
  /** containerd's socket (its CRI plugin must be configured for this node). */
  readonly containerdSocket: string;
  readonly nodeName: string;
  /** A folder of its own: configuration, root folder and log. */
  readonly dir: string;
}

/**
 * Starts a kubelet on 127.0.0.1 with the settings this machine needs (no QoS cgroups, no
 * swap check, no eviction) and waits until its Node is Ready.
 */
export async function startKubelet(options: KubeletOptions): Promise<Kubelet> {
  const { controlPlane, nodeName, dir } = options;
  fs.mkdirSync(dir, { recursive: true });
  const rootDir = path.join(dir, 'root');
  const log = path.join(dir, 'kubelet.log');
  const config = path.join(dir, 'kubelet-config.yaml');
  const [port, healthzPort] = [await freePort(), await freePort()];
  fs.writeFileSync(config, kubeletConfig({ port, healthzPort, containerdSocket: options.containerdSocket }));
  const out = fs.openSync(log, 'a');
  const child: ChildProcess = spawn(kubeBinary('kubelet'), kubeletArgs({
    kubeconfig: controlPlane.kubeconfig, config, nodeName, rootDir, certDir: path.join(dir, 'pki'),
  }), { stdio: ['ignore', out, out] });
  fs.closeSync(out);

  const logTail = (lines = 30) => tail(log, lines);
  const stop = async () => {
    await stopProcess(child);
    unmountBelow(dir);
  };

  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`kubelet exited with ${child.exitCode}\n${logTail(40)}`);
    const ready = nodeReady(controlPlane, nodeName);
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`node ${nodeName} did not become Ready within 90s\n${logTail(40)}`);
    }
    await new Promise(r => setTimeout(r, 1000));
  }
  return { nodeName, logTail, stop };
}

export function nodeReady(controlPlane: ControlPlane, nodeName: string): boolean {
  try {
    const node = JSON.parse(controlPlane.kubectl(['get', 'node', nodeName, '-o', 'json']));
    return (node.status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True');
  } catch {
    return false;
  }
}

/**
 * What every kubelet of the test bed is told about its runtime and this machine: the CRI socket
 * (the `--container-runtime*` flags are gone since 1.27), and that cgroup v1 is what these
 * machines have (`failCgroupV1` is true by default since 1.35; with false the kubelet logs that
 * cgroup v1 is deprecated, and runs).
 */
export function kubeletRuntimeSettings(containerdSocket: string): string[] {
  return [`containerRuntimeEndpoint: unix://${containerdSocket}`, 'failCgroupV1: false'];
}

/**
 * The KubeletConfiguration this machine needs (no QoS cgroups, no swap check, no eviction),
 * on 127.0.0.1 with the given ports; `cgroupRoot` puts the node's pods under a cgroup of
 * their own (several kubelets on one machine).
 */
export function kubeletConfig(options: { port: number; healthzPort: number; containerdSocket: string; cgroupRoot?: string }): string {
  return [
    'apiVersion: kubelet.config.k8s.io/v1beta1',
    'kind: KubeletConfiguration',
    ...kubeletRuntimeSettings(options.containerdSocket),
    'cgroupDriver: cgroupfs',
    'failSwapOn: false',
    // With a root of the node's own (several kubelets on one machine), the pods' QoS cgroups go
    // below it (verified); without one, none, as the single-node cluster has always run.
    ...(options.cgroupRoot ? ['cgroupsPerQOS: true', `cgroupRoot: ${options.cgroupRoot}`] : ['cgroupsPerQOS: false']),
    'enforceNodeAllocatable: []',
    'evictionHard: {}',
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

/** The kubelet's command-line flags (its runtime is in its config: kubeletRuntimeSettings). */
export interface KubeletFlags {
  readonly kubeconfig: string;
  readonly config: string;
  readonly nodeName: string;
  readonly rootDir?: string;
  readonly certDir?: string;
}

export function kubeletArgs(options: KubeletFlags): string[] {
  return [
    `--kubeconfig=${options.kubeconfig}`,
    `--config=${options.config}`,
    `--hostname-override=${options.nodeName}`,
    ...(options.rootDir ? [`--root-dir=${options.rootDir}`] : []),
    ...(options.certDir ? [`--cert-dir=${options.certDir}`] : []),
    '--v=2',
  ];
}

/** Each node's kubelet and runtime, as its status says (printed when a suite starts). */
export function printNodeInfo(cp: ControlPlane): void {
  const nodes = JSON.parse(cp.kubectl(['get', 'nodes', '-o', 'json'])).items as any[];
  const server = JSON.parse(cp.kubectl(['version', '-o', 'json'])).serverVersion?.gitVersion;
  const lines = nodes.map(n => `  ${n.metadata.name}: kubelet ${n.status.nodeInfo.kubeletVersion}, ${n.status.nodeInfo.containerRuntimeVersion}, `
    + `runtimeHandlers [${(n.status.runtimeHandlers ?? []).map((h: any) => JSON.stringify(h.name)).join(', ')}]`);
  process.stdout.write(`control plane ${server} (test bed ${KUBE_VERSION}); nodes:\n${lines.join('\n')}\n`);
}
