import { ChildProcess, execFileSync, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { eventually } from './rest';

/**
 * One node of a cluster on one machine: a host of its own made of the machine's files, in
 * its own mount AND pid namespaces, as a real node is (../shared/notes/test-cluster.md,
 * "Several nodes on one machine").
 *
 * - Its init is PID 1 of the node's pid namespace. The node's containerd and kubelet run
 *   below it, so a hostPID pod shares that pid namespace: there, PID 1 is the node's init,
 *   and `nsenter --target 1 --mount ...` (the installer's default) lands in the node's view,
 *   exactly as on a real machine.
 * - Its view of the machine: `/etc`, `/opt`, `/var`, `/usr/bin` and `/usr/local/bin` are
 *   overlays (the machine's files below, the node's changes in the node's folder, never the
 *   machine's), `/run` is a fresh tmpfs, and `privateDirs` are empty node folders bound over
 *   those paths (containerd's root must not be on an overlay: its snapshots are overlays).
 *   The mounts live in the node's namespace only (private propagation).
 * - Units: the init supervises each unit's start script as systemd does with
 *   `Restart=always`, logs every start and exit with a timestamp to
 *   `/var/log/rcm-units/<unit>.log`, and `/usr/bin/systemctl` is a stand-in that restarts,
 *   stops and starts them (there is no systemd on these machines).
 * - Same network namespace as the machine: everything listens on 127.0.0.1.
 */
export interface NodeHost {
  readonly name: string;
  /** The node's folder on the machine (overlay upper folders, private folders). */
  readonly dir: string;
  /** The init's process id, as the machine sees it. */
  readonly initPid: number;
  /** Runs a command in the node's namespaces (mount and pid); returns stdout, throws on failure. */
  run(argv: string[], input?: string | Buffer): string;
  /** As `run`, but returns the exit code and output instead of throwing. */
  tryRun(argv: string[]): { code: number; stdout: string; stderr: string };
  /** A file as the node sees it (symlinks followed in the node's view); undefined when absent. */
  read(file: string): string | undefined;
  write(file: string, data: string, mode?: number): void;
  /** `systemctl <command> <unit>` on the node (the stand-in). */
  systemctl(command: 'restart' | 'stop' | 'start', unit: string): void;
  /** Every start and exit of a unit's main process, from the node's unit log. */
  unitEvents(unit: string): { at: number; event: 'start' | 'exit'; pid: number }[];
  /** Starts the units (after the files are laid out); resolves at once. */
  startUnits(): void;
  /** Kills everything of the node (its pid namespace) and removes its folder. */
  stop(): Promise<void>;
}

/** What to put in the node's view before its units start. */
/** Text, a symbolic link, a copy of a machine file, or nothing (removed from the node's view). */
export type NodeFile = string | { link: string } | { copy: string; mode?: number } | { remove: true };

export interface NodeHostOptions {
  readonly name: string;
  readonly dir: string;
  /** Node paths that get an empty folder of the node's own (a bind mount). */
  readonly privateDirs: string[];
  /** Unit name -> its start script (sh); the unit's main process is what the script execs. */
  readonly units: Record<string, string>;
}

const OVERLAID = ['/etc', '/opt', '/var', '/usr/bin', '/usr/local/bin'];

/** systemctl as the node's units know it: restart, stop, start, is-active. */
const SYSTEMCTL = `#!/bin/sh
# systemctl stand-in of a test node (no systemd here): units are supervised by the node's init.
cmd=$1; unit=\${2%.service}
if [ ! -f /etc/rcm-node/units/$unit ]; then echo "Failed to $cmd $unit.service: Unit $unit.service not found." >&2; exit 5; fi
main() { cat /run/rcm-units/$unit.pid 2>/dev/null; }
stop_main() {
  old=$(main)
  [ -n "$old" ] || return 0
  kill $old 2>/dev/null
  while kill -0 $old 2>/dev/null; do sleep 0.05; done
}
wait_main() {
  i=0
  while [ -z "$(main)" ] || [ "$(main)" = "$1" ]; do i=$((i+1)); [ $i -gt 200 ] && { echo "Job for $unit.service failed." >&2; exit 1; }; sleep 0.05; done
}
case $cmd in
  restart) old=$(main); stop_main; wait_main "$old" ;;
  stop) touch /run/rcm-units/$unit.stopped; stop_main ;;
  start) rm -f /run/rcm-units/$unit.stopped; wait_main "" ;;
  is-active) if [ -n "$(main)" ]; then echo active; else echo inactive; exit 3; fi ;;
  *) echo "systemctl stand-in: $cmd is not supported" >&2; exit 1 ;;
esac
`;

/** The node's init: supervises every unit (Restart=always), then reaps orphans for ever. */
const INIT = `
mkdir -p /run/rcm-units /var/log/rcm-units
supervise() {
  u=$1
  while true; do
    if [ -e /run/rcm-units/$u.stopped ]; then sleep 0.2; continue; fi
    sh /etc/rcm-node/units/$u >>/var/log/$u.log 2>&1 &
    pid=$!
    echo $pid > /run/rcm-units/$u.pid
    echo "$(date +%s.%N) start $pid" >> /var/log/rcm-units/$u.log
    wait $pid
    echo "$(date +%s.%N) exit $pid $?" >> /var/log/rcm-units/$u.log
    rm -f /run/rcm-units/$u.pid
    sleep 0.2
  done
}
for f in /etc/rcm-node/units/*; do supervise "$(basename "$f")" & done
while true; do wait; sleep 1; done
`;

/** Boots the node's namespaces and mounts; lay files out with write/run, then startUnits(). */
export async function startNodeHost(options: NodeHostOptions): Promise<NodeHost> {
  const { dir } = options;
  fs.mkdirSync(dir, { recursive: true });
  const key = (p: string) => p.replace(/\//g, '_');
  const boot = [
    'set -e',
    ...OVERLAID.map(d => {
      const o = path.join(dir, 'overlay', key(d));
      fs.mkdirSync(path.join(o, 'upper'), { recursive: true });
      fs.mkdirSync(path.join(o, 'work'), { recursive: true });
      return `mount -t overlay overlay -o lowerdir=${d},upperdir=${o}/upper,workdir=${o}/work ${d}`;
    }),
    'mount -t tmpfs -o mode=755 tmpfs /run',
    ...options.privateDirs.map(d => {
      const p = path.join(dir, 'private', key(d));
      fs.mkdirSync(p, { recursive: true });
      return `mkdir -p ${d} && mount --bind ${p} ${d}`;
    }),
    'mkdir -p /etc/rcm-node/units',
    'touch /run/.node-mounted',
    'while [ ! -e /run/.node-go ]; do sleep 0.1; done',
    'exec bash /etc/rcm-node/init',
  ].join('\n');
  const log = path.join(dir, 'init.log');
  const out = fs.openSync(log, 'a');
  const child: ChildProcess = spawn('unshare', ['--mount', '--pid', '--fork', '--propagation', 'private', '--mount-proc', 'bash', '-c', boot],
    { stdio: ['ignore', out, out] });
  fs.closeSync(out);
  // unshare forks the init: the node's PID 1 is unshare's child.
  const initPid = await eventually(async () => {
    const kids = fs.readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim();
    return kids ? Number(kids.split(' ')[0]) : undefined;
  }, 10_000, () => `node ${options.name} did not boot: ${fs.readFileSync(log, 'utf8')}`);
  const pidNamespace = fs.readlinkSync(`/proc/${initPid}/ns/pid`);

  const enter = ['--target', String(initPid), '--mount', '--pid', '--'];
  const run = (argv: string[], input?: string | Buffer) => execFileSync('nsenter', [...enter, ...argv],
    { encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 });
  const tryRun = (argv: string[]) => {
    const r = spawnSync('nsenter', [...enter, ...argv], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
  };
  await eventually(async () => tryRun(['test', '-e', '/run/.node-mounted']).code === 0, 10_000,
    () => `node ${options.name} did not mount its view: ${fs.readFileSync(log, 'utf8')}`);

  const write = (file: string, data: string, mode = 0o644) => {
    run(['sh', '-c', `mkdir -p "$(dirname "$1")" && rm -f "$1" && cat > "$1" && chmod ${mode.toString(8)} "$1"`, 'sh', file], data);
  };
  write('/etc/rcm-node/init', INIT);
  write('/usr/bin/systemctl', SYSTEMCTL, 0o755);
  for (const [unit, script] of Object.entries(options.units)) write(`/etc/rcm-node/units/${unit}`, script);

  const read = (file: string) => {
    const r = tryRun(['cat', file]);
    return r.code === 0 ? r.stdout : undefined;
  };
  const unitEvents = (unit: string) => (read(`/var/log/rcm-units/${unit}.log`) ?? '').split('\n').filter(Boolean).map(line => {
    const [at, event, pid] = line.split(' ');
    return { at: Number(at) * 1000, event: event as 'start' | 'exit', pid: Number(pid) };
  });

  const processes = () => fs.readdirSync('/proc').filter(p => /^\d+$/.test(p)).filter(p => {
    try {
      return fs.readlinkSync(`/proc/${p}/ns/pid`) === pidNamespace;
    } catch {
      return false;
    }
  });
  const stop = async () => {
    // The end of a pid namespace's init ends every process in it (and in the namespaces below:
    // the containers); the mounts go with the last process of the mount namespace.
    try {
      process.kill(initPid, 'SIGKILL');
    } catch {
      // gone already
    }
    await eventually(async () => processes().length === 0 && child.exitCode !== null, 20_000,
      () => `node ${options.name}: processes left in its pid namespace: ${processes().join(' ')}`);
    fs.rmSync(dir, { recursive: true, force: true });
  };

  return {
    name: options.name,
    dir,
    initPid,
    run,
    tryRun,
    read,
    write,
    systemctl: (command, unit) => void run(['systemctl', command, unit]),
    unitEvents,
    startUnits: () => void run(['touch', '/run/.node-go']),
    stop,
  };
}

/** Lays out files in a node's view (before its units start). */
export function layOut(node: NodeHost, files: Record<string, NodeFile>): void {
  for (const [file, what] of Object.entries(files)) {
    if (typeof what === 'string') {
      node.write(file, what);
    } else if ('link' in what) {
      node.run(['sh', '-c', 'mkdir -p "$(dirname "$2")" && rm -rf "$2" && ln -s "$1" "$2"', 'sh', what.link, file]);
    } else if ('copy' in what) {
      // The machine's file, which the node's view may hide (the node's own /usr/bin).
      node.run(['sh', '-c', `mkdir -p "$(dirname "$1")" && rm -f "$1" && cat > "$1" && chmod ${(what.mode ?? 0o755).toString(8)} "$1"`, 'sh', file],
        fs.readFileSync(what.copy));
    } else {
      node.run(['rm', '-rf', file]);
    }
  }
}

/** Removes what is left of a node's cgroups (its containers' folders below `root` in every hierarchy). */
export function removeCgroups(root: string): void {
  const base = '/sys/fs/cgroup';
  if (!fs.existsSync(base)) return;
  for (const hierarchy of fs.readdirSync(base)) {
    const top = path.join(base, hierarchy, root);
    if (!fs.existsSync(top)) continue;
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
        // still in use or not removable
      }
    }
  }
}
