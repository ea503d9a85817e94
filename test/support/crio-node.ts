import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { put } from './files';
import { BUSYBOX_IMAGE } from './single-node-cluster';
import { CACHE_DIR, stackBinary } from './tools';

// A CRI-O node for the test bed: the systemd node (systemd-node.ts, systemd-kubelet-node.ts)
// with CRI-O 1.34 as its runtime instead of containerd. Ported from ../shared/notes
// (current-stack.md, "CRI-O 1.34 under the kubelet 1.37", and pinns-standin.sh).
//
// - crio: CRI-O v1.34.0 built from the Go module proxy by scripts/stack/build-crio.sh, at
//   /usr/local/bin/crio (where CRI-O's own unit runs it), with Debian bookworm's conmon 2.1.6 at
//   /usr/bin/conmon and the library it needs that the node's root lacks (libglib2.0-0), both
//   cached beside crio by the same script; runc 1.4 (the current stack's) over Debian's at
//   /usr/sbin/runc, CRI-O's default runtime; crictl at /usr/local/bin/crictl.
// - **pinns is a stand-in** (PINNS_STANDIN, a shell script with util-linux's `unshare` and
//   `mount --bind`): CRI-O's own pinns is a C program that is not built here (no C build of CRI-O's
//   helpers in this project's provisioning, and no CRI-O package for these machines). It does what
//   CRI-O asks of pinns for the pods the suite runs (a new IPC, UTS and network namespace pinned
//   to a file, or the host's bound there; sysctls written inside the new ones); it is not pinns.
// - containerd.service is masked (Debian's containerd stays in the root, unused): the installer
//   finds no containerd socket, and `crio`, crio.service and CRI-O's socket, so it takes the node
//   for CRI-O as on a real one.
// - crio.service is CRI-O's own unit (contrib/systemd/crio.service of v1.34.0: `Type=notify`,
//   `ExecReload=/bin/kill -s HUP $MAINPID`, `Restart=on-failure`, the watchdog), without its
//   EnvironmentFile options.
// - The test bed's settings are CRI-O's own drop-in, /etc/crio/crio.conf.d/10-crio.conf (the
//   name CRI-O's packages give theirs): vfs storage (the node's root is a plain folder), runc as
//   the default runtime with conmon as its monitor, the systemd cgroup manager (as the kubelet's
//   driver), the pinns stand-in, no host port mapping (CRI-O exits without iptables or nftables
//   otherwise, and the node has neither), the busybox image as the pause image (its entrypoint as
//   the pause command) and a signature policy that accepts any image (the images are local).
//   There is no crio.conf: CRI-O's defaults and the drop-ins are the config, as on CRI-O's
//   packages since 1.29.
// - Images go into the node's containers-storage (vfs) before it boots, with Debian's skopeo on
//   this machine (`skopeo copy oci-archive:F containers-storage:[vfs@...]NAME`).
// - `/bin/kill` (which the unit's ExecReload runs) is this machine's static busybox: the node's
//   minbase root has no procps.
// - The node keeps every capability (CRIO_NSPAWN_ARGS says why: privileged pods), and where this
//   machine lacks one (CAP_SYS_RESOURCE here), CRI-O's default runtime is runc behind a test-bed
//   wrapper that takes it out of privileged containers (runcWrapper).

export const CRIO_VERSION = '1.34.0';
/** crio and conmon as scripts/stack/build-crio.sh caches them. */
export const CRIO_DIR = path.join(CACHE_DIR, `crio-${CRIO_VERSION}`);
/** CRI-O's socket (crio.conf(5): crio.api.listen), as the node sees it. */
export const CRIO_SOCKET = '/var/run/crio/crio.sock';
/** CRI-O's drop-in folder and the test bed's own file in it. */
export const CRIO_DROPIN_DIR = '/etc/crio/crio.conf.d';
export const CRIO_TEST_BED_CONFIG = `${CRIO_DROPIN_DIR}/10-crio.conf`;
export const CRIO_BINARY = '/usr/local/bin/crio';
/**
 * The node keeps every capability (nspawn's default bounding set lacks CAP_NET_ADMIN,
 * CAP_SYS_MODULE, CAP_SYS_TIME, ...): CRI-O gives a privileged container every capability the
 * kernel knows (runtime-tools' SetupPrivileged), not those it holds itself as containerd does, so
 * under nspawn's default set runc refuses the installer's privileged pod ("unable to apply caps:
 * can't apply capabilities: operation not permitted"). A real node's CRI-O holds them all.
 */
