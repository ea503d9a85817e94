import { ChildProcess, execFile, spawn, spawnSync } from 'child_process';
import { randomBytes } from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';
import { eventually } from './rest';
import { CACHE_DIR } from './tools';

/**
 * "Production-shaped" test nodes: a systemd-nspawn container whose PID 1 is a real systemd
 * (252, Debian bookworm) running Debian's stock `containerd.service` (containerd 1.6.20, the
 * unit unchanged, so systemd's default start limit of 5 starts per 10 s applies) with the
 * config of `containerd config default` (version 2), runc with `SystemdCgroup = true` and
 * `restrict_oom_score_adj = true`. Ported from ../shared/notes/systemd-node.sh (see
 * systemd-nodes.md and systemd-kubelet-nodes.md there for the facts behind each step).
 *
 * - Each node boots a copy of the root file system that scripts/provision.sh debootstraps
 *   (`node-rootfs-bookworm` in the cache, never booted itself).
 * - Each node runs in a cgroup of its own below this process's cgroup in every hierarchy
 *   (`<own path>/systemd-nodes/<name>`), legacy cgroup mode (cgroup v1, as on these machines).
 * - The node shares the machine's network (containerd serves a unix socket only). Never give
 *   a node veth pairs, bridges or addresses of its own.
 * - The installer reaches a node as it reaches a real host: `--host-root` is `root` (or
 *   `view`) and `--host-pid` is `pid`: its host commands run through
 *   `nsenter --target <pid> --mount --uts --ipc --net --pid`, as `exec` does.
 */
export interface SystemdNode {
  readonly name: string;
  /** The node's folder on this machine (its root file system and nspawn's log). */
  readonly dir: string;
  /**
   * The node's root file system on this machine (what the installer gets as --host-root).
   * What systemd-nspawn mounts over it in the node (a tmpfs on /run and /tmp, /proc, /sys,
   * /dev) is not seen here: `view` is.
   */
  readonly root: string;
  /** `/proc/<pid>/root`: the node's whole view of its files, its /run included. */
  readonly view: string;
  /** The node's systemd (its PID 1) as this machine sees it (what the installer gets as --host-pid). */
  readonly pid: number;
  /** The systemd-nspawn process. */
  readonly nspawnPid: number;
  /** containerd's socket, reachable from this machine (through `view`). */
  readonly containerdSocket: string;
  /** The node's cgroup in each hierarchy of this machine (removed by `stop`). */
  readonly cgroups: string[];
  /** How long the copy of the root file system and the boot (to containerd answering) took. */
  readonly timings: { copyMs: number; bootMs: number; reexecMs: number };
  /** Runs a command in the node (nsenter, the installer's namespaces); returns stdout, throws with stderr on failure. */
  exec(argv: string[], input?: string | Buffer): string;
  /** As `exec`, but returns the exit code and output instead of throwing. */
  tryExec(argv: string[], input?: string | Buffer): ExecResult;
  /** `sh -c cmd` in the node; returns stdout, throws on failure. */
  sh(cmd: string): string;
  /** `journalctl -b -u unit -o short-precise` in the node: this boot's lines about the unit. */
  journal(unit: string): string;
  /** How many times the unit started this boot ("Started <unit>" lines: starts that succeeded). */
  startsOf(unit: string): number;
  /** How many times systemd began to start the unit this boot ("Starting <unit>" lines). */
  startAttemptsOf(unit: string): number;
  /** Starts this boot after the first one (`startsOf - 1`, at least 0). */
  restartsOf(unit: string): number;
  /** How many times the unit's start limit refused a start this boot ("Start request repeated too quickly"). */
  startLimitHits(unit: string): number;
  /** The unit's state (`systemctl show`). */
  unitState(unit: string): UnitState;
  /** `systemctl show -p P1 -p P2 ... unit` as a record. */
  show(unit: string, properties: string[]): Record<string, string>;
  /** The unit's main process as this machine sees it (undefined when it has none). */
  mainPidOnMachine(unit: string): number | undefined;
  /** Halts the node cleanly (SIGRTMIN+3), removes its cgroups and its folder; throws when something is left. */
  stop(): Promise<{ haltMs: number }>;
}

