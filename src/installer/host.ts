import { execFile } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { ConfigVersion, detectConfigVersion, handlerRuntimeType, importedDropInFolder } from './containerd-config';
import { crioDropInPath, CRIO_SOCKET } from './crio-config';
import { resolveInHostRoot } from './host-paths';
import { findHostTool, hostSearchPath } from './host-tools';
import { Distro, InstallerOptions } from './options';

/** Where a distribution keeps the file we edit, its socket and its systemd unit. */
export interface DistroLayout {
  readonly distro: Distro;
  /** Host path of the file the installer edits. */
  readonly config: string;
  /** Host path of the config containerd actually reads (differs for templates). */
  readonly effectiveConfig: string;
  /** The file is a Go template (k3s, rke2). */
  readonly template: boolean;
  readonly socket: string;
  readonly unit?: string;
  /**
   * The edited file is one of ours alone (a drop-in named after the handler): uninstall
   * removes it once our handler is out, even without the state file's record.
   */
  readonly ownFile?: boolean;
  /** For a drop-in next to a main config: the schema version to write it in (the main file's). */
  readonly dropInVersion?: ConfigVersion;
}

/**
 * A path on the host, as seen from the installer (under --host-root), with symlinks followed
 * as the host follows them: a symlinked config is edited through its target, in place.
 */
export function onHost(options: Pick<InstallerOptions, 'hostRoot'>, hostPath: string): string {
  return resolveInHostRoot(options.hostRoot, hostPath);
}

export function detectDistro(options: InstallerOptions): Distro {
  if (options.distro) return options.distro;
  const exists = (p: string) => fs.existsSync(onHost(options, p));
  if (exists('/var/lib/rancher/k3s/agent/etc/containerd')) return 'k3s';
  if (exists('/var/lib/rancher/rke2/agent/etc/containerd')) return 'rke2';
  if (exists('/etc/k0s')) return 'k0s';
  if (exists('/var/snap/microk8s/current/args')) return 'microk8s';
  if (isCrioNode(options)) return 'crio';
  return 'containerd';
}

/** Where CRI-O's packages put its systemd unit (OpenShift's node image: /usr/lib). */
const CRIO_UNIT_FILES = ['/etc/systemd/system/crio.service', '/usr/lib/systemd/system/crio.service', '/lib/systemd/system/crio.service'];

/**
 * A CRI-O node: the crio binary on the host's PATH and its systemd unit are there, containerd's
 * socket is not (a node with both keeps being treated as a containerd node, as before;
 * --distro=crio says otherwise), and CRI-O's socket is there or, when CRI-O is down (its
 * socket goes with it: a failed crio.service, a stop), containerd is not on the host at all.
 */
export function isCrioNode(options: Pick<InstallerOptions, 'hostRoot'>): boolean {
  const exists = (p: string) => fs.existsSync(onHost(options, p));
  if (exists('/run/containerd/containerd.sock') || findHostTool(options.hostRoot, hostSearchPath('crio'), 'crio') === undefined
    || !CRIO_UNIT_FILES.some(exists)) return false;
  return exists(CRIO_SOCKET) || findHostTool(options.hostRoot, hostSearchPath('containerd'), 'containerd') === undefined;
}

export function layoutFor(options: InstallerOptions, distro: Distro, containerdMajor: number | undefined): DistroLayout {
  const exists = (p: string) => fs.existsSync(onHost(options, p));
  switch (distro) {
    case 'k3s':
    case 'rke2': {
      const dir = `/var/lib/rancher/${distro}/agent/etc/containerd`;
      // containerd 2 based releases render config-v3.toml.tmpl.
      const v3 = exists(`${dir}/config-v3.toml.tmpl`) || (containerdMajor ?? 1) >= 2;
      const agent = exists(`/etc/systemd/system/${distro}-agent.service`) || exists(`/usr/local/lib/systemd/system/${distro}-agent.service`);
      return {
        distro,
        config: options.config ?? `${dir}/${v3 ? 'config-v3.toml.tmpl' : 'config.toml.tmpl'}`,
        effectiveConfig: `${dir}/config.toml`,
        template: true,
        // rke2 runs k3s's agent: both serve containerd on k3s's socket.
        socket: options.socket ?? '/run/k3s/containerd/containerd.sock',
        unit: distro === 'k3s' ? (agent ? 'k3s-agent' : 'k3s') : (agent ? 'rke2-agent' : 'rke2-server'),
      };
    }
    case 'k0s':
      // k0s imports every file of its containerd.d folder: one drop-in file per handler,
      // which uninstall removes, and k0s reloads by itself.
      return { ...plainLayout(distro, `/etc/k0s/containerd.d/rcm-${options.handler}.toml`, '/run/k0s/containerd.sock'), ownFile: options.config === undefined };
    case 'microk8s':
      return plainLayout(distro, '/var/snap/microk8s/current/args/containerd-template.toml',
        '/var/snap/microk8s/common/run/containerd.sock', 'snap.microk8s.daemon-containerd');
    case 'crio':
      // One drop-in file of ours per handler, the whole file ours (crio-config.ts).
      return { ...plainLayout(distro, crioDropInPath(options.handler), CRIO_SOCKET, 'crio'), ownFile: true };
    default:
      return plainLayout(distro, '/etc/containerd/config.toml', '/run/containerd/containerd.sock', 'containerd');
  }

  function plainLayout(d: Distro, config: string, socket: string, unit?: string): DistroLayout {
    const file = options.config ?? config;
    return { distro: d, config: file, effectiveConfig: file, template: false, socket: options.socket ?? socket, unit };
  }
}