export const CRIO_NSPAWN_ARGS = ['--capability=all'];

/** Linux's capabilities by number (capability.h), as the OCI runtime spec names them. */
const CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'DAC_READ_SEARCH', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'SETPCAP', 'LINUX_IMMUTABLE',
  'NET_BIND_SERVICE', 'NET_BROADCAST', 'NET_ADMIN', 'NET_RAW', 'IPC_LOCK', 'IPC_OWNER', 'SYS_MODULE', 'SYS_RAWIO', 'SYS_CHROOT', 'SYS_PTRACE',
  'SYS_PACCT', 'SYS_ADMIN', 'SYS_BOOT', 'SYS_NICE', 'SYS_RESOURCE', 'SYS_TIME', 'SYS_TTY_CONFIG', 'MKNOD', 'LEASE', 'AUDIT_WRITE',
  'AUDIT_CONTROL', 'SETFCAP', 'MAC_OVERRIDE', 'MAC_ADMIN', 'SYSLOG', 'WAKE_ALARM', 'BLOCK_SUSPEND', 'AUDIT_READ', 'PERFMON', 'BPF',
  'CHECKPOINT_RESTORE'].map(c => `CAP_${c}`);

/**
 * The capabilities the kernel knows that this machine's own bounding set lacks (none on a real
 * node; here CAP_SYS_RESOURCE: the sandbox these tests run in never had it, so no node of this
 * machine can hold it, `--capability=all` or not).
 */
export function capabilitiesMachineLacks(): string[] {
  const hex = /^CapBnd:\s*([0-9a-f]+)$/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))![1];
  const bits = [...BigInt(`0x${hex}`).toString(2)].reverse(); // bits[n]: capability n
  const last = Number(fs.readFileSync('/proc/sys/kernel/cap_last_cap', 'utf8').trim());
  return CAPABILITIES.slice(0, last + 1).filter((_, n) => bits[n] !== '1');
}

/**
 * CRI-O's default runtime on the node: runc itself, or, where this machine lacks capabilities
 * (capabilitiesMachineLacks), a TEST-BED wrapper that edits the container's config (and an
 * exec's process file) before it runs runc:
 *
 * - it takes those capabilities out: CRI-O asks for every capability the kernel knows for a
 *   privileged container (the installer's and the node agent's pods), and runc cannot grant one
 *   it does not hold ("unable to apply caps: can't apply capabilities: operation not permitted").
 *   containerd asks for the capabilities it holds, so its nodes need no such thing;
 * - without CAP_SYS_RESOURCE, it raises an `oomScoreAdj` below the wrapper's own (inherited from
 *   CRI-O's) to that: lowering it needs the capability ("failed to update
 *   /proc/self/oom_score_adj: Permission denied", the node agent's pod, system-node-critical).
 *   The containerd nodes do the same with containerd's `restrict_oom_score_adj = true`; CRI-O has
 *   no such setting.
 */
