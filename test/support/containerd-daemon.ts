import { ChildProcess, execFileSync, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { stopProcess } from './control-plane';
import { tail, unmountBelow } from './files';
import { eventually } from './rest';

/**
 * A real containerd on private root/state/socket folders, under a supervisor that starts it
 * again whenever it exits: the stand-in for systemd's Restart=always. Restarting it is
 * `kill <pid of containerd>`, which is what `restartCommand` does.
 */
export interface ContainerdDaemon {
  readonly dir: string;
  readonly config: string;
  readonly socket: string;
  readonly log: string;
  /** A host command that restarts this containerd (for --restart-command). */
  readonly restartCommand: string;
  /** The supervisor's process: a process in the host's namespaces that is not PID 1. */
  readonly supervisorPid: number;
  /** The running daemon's process id (it changes with every restart). */
  pid(): number;
  ctr(args: string[]): string;
  /** Waits until the daemon answers. */
  waitReady(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/** What the CRI plugin needs to serve a kubelet. */
export interface CriSettings {
  /** The sandbox ("pause") image, fully qualified; it must be imported before pods start. */
  readonly sandboxImage: string;
  /** Folder of the CNI network configs (a private one: tests never touch /etc/cni). */
  readonly cniConfDir: string;
  /** Folder of the CNI plugin binaries. */
  readonly cniBinDir: string;
}

/**
 * `binary` runs as this machine's containerd would: from a folder other than /usr/bin, that
 * folder (containerd, ctr, the runc shim, runc) is mounted at /usr/local/sbin in a mount
 * namespace of the daemon's own (mounts of the machine still propagate into it: the kubelet's
 * volumes), so an installer that enters the daemon's namespaces (its host PID) finds the
 * containerd it serves first on the standard PATH, as on a host where it was installed from
 * upstream's release tarball.
 */
export async function startContainerd(binary = '/usr/bin/containerd', folder?: string, cri?: CriSettings): Promise<ContainerdDaemon> {
  // A folder it made itself goes again on stop(); a given one belongs to the caller.
  const dir = folder ?? fs.mkdtempSync(path.join(os.tmpdir(), 'rcm-containerd-'));
  const config = path.join(dir, 'etc', 'containerd', 'config.toml');
  const socket = path.join(dir, 'run', 'containerd.sock');
  const log = path.join(dir, 'containerd.log');
  const pidFile = path.join(dir, 'containerd.pid');
  fs.mkdirSync(path.dirname(config), { recursive: true });
  fs.mkdirSync(path.dirname(socket), { recursive: true });
  const defaults = execFileSync(binary, ['config', 'default'], { encoding: 'utf8' });
  fs.writeFileSync(config, containerdConfigFor(defaults, { root: path.join(dir, 'root'), state: path.join(dir, 'state'), socket }, cri));

  // The supervisor: a shell loop that records the daemon's pid and restarts it on exit.
  // A containerd of another folder runs as if installed in /usr/local/sbin (first on the
  // standard PATH): that folder is bind-mounted there in the daemon's own mount namespace, the
  // folder and not each file, since runc 1.2 and later refuse to start containers when their
  // own binary is a file bind mount ("can't get final child's PID from pipe").
  const own = path.dirname(binary) !== '/usr/bin';
  const launcher = own ? ['unshare', '--mount', '--propagation', 'slave', 'bash'] : ['bash'];
  const supervisor = spawn(launcher[0], [...launcher.slice(1), '-c', `
    ${own ? `mount --bind ${path.dirname(binary)} /usr/local/sbin && export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` : ''}
    trap 'kill $(cat ${pidFile}) 2>/dev/null; exit 0' TERM
    while true; do
      ${own ? `/usr/local/sbin/${path.basename(binary)}` : binary} --config ${config} >>${log} 2>&1 &
      echo $! > ${pidFile}
      wait $!
      sleep 0.2
    done`], { stdio: 'ignore', detached: true });

  // the ctr of the same build where there is one beside the daemon (a 1.6 ctr against containerd 2 is not what users run)
  const ctrBinary = fs.existsSync(path.join(path.dirname(binary), 'ctr')) ? path.join(path.dirname(binary), 'ctr') : 'ctr';
  const ctr = (args: string[]) => execFileSync(ctrBinary, ['--address', socket, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const waitReady = async (timeoutMs = 30_000) => {
    await eventually(async () => ctr(['version']) !== undefined, timeoutMs, () => `containerd did not answer:\n${tail(log, 20)}`);
  };
  const stop = async () => {
    await stopSupervisor(supervisor, pidFile);
    // Shims outlive containerd by design: stop those started from this root.
    try {
      execFileSync('pkill', ['-f', '--', `-address ${socket}`], { stdio: 'ignore' });
    } catch {
      // none left
    }
    if (folder === undefined) {
      unmountBelow(dir);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  };
  try {
    await waitReady();
  } catch (e) {
    await stop(); // nothing of a daemon that never answered stays behind
    throw e;
  }
  // Like `systemctl restart`, it returns once the old daemon has exited.
  const restartCommand = `old=$(cat ${pidFile}); kill $old; while kill -0 $old 2>/dev/null; do sleep 0.05; done`;
  const pid = () => Number(fs.readFileSync(pidFile, 'utf8'));
  return { dir, config, socket, log, restartCommand, supervisorPid: supervisor.pid!, pid, ctr, waitReady, stop };
}

/**
 * containerd's default config (`containerd config default` of some version) made to run on
 * this machine: its root, state and sockets moved to the given paths, debug and metrics
 * listeners off, the oom_score_adj this machine refuses turned off (without it every pod
 * sandbox fails) and, for a kubelet, the CRI's sandbox image and CNI folders.
 */
export function containerdConfigFor(defaults: string, paths: { root: string; state: string; socket: string }, cri?: CriSettings): string {
  let text = defaults
    .replace(/^root = .*$/m, `root = "${paths.root}"`)
    .replace(/^state = .*$/m, `state = "${paths.state}"`)
    // version 2: [grpc], [ttrpc], ...; versions 3 and 4 (containerd 2.x): [plugins.'io.containerd.server.v1.grpc'], ...
    .replace(/(\[(?:grpc|plugins\.'io\.containerd\.server\.v1\.grpc')\][^[]*?address = )(["'])[^"']*\2/, `$1"${paths.socket}"`)
    .replace(/(\[(?:ttrpc|plugins\.'io\.containerd\.server\.v1\.ttrpc')\][^[]*?address = )(["'])[^"']*\2/, `$1"${paths.socket}.ttrpc"`)
    .replace(/(\[(?:debug|plugins\.'io\.containerd\.server\.v1\.debug')\][^[]*?address = )(["'])[^"']*\2/, '$1""')
    .replace(/(\[(?:metrics|plugins\.'io\.containerd\.server\.v1\.metrics')\][^[]*?address = )(["'])[^"']*\2/, '$1""')
    .replace(/restrict_oom_score_adj = false/, 'restrict_oom_score_adj = true')
    // containerd 2.x imports /etc/containerd/conf.d/*.toml, where the installer writes drop-ins:
    // this daemon's own folder instead, never the machine's
    .replace(/^imports = \[(["'])\/etc\/containerd\/conf\.d\/\*\.toml\1\]$/m, `imports = ["${path.join(path.dirname(paths.root), 'etc', 'containerd', 'conf.d')}/*.toml"]`);
  if (cri) {
    // config version 2 (containerd 1.x) and 3/4 (2.x: pinned_images.sandbox, a list of bin_dirs)
    text = text
      .replace(/sandbox_image = (["'])[^"']*\1/, `sandbox_image = "${cri.sandboxImage}"`)
      .replace(/(\.pinned_images\][^[]*?sandbox = )(["'])[^"']*\2/, `$1"${cri.sandboxImage}"`)
      .replace(inCni('conf_dir = ', '(["\'])[^"\']*\\2'), `$1"${cri.cniConfDir}"`)
      .replace(inCni('bin_dir = ', '(["\'])[^"\']*\\2'), `$1"${cri.cniBinDir}"`)
      .replace(inCni('bin_dirs = ', '\\[[^\\]]*\\]'), `$1["${cri.cniBinDir}"]`);
  }
  return text;
}

/** `key` and its value in the CRI's CNI table (lines up to the next table header; values may hold brackets). */
function inCni(key: string, value: string): RegExp {
  return new RegExp(`(\\.cni\\]\\n(?:(?!\\s*\\[)[^\\n]*\\n)*?\\s*${key})${value}`);
}

async function stopSupervisor(supervisor: ChildProcess, pidFile: string): Promise<void> {
  await stopProcess(supervisor);
  try {
    process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // already gone
  }
}

/**
 * The installer's flags for a host that is this machine with `daemon` as its containerd:
 * its config, socket, an install root beside it and its restart command.
 */
export function installerArgsFor(daemon: ContainerdDaemon, handler: string): string[] {
  return [
    '--host-root=/',
    `--install-root=${path.join(daemon.dir, 'opt', 'rcm')}`,
    `--config=${daemon.config}`,
    `--socket=${daemon.socket}`,
    '--distro=containerd',
    '--restart=command',
    `--restart-command=${daemon.restartCommand}`,
    `--handler=${handler}`,
    '--health-timeout=30',
    '--retries=1',
  ];
}