/**
 * Where the main config imports a drop-in folder on containerd 2 (2.2+ write
 * `imports = ['/etc/containerd/conf.d/*.toml']` by default; a k3s/rke2 base may import one
 * too), the handler goes in a file of its own there and the main file (or template) stays
 * untouched, as kata-deploy and nvidia-ctk do: containerd 2 merges imports deeply. Never on
 * 1.x, where an imported CRI table replaces the main file's whole table. A handler already
 * in the main file stays there. For k3s/rke2 the rendered config.toml is what is read: it
 * shows what the base and the template import.
 */
export function withDropIn(options: InstallerOptions, layout: DistroLayout, major: number | undefined): DistroLayout {
  if (layout.distro === 'k0s' || layout.distro === 'crio' || major === undefined || major < 2) return layout;
  const mainPath = layout.template ? layout.effectiveConfig : layout.config;
  const main = onHost(options, mainPath);
  if (!fs.existsSync(main)) return layout;
  let version: ConfigVersion;
  let folder: string | undefined;
  let text: string;
  try {
    text = fs.readFileSync(main, 'utf8');
    version = detectConfigVersion(text, major);
    folder = importedDropInFolder(text);
  } catch {
    return layout; // the edit of the main file reports what is wrong with it
  }
  if (version < 3 || folder === undefined || handlerRuntimeType(text, version, options.handler) !== undefined) return layout;
  const dir = path.posix.resolve(path.posix.dirname(mainPath), folder);
  return { ...layout, config: `${dir}/rcm-${options.handler}.toml`, template: false, ownFile: true, dropInVersion: version };
}

export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** How host commands are run: which host, and where its tools are. */
export interface HostContext {
  readonly hostRoot: string;
  /** The host process whose namespaces commands enter (when hostRoot is not /). */
  readonly hostPid: number;
  /** The host folders searched for tools, in order (hostSearchPath of the distribution). */
  readonly searchPath: string[];
}

export function hostContext(options: Pick<InstallerOptions, 'hostRoot' | 'hostPid'>, distro: Distro): HostContext {
  const searchPath = hostSearchPath(distro);
  // On the host itself, its own PATH counts too (after the distribution's and standard folders).
  const own = options.hostRoot === '/' ? (process.env.PATH ?? '').split(':').filter(d => d.startsWith('/')) : [];
  return { hostRoot: options.hostRoot, hostPid: options.hostPid, searchPath: [...new Set([...searchPath, ...own])] };
}

/**
 * Runs a command in the host's namespaces: through nsenter into the host process (its init
 * unless told otherwise) when the installer runs in a pod (host root mounted elsewhere),
 * directly when it runs on the host itself. The program is looked up on the host (see
 * host-tools.ts) and run by its absolute host path, with the host's PATH, never the pod's;
 * a program the host does not have is exit code 127 with a message naming where it looked.
 */
export function hostCommand(host: HostContext, argv: string[], timeoutMs = 120_000): Promise<CommandResult> {
  const program = argv[0].includes('/') ? argv[0] : findHostTool(host.hostRoot, host.searchPath, argv[0]);
  if (!program) {
    return Promise.resolve({ code: 127, stdout: '', stderr: `${argv[0]} not found on the host (searched ${host.searchPath.join(':')})` });
  }
  const command = [program, ...argv.slice(1)];
  const full = host.hostRoot === '/'
    ? command
    : [podTool('nsenter'), '--target', String(host.hostPid), '--mount', '--uts', '--ipc', '--net', '--pid', '--', ...command];
  const env = { ...process.env, PATH: host.searchPath.join(':') };
  return new Promise(resolve => {
    execFile(full[0], full.slice(1), { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024, env }, (error, stdout, stderr) => {
      const code = error ? (typeof (error as any).code === 'number' ? (error as any).code : 127) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr || (error && !stderr ? error.message : '')) });
    });
  });
}