export function runcWrapper(lacking: string[]): string {
  const seds = lacking.flatMap(c => ['-e', `'s/"${c}"[[:space:]]*,\\{0,1\\}//g'`]).join(' ');
  const oom = lacking.includes('CAP_SYS_RESOURCE') ? `
    own=$(cat /proc/self/oom_score_adj)
    for v in $(grep -o '"oomScoreAdj"[[:space:]]*:[[:space:]]*-\\{0,1\\}[0-9]*' "$f" | grep -o -- '-\\{0,1\\}[0-9]*$'); do
      if [ "$v" -lt "$own" ]; then sed -z -i "s/\\"oomScoreAdj\\"[[:space:]]*:[[:space:]]*$v\\([^0-9]\\)/\\"oomScoreAdj\\":$own\\1/g" "$f"; fi
    done` : '';
  return `#!/bin/sh
# TEST BED ONLY (test/support/crio-node.ts): takes ${lacking.join(', ')} (which the test machine cannot
# grant) out of a container's capabilities${oom ? ' and keeps its oom_score_adj no lower than ours' : ''}, then runs
# runc with the same arguments.
prev=
for a in "$@"; do
  f=
  case "$prev" in --bundle|-b) f="$a/config.json";; --process|-p) f="$a";; esac
  case "$a" in --bundle=*) f="\${a#--bundle=}/config.json";; --process=*) f="\${a#--process=}";; esac
  if [ -n "$f" ] && [ -f "$f" ]; then
    sed -z -i ${seds} -e 's/,[[:space:]]*\]/]/g' "$f"${oom}
  fi
  prev="$a"
done
exec ${RUNC} "$@"
`;
}
export const CRICTL_BINARY = '/usr/local/bin/crictl';
const PINNS = '/usr/local/bin/pinns';
const BUSYBOX = '/usr/local/lib/rcm-test-bed/busybox';
const CONMON = '/usr/bin/conmon';
const RUNC = '/usr/sbin/runc';
const RUNC_WRAPPER = '/usr/local/bin/runc-test-bed';
const POLICY = '/etc/crio/policy.json';
const GRAPH_ROOT = '/var/lib/containers/storage';
const RUN_ROOT = '/run/containers/storage';

/** Fails with what to do when crio or conmon is missing (tests that need them must not skip). */
export function requireCrio(): string {
  for (const f of ['crio', 'usr/bin/conmon']) {
    if (!fs.existsSync(path.join(CRIO_DIR, f))) {
      throw new Error(`${path.join(CRIO_DIR, f)} is missing: run scripts/provision.sh (as root) to build CRI-O ${CRIO_VERSION} (scripts/stack/build-crio.sh)`);
    }
  }
  return CRIO_DIR;
}

/**
 * A stand-in for CRI-O's pinns (its C helper that creates namespaces and pins them to files):
 * `pinns -d DIR -f NAME [-s key=value]... [--ipc|--uts|--net|--user[=host]]...`. A new namespace
 * is made with util-linux's `unshare --T=DIR/Tns/NAME` (which pins it there) and the sysctls are
 * written inside the new namespaces; `--T=host` binds the node's own namespace to the file. Not
 * pinns: what pinns does beyond what CRI-O 1.34 asked of it for the suite's pods is not done.
 */
export const PINNS_STANDIN = `#!/bin/bash
# TEST STAND-IN for CRI-O's pinns (a C program not built here): see test/support/crio-node.ts.
# pinns -d DIR -f NAME [-s k=v]... [--ipc|--uts|--net|--user[=host]]...
set -euo pipefail
dir= file= sysctls=() new=() host=()
while [ $# -gt 0 ]; do case $1 in
  -d|--dir) dir=$2; shift 2;; -f|--filename) file=$2; shift 2;; -s|--sysctl) sysctls+=("$2"); shift 2;;
  --ipc|--uts|--net|--user) new+=("\${1#--}"); shift;;
  --ipc=host|--uts=host|--net=host|--user=host) t=\${1#--}; host+=("\${t%=host}"); shift;;
  *) echo "pinns stand-in: unsupported argument $1" >&2; exit 2;; esac; done
args=()
for t in "\${new[@]}"; do mkdir -p "$dir/\${t}ns"; : > "$dir/\${t}ns/$file"; args+=("--$t=$dir/\${t}ns/$file"); done
for t in "\${host[@]}"; do mkdir -p "$dir/\${t}ns"; : > "$dir/\${t}ns/$file"; mount --bind /proc/self/ns/$t "$dir/\${t}ns/$file"; done
script=""; for kv in "\${sysctls[@]}"; do k=\${kv%%=*}; v=\${kv#*=}; script="$script echo '$v' > /proc/sys/$(echo $k | tr . /);"; done
if [ \${#args[@]} -gt 0 ]; then unshare "\${args[@]}" -- /bin/sh -c "\${script:-true}"; fi
exit 0
`;