export interface ExecResult { code: number; stdout: string; stderr: string }

export interface UnitState {
  readonly activeState: string;
  readonly subState: string;
  readonly result: string;
  readonly mainPid: number;
  /** Restarts systemd made by itself (Restart=), not those asked for with systemctl. */
  readonly nRestarts: number;
}

export interface SystemdNodeOptions {
  /** Where node folders go (default `$RCM_NODES_DIR` or `<tmpdir>/rcm-systemd-nodes`). */
  readonly nodesDir?: string;
  /** The root file system to copy (default `NODE_ROOTFS`). */
  readonly rootfs?: string;
  /** Changes containerd's config further (it gets `containerd config default` with runc's SystemdCgroup and restrict_oom_score_adj on). */
  readonly containerdConfig?: (config: string) => string;
  /** Lays out more files in the node's root before it boots (units, a kubelet's config, ...). */
  readonly prepare?: (root: string) => void;
  /**
   * A folder with containerd, ctr and containerd-shim-runc-v2 installed over the root's Debian
   * binaries before anything else, as a package upgrade would: Debian's unit and runc stay, the
   * config is the new containerd's own default.
   */
  readonly containerdFrom?: string;
  /** More systemd-nspawn arguments (`--bind-ro=...`, `--capability=...`). */
  readonly nspawnArgs?: string[];
  /** How long the boot may take, to containerd answering (default 90 s). */
  readonly bootTimeoutMs?: number;
  /**
   * The command in the node that succeeds once its runtime serves, and the runtime's unit (its
   * journal goes in the boot's failure message): `ctr version` and containerd unless told (a
   * CRI-O node: crictl against CRI-O's socket and crio, crio-node.ts).
   */
  readonly runtimeReady?: { readonly argv: string[]; readonly unit: string };
}

/** The root file system scripts/provision.sh debootstraps (systemd, dbus, containerd, runc). */
export const NODE_ROOTFS = path.join(CACHE_DIR, 'node-rootfs-bookworm');
const NODES_DIR = process.env.RCM_NODES_DIR ?? path.join(os.tmpdir(), 'rcm-systemd-nodes');
/** The installer's namespaces for host commands. */
const NSENTER_NAMESPACES = ['--mount', '--uts', '--ipc', '--net', '--pid'];
const NODE_ENV = {
  ...process.env,
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  SYSTEMD_PAGER: '',
  SYSTEMD_COLORS: '0',
  LANG: 'C.UTF-8',
};
/** Linux: SIGRTMIN is 34; systemd halts on SIGRTMIN+3 (Node.js has no name for it). */
const SIGRTMIN_PLUS_3 = 37;
const execFileAsync = promisify(execFile);

/** Fails with what to do when the root file system is missing (tests that need it must not skip). */
export function requireNodeRootfs(rootfs = NODE_ROOTFS): string {
  if (!fs.existsSync(path.join(rootfs, 'usr', 'bin', 'containerd')) || !fs.existsSync(path.join(rootfs, 'lib', 'systemd', 'systemd'))) {
    throw new Error(`the systemd node root file system is missing at ${rootfs}: run scripts/provision.sh (as root) to debootstrap it`
      + ' (RCM_CACHE_DIR selects the cache folder)');
  }
  return rootfs;
}

/** The node-prep unit: what nspawn leaves read-only and containerd/runc must write. */
const NODE_PREP = `#!/bin/sh
# cgroup v1 controllers: nspawn mounts them read-only; containerd/runc and systemd need them writable
for c in /sys/fs/cgroup/*; do
  case $(basename $c) in systemd|unified) continue;; esac
  [ -L $c ] && continue
  mount -o remount,bind,rw $c
done
`;
const NODE_PREP_UNIT = `[Unit]
Description=Make cgroup controllers writable (nspawn test node)
DefaultDependencies=no
Before=containerd.service kubelet.service
After=local-fs.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/node-prep
[Install]
WantedBy=multi-user.target
`;