/** A tool of the installer's own image (nsenter), found on the pod's PATH. */
function podTool(name: string): string {
  for (const dir of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    if (dir.startsWith('/') && fs.existsSync(path.join(dir, name))) return path.join(dir, name);
  }
  return name;
}

/** containerd's version on the host and the binary that told it. */
export interface ContainerdVersion {
  readonly text: string;
  /** The whole `containerd --version` line (with its build and packaging): another one means containerd was replaced. */
  readonly build: string;
  readonly major: number;
  readonly minor: number;
  readonly binary: string;
}

/** containerd's version on the host, e.g. { text: '1.6.20', major: 1 }; undefined when unknown. */
export async function containerdVersion(host: HostContext): Promise<ContainerdVersion | undefined> {
  const r = await hostCommand(host, ['containerd', '--version'], 20_000);
  const m = /\s(v?(\d+)\.(\d+)\.\d+\S*)/.exec(r.stdout);
  const binary = findHostTool(host.hostRoot, host.searchPath, 'containerd') ?? 'containerd';
  return r.code === 0 && m ? { text: m[1].replace(/^v/, ''), build: r.stdout.trim().split('\n')[0], major: Number(m[2]), minor: Number(m[3]), binary } : undefined;
}

/**
 * Writes through a temp file and a rename, so readers see the old or the new file, never half.
 * `file` must be a resolved path (onHost): the rename replaces whatever is at that path, so a
 * symlink there would become a plain file. A file that is replaced keeps its owner. The data
 * and then the rename are fsynced: after a crash or power loss the config never names a
 * binary that is not on disk, and the file is the old one or the new one, never empty.
 */
export function writeAtomically(file: string, data: string | Buffer, mode = 0o644): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const previous = fs.existsSync(file) ? fs.statSync(file) : undefined;
  const tmp = `${file}.rcm-tmp-${process.pid}`;
  const fd = fs.openSync(tmp, 'w', mode);
  try {
    try {
      fs.writeFileSync(fd, data);
      fs.fchmodSync(fd, mode);
      if (previous) fs.fchownSync(fd, previous.uid, previous.gid);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    // A full disk or an I/O error: no half-written temp file stays behind.
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  fs.renameSync(tmp, file);
  syncFolder(path.dirname(file));
}

/**
 * writeAtomically for a program whose verified bytes are in hand: before the rename, the
 * file is read back and compared with them byte for byte, while its fsync runs in the thread
 * pool (both read the same page cache; the rename waits for both). Returns undefined, or the
 * sha256 of what was read back when it differs: the file is then removed, never renamed into
 * place.
 */
export async function writeVerified(file: string, data: Buffer, mode: number): Promise<string | undefined> {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const previous = fs.existsSync(file) ? fs.statSync(file) : undefined;
  const tmp = `${file}.rcm-tmp-${process.pid}`;
  const fd = fs.openSync(tmp, 'w', mode);
  let readBack: Buffer;
  try {
    try {
      fs.writeFileSync(fd, data);
      fs.fchmodSync(fd, mode);
      if (previous) fs.fchownSync(fd, previous.uid, previous.gid);
      const synced = new Promise<void>((resolve, reject) => fs.fsync(fd, e => (e ? reject(e) : resolve())));
      let readError: unknown;
      try {
        readBack = fs.readFileSync(tmp);
      } catch (e) {
        readError = e;
      }
      await synced;
      if (readError) throw readError;
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    // A full disk or an I/O error: no half-written temp file stays behind.
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  if (!readBack!.equals(data)) {
    fs.rmSync(tmp, { force: true });
    return crypto.createHash('sha256').update(readBack!).digest('hex');
  }
  fs.renameSync(tmp, file);
  syncFolder(path.dirname(file));
  return undefined;
}

/** Makes a folder's entries (a rename, a new file) durable. */
export function syncFolder(folder: string): void {
  const fd = fs.openSync(folder, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** The sha256 of a file, in hex. */
export function sha256Of(file: string): string {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/** Removes a file or folder (a path in this process's view), then its parents below the install root while they are empty. */
export function removeAndPrune(options: Pick<InstallerOptions, 'hostRoot' | 'installRoot'>, target: string): void {
  fs.rmSync(target, { recursive: true, force: true });
  const stop = onHost(options, options.installRoot);
  // Folders that never existed (nothing was ever installed here) are nothing to prune.
  for (let d = path.dirname(target); d.startsWith(stop + path.sep) && fs.existsSync(d) && fs.readdirSync(d).length === 0; d = path.dirname(d)) {
    fs.rmdirSync(d);
  }
}