/** The test bed's CRI-O settings (see the top of this file). */
export function crioTestBedConfig(runtimePath = RUNC): string {
  return `# The test bed's CRI-O settings (test/support/crio-node.ts); the installer's drop-ins go beside this file.
[crio]
storage_driver = "vfs"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "systemd"
# A stand-in (a shell script): CRI-O's pinns is C and not built here.
pinns_path = "${PINNS}"
# No iptables nor nftables in the node: without this CRI-O exits at its start.
disable_hostport_mapping = true

[crio.runtime.runtimes.runc]
runtime_path = "${runtimePath}"
runtime_type = "oci"
runtime_root = "/run/runc"
monitor_path = "${CONMON}"

[crio.image]
pause_image = "${BUSYBOX_IMAGE}"
# The pause image's own entrypoint (busybox sleeps).
pause_command = ""
signature_policy = "${POLICY}"

[crio.network]
network_dir = "/etc/cni/net.d/"
plugin_dirs = ["/opt/cni/bin/"]
`;
}

/** CRI-O's own unit (cri-o v1.34.0 contrib/systemd/crio.service), without its EnvironmentFile options. */
export const CRIO_UNIT = `[Unit]
Description=Container Runtime Interface for OCI (CRI-O)
Documentation=https://github.com/cri-o/cri-o
Wants=network-online.target
Before=kubelet.service
After=network-online.target node-prep.service

[Service]
Type=notify
Environment=GOTRACEBACK=crash
ExecStart=${CRIO_BINARY}
ExecReload=/bin/kill -s HUP $MAINPID
TasksMax=infinity
LimitNPROC=1048576
LimitCORE=infinity
OOMScoreAdjust=-999
TimeoutStartSec=0
Restart=on-failure
RestartSec=10
WatchdogSec=60s

[Install]
WantedBy=multi-user.target
Alias=cri-o.service
`;

const POLICY_JSON = JSON.stringify({ default: [{ type: 'insecureAcceptAnything' }] }, undefined, 2) + '\n';

/** The image name an OCI layout tarball of oci-image.ts carries (its index's `io.containerd.image.name`). */
export function ociImageName(tarball: string): string {
  const index = JSON.parse(execFileSync('tar', ['-xOf', tarball, 'index.json'], { encoding: 'utf8' }));
  const name = index.manifests?.[0]?.annotations?.['io.containerd.image.name'];
  if (!name) throw new Error(`${tarball}: its index.json names no image (io.containerd.image.name)`);
  return name;
}

/** The image's ID in containers-storage: its config's digest, without `sha256:`. */
export function ociImageId(tarball: string): string {
  const read = (blob: string) => JSON.parse(execFileSync('tar', ['-xOf', tarball, `blobs/sha256/${blob.replace(/^sha256:/, '')}`], { encoding: 'utf8' }));
  const index = JSON.parse(execFileSync('tar', ['-xOf', tarball, 'index.json'], { encoding: 'utf8' }));
  return String(read(index.manifests[0].digest).config.digest).replace(/^sha256:/, '');
}

/**
 * Copies OCI layout tarballs into a containers-storage (vfs) with skopeo on this machine, under
 * the names they carry. `graphRoot` and `runRoot` are machine paths (the node's root, or its
 * view while it runs). skopeo is isolated from this machine's containers config.
 */
export function copyIntoStorage(graphRoot: string, runRoot: string, tarballs: string[], scratch: string): void {
  fs.mkdirSync(scratch, { recursive: true });
  const policy = path.join(scratch, 'policy.json');
  const storageConf = path.join(scratch, 'storage.conf');
  fs.writeFileSync(policy, POLICY_JSON);
  fs.writeFileSync(storageConf, `[storage]\ndriver = "vfs"\ngraphroot = "${graphRoot}"\nrunroot = "${runRoot}"\n`);
  for (const tarball of tarballs) {
    const name = ociImageName(tarball);
    try {
      execFileSync('skopeo', ['--policy', policy, 'copy', '--quiet', `oci-archive:${tarball}`, `containers-storage:[vfs@${graphRoot}+${runRoot}]${name}`], {
        encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, CONTAINERS_STORAGE_CONF: storageConf, TMPDIR: scratch },
      });
    } catch (e: any) {
      throw new Error(`skopeo could not copy ${tarball} (${name}) into ${graphRoot}: ${e.stderr ?? e.message}`);
    }
  }
}