/** containerd's default config, with what production nodes that use systemd set. */
function containerdConfig(root: string, more?: (config: string) => string): string {
  const r = spawnSync('chroot', [root, 'containerd', 'config', 'default'], { encoding: 'utf8', env: NODE_ENV });
  if (r.status !== 0) throw new Error(`containerd config default failed in ${root}: ${r.stderr}`);
  let config = r.stdout;
  for (const [from, to] of [['SystemdCgroup = false', 'SystemdCgroup = true'], ['restrict_oom_score_adj = false', 'restrict_oom_score_adj = true']]) {
    if (!config.includes(from)) throw new Error(`containerd's default config has no "${from}": ${config}`);
    config = config.replace(from, to);
  }
  return more ? more(config) : config;
}

/**
 * containerd from `folder` over the root's Debian binaries (see SystemdNodeOptions.containerdFrom).
 * runc stays Debian's (1.1.5): with runc 1.4.3 under this test bed's systemd 252 (nspawn, cgroup
 * v1) a privileged container's process was left out of its devices cgroup, which is where runc
 * looks for the processes to signal: `runc kill` found none, returned 0, and such pods (the
 * installer's among them) never stopped. The single-node suite runs runc 1.4.3 (cgroupfs).
 */
function installContainerd(root: string, folder: string): void {
  const targets: Record<string, string> = {
    'containerd': 'usr/bin/containerd', 'ctr': 'usr/bin/ctr', 'containerd-shim-runc-v2': 'usr/bin/containerd-shim-runc-v2',
  };
  for (const [binary, target] of Object.entries(targets)) {
    fs.rmSync(path.join(root, target), { force: true });
    fs.copyFileSync(path.join(folder, binary), path.join(root, target));
    fs.chmodSync(path.join(root, target), 0o755);
  }
}

interface Hierarchy { v1: boolean; cgroup: string }

/** This process's cgroup in every hierarchy, as folders on this machine. */
function ownCgroups(): Hierarchy[] {
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).map(line => {
    const [left, right] = line.split(' - ');
    const f = left.split(' ');
    const [fsType, , superOptions] = right.split(' ');
    return { root: f[3], mountPoint: f[4], fsType, options: superOptions.split(',') };
  }).filter(m => m.fsType === 'cgroup' || m.fsType === 'cgroup2');
  const result: Hierarchy[] = [];
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n').filter(Boolean)) {
    const [, controllers, cgroup] = line.match(/^\d+:([^:]*):(.*)$/)!.slice(0, 3);
    const wanted = controllers.split(',').filter(Boolean);
    const mount = controllers === ''
      ? mounts.find(m => m.fsType === 'cgroup2')
      : mounts.find(m => m.fsType === 'cgroup' && wanted.every(c => m.options.includes(c)));
    if (!mount) continue; // a hierarchy nobody mounted here
    const relative = mount.root === '/' ? cgroup : path.relative(mount.root, cgroup);
    result.push({ v1: mount.fsType === 'cgroup', cgroup: path.join(mount.mountPoint, relative) });
  }
  return result;
}

/** Removes empty cgroup folders below (and with) `top`, deepest first; returns those left. */
function removeCgroupTree(top: string): string[] {
  if (!fs.existsSync(top)) return [];
  const dirs: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(path.join(d, e.name));
    dirs.push(d);
  };
  walk(top);
  for (const d of dirs) {
    try {
      fs.rmdirSync(d);
    } catch {
      // still in use: reported below
    }
  }
  return dirs.filter(d => fs.existsSync(d));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // a zombie is gone for our purposes
  try {
    return !/^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}

