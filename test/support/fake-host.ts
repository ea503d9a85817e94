import { ChildProcess, execFileSync, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { containerdConfigFor } from './containerd-daemon';
import { eventually } from './rest';

/**
 * A host whose / is a folder: a private mount namespace pivoted into `root`, with an "init"
 * (a static busybox sh running `init`) whose pid stands for the host's PID 1. An installer
 * given `--host-root=<root> --host-pid=<pid>` sees the host's files under `root` and runs
 * host commands through nsenter in the host's own view, where only what the test put there
 * exists: /usr/bin has busybox and its applets, /usr/lib and /usr/lib64 are the real
 * machine's libraries (read-only, for dynamically linked binaries such as containerd), and
 * /dev, /proc, /sys are the machine's. Nothing else of the machine is reachable from inside.
 */
export interface FakeHost {
  /** The host's / as the installer sees it. */
  readonly root: string;
  /** The init's pid (for --host-pid). */
  readonly pid: number;
  /** Runs a command inside the host (through nsenter), returns its stdout. */
  run(argv: string[]): string;
  stop(): Promise<void>;
}

export type HostEntry = string | { link: string } | { copy: string; mode?: number };

const APPLETS = ['sh', 'cat', 'kill', 'sleep', 'sed', 'cp', 'rm', 'mkdir', 'ls', 'grep', 'mv', 'touch', 'test'];

/** Lays out `root` (standard links, busybox, `entries`) and boots its init. */
export async function startFakeHost(entries: Record<string, HostEntry>, init: string): Promise<FakeHost> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-fakehost-'));
  for (const d of ['usr/bin', 'usr/sbin', 'usr/lib', 'usr/lib64', 'proc', 'dev', 'sys', 'tmp', 'run', 'etc', '.old']) fs.mkdirSync(path.join(root, d), { recursive: true });
  for (const l of ['bin', 'sbin', 'lib', 'lib64']) fs.symlinkSync(`usr/${l}`, path.join(root, l));
  fs.copyFileSync('/bin/busybox', path.join(root, 'usr/bin/busybox')); // statically linked
  fs.chmodSync(path.join(root, 'usr/bin/busybox'), 0o755);
  for (const applet of APPLETS) fs.symlinkSync('busybox', path.join(root, 'usr/bin', applet));
  for (const [p, what] of Object.entries(entries)) {
    const full = path.join(root, p);
    fs.mkdirSync(path.dirname(full), { recursive: true });
    if (typeof what === 'string') {fs.writeFileSync(full, what);} else if ('link' in what) {fs.symlinkSync(what.link, full);} else {
      fs.copyFileSync(what.copy, full);
      fs.chmodSync(full, what.mode ?? 0o755);
    }
  }
  // The mounts exist only in the new namespace (private propagation): the machine never sees them.
  const boot = `set -e
    R="$FAKE_ROOT"
    mount --bind "$R" "$R"
    mount --bind -o ro /usr/lib "$R/usr/lib"
    mount --bind -o ro /usr/lib64 "$R/usr/lib64"
    mount --rbind /dev "$R/dev"
    mount --rbind /sys "$R/sys"
    mount -t proc proc "$R/proc"
    cd "$R"
    pivot_root . .old
    /usr/bin/busybox umount -l /.old
    /usr/bin/busybox touch /run/.fake-host-ready
    exec /usr/bin/busybox sh -c "$FAKE_INIT"`;
  const child: ChildProcess = spawn('unshare', ['--mount', '--propagation', 'private', 'bash', '-c', boot], {
    env: { PATH: process.env.PATH, FAKE_ROOT: root, FAKE_INIT: init },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', d => { stderr += d; });
  await eventually(async () => fs.existsSync(path.join(root, 'run/.fake-host-ready')), 10_000, () => `the fake host did not boot: ${stderr}`);
  const pid = child.pid!;
  const namespace = fs.readlinkSync(`/proc/${pid}/ns/mnt`);
  // Held open until the host is stopped: a mount namespace's number is reused once the
  // namespace is gone, and a stop that looks again for its processes must not find another
  // host's (one booting in a parallel test file) under the same number.
  const namespaceFd = fs.openSync(`/proc/${pid}/ns/mnt`, 'r');
  return {
    root,
    pid,
    run: argv => execFileSync('nsenter', ['--target', String(pid), '--mount', '--', ...argv], { encoding: 'utf8', env: { PATH: '/usr/bin' } }),
    stop: async () => {
      // Every process of the host's namespace: its init and whatever that started (containerd),
      // killed again on each look: an init loop that restarts containerd (the k3s stand-in) can
      // fork between the listing and its own kill, and /proc lists by pid, not by age.
      const killAll = () => {
        const left = processesIn(namespace);
        for (const p of left) {
          try {
            process.kill(p, 'SIGKILL');
          } catch {
            // gone already
          }
        }
        return left;
      };
      try {
        await eventually(async () => killAll().length === 0, 10_000,
          () => `the fake host's processes did not exit: ${processesIn(namespace).map(describeProcess).join(', ')}`);
      } finally {
        fs.closeSync(namespaceFd);
      }
      fs.rmSync(root, { recursive: true, force: true });
    },
  };
}

/** pid, command and state (for a process stuck in D, the reason it outlives SIGKILL). */
function describeProcess(pid: number): string {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return `${pid} ${stat.slice(stat.indexOf('('), stat.lastIndexOf(')') + 1)} ${stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]}`;
  } catch {
    return `${pid} (gone)`;
  }
}

function processesIn(namespace: string): number[] {
  return fs.readdirSync('/proc').filter(p => /^\d+$/.test(p)).filter(p => {
    try {
      return fs.readlinkSync(`/proc/${p}/ns/mnt`) === namespace;
    } catch {
      return false;
    }
  }).map(Number);
}

/**
 * containerd's default config for `binary`, with its root, state and sockets moved to the
 * given host paths (and the oom_score_adj this machine refuses turned off).
 */
export function containerdBaseConfig(binary: string, paths: { root: string; state: string; socket: string }): string {
  return containerdConfigFor(execFileSync(binary, ['config', 'default'], { encoding: 'utf8' }), paths);
}