/**
 * Lays out CRI-O in a node's root before it boots (see the top of this file): the binaries,
 * the pinns stand-in, the unit, the test bed's drop-in and policy, containerd.service masked,
 * crictl's config, and the images (OCI tarballs) in its storage.
 */
export function prepareCrioRoot(root: string, images: string[]): void {
  const crio = requireCrio();
  put(root, CRIO_BINARY, fs.readFileSync(path.join(crio, 'crio')), 0o755);
  put(root, CONMON, fs.readFileSync(path.join(crio, 'usr/bin/conmon')), 0o755);
  // conmon's libraries that the node's root lacks (libglib2.0-0), links kept
  const libs = path.join(crio, 'usr/lib/x86_64-linux-gnu');
  for (const lib of fs.readdirSync(libs).filter(f => /^lib.*\.so/.test(f))) {
    const target = path.join(root, 'usr/lib/x86_64-linux-gnu', lib);
    if (fs.existsSync(target)) continue;
    execFileSync('cp', ['-a', path.join(libs, lib), target]);
  }
  put(root, RUNC, fs.readFileSync(stackBinary('runc')), 0o755);
  put(root, CRICTL_BINARY, fs.readFileSync(stackBinary('crictl')), 0o755);
  put(root, '/etc/crictl.yaml', `runtime-endpoint: unix://${CRIO_SOCKET}\nimage-endpoint: unix://${CRIO_SOCKET}\ntimeout: 10\n`);
  put(root, PINNS, PINNS_STANDIN, 0o755);
  // CRI-O's unit reloads with /bin/kill (procps's or util-linux's on a real node); the node's
  // debootstrap minbase root has no kill binary, so `systemctl reload crio` would fail there
  // (and the installer fall back to a restart): this machine's static busybox serves as kill.
  if (!fs.existsSync(path.join(root, 'bin/kill'))) {
    put(root, BUSYBOX, fs.readFileSync(fs.realpathSync('/bin/busybox')), 0o755);
    fs.symlinkSync(BUSYBOX, path.join(root, 'bin/kill'));
  }
  put(root, POLICY, POLICY_JSON);
  const lacking = capabilitiesMachineLacks();
  if (lacking.length > 0) put(root, RUNC_WRAPPER, runcWrapper(lacking), 0o755);
  put(root, CRIO_TEST_BED_CONFIG, crioTestBedConfig(lacking.length > 0 ? RUNC_WRAPPER : RUNC));
  put(root, '/etc/systemd/system/crio.service', CRIO_UNIT);
  const wants = path.join(root, 'etc/systemd/system/multi-user.target.wants');
  fs.rmSync(path.join(wants, 'crio.service'), { force: true });
  fs.symlinkSync('/etc/systemd/system/crio.service', path.join(wants, 'crio.service'));
  // node-prep (systemd-node.ts) makes the cgroup controllers writable before the runtime starts
  put(root, '/etc/systemd/system/node-prep.service.d/10-crio.conf', '[Unit]\nBefore=crio.service\n');
  // containerd.service masked: not started, and not startable by anyone
  fs.rmSync(path.join(wants, 'containerd.service'), { force: true });
  fs.rmSync(path.join(root, 'etc/systemd/system/containerd.service'), { force: true });
  fs.symlinkSync('/dev/null', path.join(root, 'etc/systemd/system/containerd.service'));
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-crio-images-'));
  try {
    copyIntoStorage(path.join(root, GRAPH_ROOT), path.join(scratch, 'run'), images, scratch);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** Paths in a running node's view (`/proc/<pid>/root`) for copyIntoStorage. */
export function liveStorage(view: string): { graphRoot: string; runRoot: string } {
  return { graphRoot: path.join(view, GRAPH_ROOT), runRoot: path.join(view, RUN_ROOT) };
}