/** The fields of /proc/<pid>/status (undefined when the process is gone). */
function procStatus(pid: number | string): Record<string, string> | undefined {
  try {
    return Object.fromEntries(fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').filter(Boolean)
      .map(l => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]));
  } catch {
    return undefined;
  }
}

/**
 * Processes in a nested pid namespace whose parent is in a shallower one (what nsenter starts
 * in a node, or a node's PID 1 under systemd-nspawn): pid, state, pids per namespace, parent.
 */
function enteredFromOutside(): string {
  const lines: string[] = [];
  for (const p of fs.readdirSync('/proc').filter(e => /^\d+$/.test(e))) {
    const s = procStatus(p);
    const parent = s && procStatus(s.PPid);
    if (!s || !parent || s.NSpid.split(/\s+/).length <= parent.NSpid.split(/\s+/).length) continue;
    lines.push(`${p} ${s.Name} (${s.State}) NSpid ${s.NSpid}; parent ${s.PPid} ${parent.Name} (${parent.State})`);
  }
  return lines.join('\n');
}

/**
 * Ends a node at once: SIGKILL to its systemd ends its whole pid namespace (nspawn then
 * exits by itself); SIGKILL to nspawn alone could leave the node's processes running.
 */
async function killNode(nspawnPid: number): Promise<void> {
  const kill = (p: number | undefined) => {
    if (!p) return;
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone already
    }
  };
  kill(nodeInit(nspawnPid)); // looked up now: a pid of ours could be reused
  await eventually(async () => !alive(nspawnPid), 10_000, () => '').catch(() => kill(nspawnPid));
  await eventually(async () => !alive(nspawnPid), 10_000, () => `systemd-nspawn ${nspawnPid} survived SIGKILL`);
}

/** The node's systemd: the child of systemd-nspawn that is PID 1 of its pid namespace. */
function nodeInit(nspawnPid: number): number | undefined {
  let children: string[];
  try {
    children = fs.readFileSync(`/proc/${nspawnPid}/task/${nspawnPid}/children`, 'utf8').trim().split(' ').filter(Boolean);
  } catch {
    return undefined;
  }
  for (const child of children) {
    try {
      const status = fs.readFileSync(`/proc/${child}/status`, 'utf8');
      const nspid = status.match(/^NSpid:\s+(.*)$/m)?.[1].trim().split(/\s+/);
      const comm = fs.readFileSync(`/proc/${child}/comm`, 'utf8').trim();
      if (nspid && nspid.length > 1 && nspid[nspid.length - 1] === '1' && comm === 'systemd') return Number(child);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

/**
 * nspawn leaves folders in this machine's /run/systemd/nspawn: the node's own goes, the shared
 * ones only when no systemd-nspawn runs (another node may be starting).
 */
function removeNspawnRunDirs(name: string): void {
  const top = '/run/systemd/nspawn';
  const rmdir = (d: string) => {
    try {
      fs.rmdirSync(d);
    } catch {
      // not there, or not empty
    }
  };
  rmdir(path.join(top, 'propagate', name));
  const nspawnRuns = fs.readdirSync('/proc').filter(p => /^\d+$/.test(p)).some(p => {
    try {
      return fs.readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'systemd-nspawn';
    } catch {
      return false;
    }
  });
  if (nspawnRuns) return;
  for (const d of ['propagate', 'locks', 'incoming', '']) rmdir(path.join(top, d));
}

/**
 * After the node ended: its cgroups (nspawn leaves empty ones behind, which may take a
 * moment to empty), the shared parents when no other node uses them, nspawn's /run folders.
 * Returns the cgroups left.
 */
async function removeNodeCgroups(name: string, cgroups: string[]): Promise<string[]> {
  let left: string[] = [];
  await eventually(async () => (left = cgroups.flatMap(removeCgroupTree)).length === 0, 10_000, () => '').catch(() => undefined);
  for (const c of cgroups) {
    try {
      fs.rmdirSync(path.dirname(c)); // systemd-nodes, when no other node is left in it
    } catch {
      // other nodes
    }
  }
  removeNspawnRunDirs(name);
  return left;
}

function mountsBelow(dir: string): string[] {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean).map(l => l.split(' ')[4])
    .filter(m => m === dir || m.startsWith(dir + '/'));
}

/** What a previous run left under this name: halt its node if its owner is gone, remove it all. */
async function clearLeftover(name: string, dir: string, cgroups: string[]): Promise<void> {
  const state = path.join(dir, 'node.json');
  if (fs.existsSync(state)) {
    const { owner, nspawnPid } = JSON.parse(fs.readFileSync(state, 'utf8')) as { owner: number; nspawnPid: number };
    if (owner !== process.pid && alive(owner) && alive(nspawnPid)) {
      throw new Error(`systemd node ${name} is running for process ${owner} (${dir}): give this node another name`);
    }
    if (alive(nspawnPid)) {
      // nspawn halts a booted container on SIGTERM (its --kill-signal, SIGRTMIN+3)
      process.kill(nspawnPid, 'SIGTERM');
      await eventually(async () => !alive(nspawnPid), 30_000, () => '').catch(() => killNode(nspawnPid));
    }
  }
  for (const c of cgroups) removeCgroupTree(c);
  const mounts = mountsBelow(dir);
  if (mounts.length) throw new Error(`leftover node ${name}: mounts below ${dir}: ${mounts.join(' ')}`);
  fs.rmSync(dir, { recursive: true, force: true });
}

/**
 * Boots a node named `name` (its hostname; its folder and cgroups are named after it, so
 * nodes alive at the same time need distinct names). Resolves once containerd answers
 * `ctr version` in the node. Throws, saying what to do, when the root file system is missing.
 */
export async function bootSystemdNode(name: string, opts: SystemdNodeOptions = {}): Promise<SystemdNode> {
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(name)) throw new Error(`bad node name ${JSON.stringify(name)}: a hostname label`);
  const rootfs = requireNodeRootfs(opts.rootfs);
  const dir = path.join(opts.nodesDir ?? NODES_DIR, name);
  const root = path.join(dir, 'rootfs');
  const hierarchies = ownCgroups();
  const cgroups = hierarchies.map(h => path.join(h.cgroup, 'systemd-nodes', name));
  await clearLeftover(name, dir, cgroups);
  fs.mkdirSync(dir, { recursive: true });

  const t0 = Date.now();
  await execFileAsync('cp', ['-a', '--reflink=auto', rootfs, root]);
  const copyMs = Date.now() - t0;

  // minbase has no /etc/hosts (the CRI copies it into hostNetwork sandboxes)
  fs.writeFileSync(path.join(root, 'etc/hosts'), `127.0.0.1\tlocalhost ${name}\n::1\t\tlocalhost ip6-localhost ip6-loopback\n`);
  fs.writeFileSync(path.join(root, 'etc/hostname'), `${name}\n`);
  // debootstrap made one machine id; real nodes each have their own (and so their own journal folder)
  fs.writeFileSync(path.join(root, 'etc/machine-id'), `${randomBytes(16).toString('hex')}\n`);
  // pods' scopes ignore SIGTERM: without this a halt waits 90 s per running pod
  fs.mkdirSync(path.join(root, 'etc/systemd/system.conf.d'), { recursive: true });
  fs.writeFileSync(path.join(root, 'etc/systemd/system.conf.d/10-test-node.conf'), '[Manager]\nDefaultTimeoutStopSec=10s\n');
  if (opts.containerdFrom) installContainerd(root, opts.containerdFrom);
  fs.writeFileSync(path.join(root, 'etc/containerd/config.toml'), containerdConfig(root, opts.containerdConfig));
  fs.writeFileSync(path.join(root, 'usr/local/sbin/node-prep'), NODE_PREP, { mode: 0o755 });
  fs.writeFileSync(path.join(root, 'etc/systemd/system/node-prep.service'), NODE_PREP_UNIT);
  fs.symlinkSync('/etc/systemd/system/node-prep.service', path.join(root, 'etc/systemd/system/multi-user.target.wants/node-prep.service'));
  opts.prepare?.(root);

  // a cgroup of its own in every hierarchy (nspawn makes the cgroup it starts in the node's
  // root): created level by level, cpuset's cpus and mems copied down or nothing can join
  for (const target of cgroups) {
    for (const level of [path.dirname(target), target]) {
      fs.mkdirSync(level, { recursive: true });
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        const file = path.join(level, f);
        if (fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim() === '') {
          fs.writeFileSync(file, fs.readFileSync(path.join(path.dirname(level), f), 'utf8').trim());
        }
      }
    }
  }
  const procs = cgroups.map(c => path.join(c, 'cgroup.procs'));
  const legacy = hierarchies.some(h => h.v1);
  const nspawn = ['systemd-nspawn', '-b', '-D', root, `--machine=${name}`, '--register=no', '--keep-unit',
    // pidfd_*: systemd-nspawn 252's seccomp filter refuses them, and runc 1.2 and later signal a
    // container's process through a pidfd: `runc kill` then returned 0 and killed nothing (pods
    // never stopped on containerd 2.4 with runc 1.4.3). Real nodes have no such filter.
    '--console=read-only', '--system-call-filter=@keyring pidfd_open pidfd_send_signal pidfd_getfd', ...opts.nspawnArgs ?? []];
  const log = path.join(dir, 'nspawn.log');
  const out = fs.openSync(log, 'a');
  // the shell moves itself into the node's cgroups, then becomes systemd-nspawn
  const child: ChildProcess = spawn('bash', ['-c', 'n=$1; shift; for f in "${@:1:$n}"; do echo $$ > "$f"; done; shift "$n"; exec "$@"',
    'boot', String(procs.length), ...procs, ...nspawn], {
    detached: true, // its own session: a signal to jest's process group does not reach the node
    stdio: ['ignore', out, out],
    env: { ...NODE_ENV, ...legacy ? { SYSTEMD_NSPAWN_UNIFIED_HIERARCHY: '0' } : {} },
  });
  fs.closeSync(out);
  child.unref();
  const nspawnPid = child.pid!;
  fs.writeFileSync(path.join(dir, 'node.json'), JSON.stringify({ owner: process.pid, nspawnPid }));
  const logTail = () => fs.readFileSync(log, 'utf8').split('\n').slice(-40).join('\n');
  const bootTimeoutMs = opts.bootTimeoutMs ?? 90_000;

  let pid = 0;
  const enter = () => ['--target', String(pid), ...NSENTER_NAMESPACES, '--'];
  const tryExec = (argv: string[], input?: string | Buffer): ExecResult => {
    const r = spawnSync('nsenter', [...enter(), ...argv], { input, encoding: 'utf8', env: NODE_ENV, maxBuffer: 64 * 1024 * 1024, timeout: 60_000 });
    return { code: r.status ?? -1, stdout: r.stdout ?? '', stderr: (r.stderr ?? '') + (r.error ? String(r.error) : '') };
  };
  const exec = (argv: string[], input?: string | Buffer) => {
    const r = tryExec(argv, input);
    if (r.code !== 0) throw new Error(`node ${name}: ${argv.join(' ')} exited ${r.code}: ${r.stderr.trim()}`);
    return r.stdout;
  };
  const systemState = () => tryExec(['systemctl', 'is-system-running']).stdout.trim();

  try {
    pid = await eventually(async () => {
      if (!alive(nspawnPid)) throw new Error('systemd-nspawn ended');
      return nodeInit(nspawnPid);
    }, 20_000, () => `node ${name}: no systemd below nspawn ${nspawnPid}:\n${logTail()}`);
    // boot done (node-prep has remounted the controllers) ...
    await eventually(async () => ['running', 'degraded'].includes(systemState()) && pid === nodeInit(nspawnPid), bootTimeoutMs,
      () => `node ${name} did not boot (is-system-running: ${systemState()}):\n${logTail()}`);
    // ... then systemd must re-exec to manage the controllers it found read-only at its start
    // (or crun containers share one cgroup: systemd-kubelet-nodes.md)
    const t1 = Date.now();
    exec(['systemctl', 'daemon-reexec']);
    await eventually(async () => ['running', 'degraded'].includes(systemState()), bootTimeoutMs,
      () => `node ${name} after daemon-reexec (is-system-running: ${systemState()}):\n${logTail()}`);
    const reexecMs = Date.now() - t1;
    // ctr waits for the socket to appear (10 s unless told)
    const ready = opts.runtimeReady ?? { argv: ['ctr', '--connect-timeout', '2s', 'version'], unit: 'containerd' };
    await eventually(async () => tryExec(ready.argv).code === 0, bootTimeoutMs,
      () => `node ${name}: ${ready.unit} does not answer: ${tryExec(ready.argv).stderr}\n`
        + `${tryExec(['journalctl', '-b', '-u', ready.unit, '--no-pager', '-n', '30']).stdout}\n${logTail()}`);
    const bootMs = Date.now() - t0 - copyMs;
    return makeNode({ name, dir, root, pid, nspawnPid, cgroups, timings: { copyMs, bootMs, reexecMs }, exec, tryExec });
  } catch (e) {
    // leave nothing behind when the boot fails
    if (alive(nspawnPid)) await killNode(nspawnPid).catch(() => undefined);
    const leftCgroups = await removeNodeCgroups(name, cgroups);
    throw new Error(`${(e as Error).message}${leftCgroups.length ? `\n(cgroups left: ${leftCgroups.join(' ')})` : ''}\n(node folder kept: ${dir})`);
  }
}

type NodeParts = Pick<SystemdNode, 'name' | 'dir' | 'root' | 'pid' | 'nspawnPid' | 'cgroups' | 'timings' | 'exec' | 'tryExec'>;

function makeNode(n: NodeParts): SystemdNode {
  const { name, dir, pid, nspawnPid, exec } = n;
  const unitName = (unit: string) => (unit.includes('.') ? unit : `${unit}.service`);
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const journal = (unit: string) => exec(['journalctl', '-b', '-u', unitName(unit), '-o', 'short-precise', '--no-pager']);
  const count = (unit: string, re: (u: string) => RegExp) => journal(unit).split('\n').filter(l => re(escape(unitName(unit))).test(l)).length;
  const show = (unit: string, properties: string[]) => {
    const out = exec(['systemctl', 'show', ...properties.flatMap(p => ['-p', p]), unitName(unit)]);
    return Object.fromEntries(out.split('\n').filter(Boolean).map(l => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  };
  const startsOf = (unit: string) => count(unit, u => new RegExp(`: Started ${u}\\b`));
  let stopped = false;
  /**
   * What a halt that hangs waits for: systemd's jobs, units still deactivating, the node's
   * processes and non-empty cgroups; once its PID 1 has left its namespaces (systemd-shutdown
   * exited), the processes of its pid namespace that a parent outside it has not reaped.
   */
  const haltDiagnostics = () => {
    const run = (argv: string[]) => {
      const r = n.tryExec(argv);
      return `$ ${argv.join(' ')} (exit ${r.code})\n${r.stdout}${r.stderr}`;
    };
    const procs = n.cgroups.filter(c => /\/(systemd|memory)\//.test(c)).map(c => {
      const r = spawnSync('sh', ['-c', 'for f in $(find "$1" -name cgroup.procs); do p=$(cat $f); [ -n "$p" ] && echo "${f#$1} $(echo $p)"; done; true', 'sh', c],
        { encoding: 'utf8', timeout: 10_000 });
      return `non-empty cgroups below ${c}:\n${r.stdout}`;
    });
    const init = procStatus(pid);
    if (init && !fs.existsSync(`/proc/${pid}/ns/mnt`)) {
      return [
        `the node's PID 1 (${pid}, ${init.Name}, ${init.State}) has left its namespaces: it ends when every other process of its pid`
        + ' namespace has been reaped. Processes in a pid namespace of their own whose parent is outside it (entered with nsenter;'
        + ` a zombie among them waits for that parent):\n${enteredFromOutside()}`,
        ...procs,
      ].join('\n');
    }
    return [
      run(['systemctl', 'list-jobs', '--no-pager']),
      run(['systemctl', 'list-units', '--state=deactivating,activating,failed', '--no-pager', '--all']),
      // the node has no ps: its /proc
      run(['sh', '-c', 'for p in /proc/[0-9]*; do echo "${p#/proc/} $(cat $p/comm) $(tr "\\0" " " < $p/cmdline)"; done 2>/dev/null; true']),
      ...procs,
      `processes entered from outside a pid namespace:\n${enteredFromOutside()}`,
      run(['journalctl', '-b', '-n', '60', '-o', 'short-precise', '--no-pager']),
    ].join('\n');
  };

  const stop = async () => {
    if (stopped) return { haltMs: 0 };
    stopped = true;
    const t0 = Date.now();
    if (nodeInit(nspawnPid) === pid) process.kill(pid, SIGRTMIN_PLUS_3);
    const ended = () => !alive(nspawnPid);
    let clean = true;
    let blocked = '';
    await eventually(async () => ended(), 60_000, () => '').catch(async () => {
      clean = false;
      blocked = haltDiagnostics();
      await killNode(nspawnPid);
    });
    const haltMs = Date.now() - t0;
    const left = await removeNodeCgroups(name, n.cgroups);
    const mounts = mountsBelow(dir);
    if (mounts.length) throw new Error(`node ${name}: mounts left below ${dir}: ${mounts.join(' ')}; folder kept`);
    fs.rmSync(dir, { recursive: true, force: true });
    if (!clean) throw new Error(`node ${name} did not halt within 60 s of SIGRTMIN+3 (killed); what was left then:\n${blocked}`);
    if (left.length) throw new Error(`node ${name}: cgroups left: ${left.join(' ')}`);
    return { haltMs };
  };

  return {
    name,
    dir,
    root: n.root,
    view: `/proc/${pid}/root`,
    pid,
    nspawnPid,
    containerdSocket: `/proc/${pid}/root/run/containerd/containerd.sock`,
    cgroups: n.cgroups,
    timings: n.timings,
    exec,
    tryExec: n.tryExec,
    sh: cmd => exec(['sh', '-c', cmd]),
    journal,
    startsOf,
    startAttemptsOf: unit => count(unit, u => new RegExp(`: Starting ${u}\\b`)),
    restartsOf: unit => Math.max(0, startsOf(unit) - 1),
    startLimitHits: unit => count(unit, u => new RegExp(`${u}: Start request repeated too quickly`)),
    unitState: unit => {
      const s = show(unit, ['ActiveState', 'SubState', 'Result', 'MainPID', 'NRestarts']);
      return { activeState: s.ActiveState, subState: s.SubState, result: s.Result, mainPid: Number(s.MainPID), nRestarts: Number(s.NRestarts) };
    },
    show,
    mainPidOnMachine: unit => {
      const inNode = show(unit, ['MainPID']).MainPID;
      if (!inNode || inNode === '0') return undefined;
      const ns = fs.readlinkSync(`/proc/${pid}/ns/pid`);
      for (const p of fs.readdirSync('/proc').filter(e => /^\d+$/.test(e))) {
        try {
          const nspid = fs.readFileSync(`/proc/${p}/status`, 'utf8').match(/^NSpid:\s+(.*)$/m)?.[1].trim().split(/\s+/);
          if (nspid?.[nspid.length - 1] === inNode && fs.readlinkSync(`/proc/${p}/ns/pid`) === ns) return Number(p);
        } catch {
          // gone meanwhile
        }
      }
      return undefined;
    },
    stop,
  };
}
