// Pure "request in, drop-in text out" functions for CRI-O nodes (issue 23): no file system,
// no processes. The side effects (files, crio, systemctl) are in crio-node.ts.
//
// CRI-O reads every file of /etc/crio/crio.conf.d/ in lexical order, the last one winning;
// a handler is a table `[crio.runtime.runtimes.<handler>]`. The installer writes one file of
// its own per handler and never edits crio.conf nor another tool's drop-in. Facts read from
// CRI-O's docs (crio.conf(5), docs/crio.conf.5.md in cri-o/cri-o) and source, summed up in
// issue 23; an `oci` handler's drop-in, its restart and `crio status config` were run against a
// real CRI-O 1.34.0 (test/e2e-multinode/crio.test.ts), the rest was not.
import * as path from 'path';
import { parse, stringify } from 'smol-toml';
import { ConfigError, HandlerSettings } from './containerd-config';

/** Where CRI-O reads its drop-in files (crio.conf.d(5)). */
export const CRIO_DROPIN_DIR = '/etc/crio/crio.conf.d';
/** CRI-O's main config: read, never written. */
export const CRIO_MAIN_CONFIG = '/etc/crio/crio.conf';
/** CRI-O's socket (crio.conf(5): crio.api.listen). */
export const CRIO_SOCKET = '/var/run/crio/crio.sock';

/**
 * Our drop-in for a handler. `99-` puts it after the distribution's own files (OpenShift's
 * 00-default), `rcm-` after kata-deploy's `99-kata-deploy` and NVIDIA's `99-nvidia.toml` in
 * lexical order; a handler another file defines too is refused anyway (crioConflicts).
 */
export function crioDropInPath(handler: string): string {
  return `${CRIO_DROPIN_DIR}/99-rcm-${handler}.conf`;
}

/** The first line of every drop-in we write: how a file of ours is told from another tool's. */
export function crioMarker(handler: string): string {
  return `# rcm-node-installer: runtime handler ${handler}`;
}

/** Where a `vm` handler's runtime keeps its state (CRI-O makes `<root>/crio/fifo` there); tmpfs, never removed by us. */
export function crioRuntimeRoot(handler: string): string {
  return `/run/rcm/crio/${handler}`;
}

/**
 * The handler fields we write, with their types, from crio.conf(5) (cri-o/cri-o
 * docs/crio.conf.5.md, "CRIO.RUNTIME.RUNTIMES TABLE"). Every file written is parsed back and
 * checked against this table (crioDropInProblem); the tests check it against their own copy.
 */
export const CRIO_HANDLER_FIELDS: Readonly<Record<string, 'string' | 'boolean' | 'string[]'>> = {
  runtime_path: 'string',
  runtime_type: 'string',
  runtime_root: 'string',
  runtime_config_path: 'string',
  privileged_without_host_devices: 'boolean',
  allowed_annotations: 'string[]',
};

export type CrioKind = 'vm' | 'oci';

/** CRI-O's version as `crio --version` tells it. */
export interface CrioVersion {
  readonly text: string;
  readonly major: number;
  readonly minor: number;
  /** The version lines (Version, GitCommit): another one means CRI-O was replaced. */
  readonly build: string;
}

/**
 * CRI-O's version from `crio --version`. Since 1.18 it prints `crio version X.Y.Z` and a
 * `Version:` line (1.18.1 printed an empty first line and only the `Version:` line); older
 * releases print the first line only. 1.34 prints no `Version:` line and indents the others
 * under the first (`   GitCommit:  ...`, seen on a real 1.34.0): the lines are read trimmed, or
 * the commit would be left out of `build` and a rebuild of the same version not seen.
 */
export function parseCrioVersion(stdout: string): CrioVersion | undefined {
  const m = /^Version:\s*v?((\d+)\.(\d+)\.\d+\S*)/m.exec(stdout) ?? /^crio version v?((\d+)\.(\d+)\.\d+\S*)/m.exec(stdout);
  if (!m) return undefined;
  const build = stdout.split('\n').map(l => l.trim()).filter(l => /^(crio version|Version:|GitCommit:)/.test(l)).join(' ');
  return { text: m[1], major: Number(m[2]), minor: Number(m[3]), build };
}

/**
 * The first CRI-O version known to make a handler added by a reload usable by pods, if any:
 * none yet (see crioApplyBy).
 */
export const CRIO_RELOAD_RUNS_NEW_HANDLERS_FROM: { readonly major: number; readonly minor: number } | undefined = undefined;

/**
 * How a changed drop-in reaches CRI-O: `restart` (`systemctl restart crio`, paced within the
 * unit's start limit), for every version known. CRI-O documents SIGHUP (`systemctl reload crio`)
 * as reloading the `crio.runtime.runtimes` table from 1.26 on, and a reload does change what
 * CRI-O reports (`crio status config`, the handlers the kubelet lists), but not the table its
 * RunPodSandbox looks a handler up in: a handler added by a reload is listed, and every pod of
 * it fails with "failed to find runtime handler <h> from runtime list map[...]" until CRI-O
 * restarts (seen on a real CRI-O 1.34.0 in test/e2e-multinode/crio.test.ts; cri-o/cri-o#10202,
 * open: the server keeps its own copy of the configuration, which the reload updates, and the
 * OCI runtime layer another, which it does not). The installer's check after the change reads
 * `crio status config`, which the reload satisfies, so a reload would report an install that
 * cannot run a pod. `reload` only from a version known to fix it
 * (CRIO_RELOAD_RUNS_NEW_HANDLERS_FROM), none yet.
 */
export function crioApplyBy(version: CrioVersion | undefined): 'reload' | 'restart' {
  const fixed = CRIO_RELOAD_RUNS_NEW_HANDLERS_FROM;
  if (!version || !fixed) return 'restart';
  return version.major > fixed.major || (version.major === fixed.major && version.minor >= fixed.minor) ? 'reload' : 'restart';
}

/**
 * Whether CRI-O still requires a `vm` runtime's binary to end in `-v2`: released versions up
 * to 1.36 do; an unknown version is taken to (the stricter rule).
 */
export function crioRequiresV2Suffix(version: CrioVersion | undefined): boolean {
  return !version || version.major < 1 || (version.major === 1 && version.minor <= 36);
}

/** What CRI-O would refuse in a `vm` runtime's binary name, or undefined. */
export function crioBinaryNameProblem(binary: string, version: CrioVersion | undefined): string | undefined {
  const name = path.posix.basename(binary);
  if (!/^containerd-shim-[^/]+$/.test(name)) {
    return `CRI-O runs a containerd shim (runtime_type "vm") only from a file named containerd-shim-<name>; this one is ${name}`;
  }
  if (crioRequiresV2Suffix(version) && !name.endsWith('-v2')) {
    return `CRI-O ${version ? version.text : '(version unknown)'} runs a containerd shim (runtime_type "vm") only from a file whose name ends in -v2 ` +
      `(versions up to 1.36 require it); this one is ${name}`;
  }
  return undefined;
}

/** What the Shim asks for, as the installer has it once the artifact is known. */
export interface CrioRequest {
  readonly handler: string;
  /** Host path of the installed shim binary (a payload's shim file for a payload). */
  readonly binary: string;
  /** The Shim's runtimeType (containerd's runtime_type as a name), if any. */
  readonly runtimeType?: string;
  /** The Shim's options, `${PAYLOAD}` already replaced by the payload's folder. */
  readonly options: Record<string, string>;
  readonly settings: HandlerSettings;
  readonly version?: CrioVersion;
}

/** A handler table for CRI-O. */
export interface CrioHandler {
  readonly handler: string;
  readonly kind: CrioKind;
  readonly runtimePath: string;
  readonly runtimeRoot?: string;
  readonly runtimeConfigPath?: string;
  readonly privilegedWithoutHostDevices?: boolean;
  readonly allowedAnnotations?: string[];
  /** The Shim's settings with no meaning on CRI-O, left out (said in the log). */
  readonly ignored: string[];
}

/** containerd's runc shim types: with them a Shim drives an OCI runtime (its BinaryName option). */
const RUNC_SHIM_TYPE = /^io\.containerd\.runc\.v[12]$/;

/**
 * The handler CRI-O gets for a Shim, or a ConfigError naming what CRI-O cannot do. The rule:
 *
 * - `oci` when the Shim drives an OCI runtime through containerd's runc shim (`runtimeType`
 *   `io.containerd.runc.v2`, a payload such as gVisor's): CRI-O runs that OCI runtime itself,
 *   so `runtime_path` is the Shim's `BinaryName` option (required) and `runtime_root` its
 *   `Root` option, if any; the runc shim in the payload is not used.
 * - `vm` otherwise: the artifact's binary is a containerd shim v2 (a Wasm shim, Kata), which
 *   CRI-O runs as `runtime_type = "vm"` with `runtime_path` that binary (its name must be
 *   `containerd-shim-<name>`, ending in `-v2` up to CRI-O 1.36) and `runtime_root` a folder
 *   of its own; the Shim's `ConfigPath` option becomes `runtime_config_path`.
 *
 * On both: `privilegedWithoutHostDevices` is `privileged_without_host_devices`, and pod and
 * container annotations together are `allowed_annotations`. `SystemdCgroup` is ignored
 * (CRI-O's `cgroup_manager` decides for every runtime); a snapshotter and any other option
 * are refused, since CRI-O has no per-handler snapshotter nor options table.
 */
export function crioHandlerFor(req: CrioRequest): CrioHandler {
  if (req.settings.snapshotter !== undefined) {
    throw new ConfigError(`CRI-O has no per-handler snapshotter (it uses containers/storage for every runtime): remove snapshotter "${req.settings.snapshotter}" from the Shim for CRI-O nodes`);
  }
  const oci = req.runtimeType !== undefined && RUNC_SHIM_TYPE.test(req.runtimeType);
  const mapped: Record<string, string> = oci ? { BinaryName: 'runtime_path', Root: 'runtime_root' } : { ConfigPath: 'runtime_config_path' };
  const ignored = Object.keys(req.options).filter(k => k === 'SystemdCgroup');
  const unknown = Object.keys(req.options).filter(k => !(k in mapped) && k !== 'SystemdCgroup');
  if (unknown.length > 0) {
    throw new ConfigError(`CRI-O has no options table for a handler: option${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} cannot be given to a ${oci ? 'oci' : 'vm'} runtime ` +
      `(on CRI-O only ${Object.keys(mapped).join(' and ')} are understood, and SystemdCgroup is ignored)`);
  }
  const annotations = [...new Set([...(req.settings.podAnnotations ?? []), ...(req.settings.containerAnnotations ?? [])])];
  const common = {
    handler: req.handler,
    ...(req.settings.privilegedWithoutHostDevices !== undefined ? { privilegedWithoutHostDevices: req.settings.privilegedWithoutHostDevices } : {}),
    ...(annotations.length > 0 ? { allowedAnnotations: annotations } : {}),
    ignored: ignored.map(k => `option ${k}`),
  };
  if (oci) {
    const runtimePath = req.options.BinaryName;
    if (runtimePath === undefined || !runtimePath.startsWith('/')) {
      throw new ConfigError(`runtimeType ${req.runtimeType} drives an OCI runtime through containerd's runc shim; on CRI-O that runtime is registered itself ` +
        '(runtime_type "oci") and must be named by an absolute BinaryName option (e.g. ${PAYLOAD}/runsc)');
    }
    const root = req.options.Root;
    if (root !== undefined && !root.startsWith('/')) throw new ConfigError(`the Root option must be an absolute path for CRI-O's runtime_root, not "${root}"`);
    return { ...common, kind: 'oci', runtimePath, ...(root !== undefined ? { runtimeRoot: root } : {}) };
  }
  const nameProblem = crioBinaryNameProblem(req.binary, req.version);
  if (nameProblem) throw new ConfigError(nameProblem);
  const configPath = req.options.ConfigPath;
  if (configPath !== undefined && !configPath.startsWith('/')) throw new ConfigError(`the ConfigPath option must be an absolute path for CRI-O's runtime_config_path, not "${configPath}"`);
  return {
    ...common,
    kind: 'vm',
    runtimePath: req.binary,
    runtimeRoot: crioRuntimeRoot(req.handler),
    ...(configPath !== undefined ? { runtimeConfigPath: configPath } : {}),
  };
}

/** The drop-in file for one handler: our marker, a note, and the handler's table alone. */
export function crioDropIn(h: CrioHandler): string {
  const fields: Record<string, unknown> = {
    runtime_type: h.kind,
    runtime_path: h.runtimePath,
    ...(h.runtimeRoot !== undefined ? { runtime_root: h.runtimeRoot } : {}),
    ...(h.runtimeConfigPath !== undefined ? { runtime_config_path: h.runtimeConfigPath } : {}),
    ...(h.privilegedWithoutHostDevices !== undefined ? { privileged_without_host_devices: h.privilegedWithoutHostDevices } : {}),
    ...(h.allowedAnnotations !== undefined ? { allowed_annotations: h.allowedAnnotations } : {}),
  };
  // Each value is written by the TOML library (quoting and escaping), one key per line.
  const body = Object.entries(fields).map(([k, v]) => stringify({ [k]: v }).trim()).join('\n');
  const text = [
    crioMarker(h.handler),
    '# Written by runtime-class-manager for its Shim; the installer removes this file when the handler is uninstalled.',
    `[crio.runtime.runtimes.${h.handler}]`,
    body,
    '',
  ].join('\n');
  const problem = crioDropInProblem(text, h.handler);
  if (problem) throw new ConfigError(`internal error: the drop-in for ${h.handler} does not check out: ${problem}`);
  return text;
}

/**
 * What is wrong with a drop-in of ours (parsed with smol-toml): anything but exactly one
 * handler table `crio.runtime.runtimes.<handler>`, a field crio.conf(5) does not list for it
 * or of another type, a runtime_type other than `vm` or `oci`, runtime_config_path on `oci`.
 */
export function crioDropInProblem(text: string, handler: string): string | undefined {
  let parsed: Record<string, any>;
  try {
    parsed = parse(text) as Record<string, any>;
  } catch (e) {
    return `not valid TOML: ${(e as Error).message.split('\n')[0]}`;
  }
  if (Object.keys(parsed).join() !== 'crio' || Object.keys(parsed.crio ?? {}).join() !== 'runtime'
    || Object.keys(parsed.crio.runtime ?? {}).join() !== 'runtimes' || Object.keys(parsed.crio.runtime.runtimes ?? {}).join() !== handler) {
    return `it must hold the table [crio.runtime.runtimes.${handler}] and nothing else`;
  }
  const table = parsed.crio.runtime.runtimes[handler] as Record<string, unknown>;
  for (const [key, value] of Object.entries(table)) {
    const type = CRIO_HANDLER_FIELDS[key];
    if (!type) return `${key} is not a handler field of crio.conf(5)`;
    const ok = type === 'string[]' ? Array.isArray(value) && value.every(v => typeof v === 'string') : typeof value === type;
    if (!ok) return `${key} must be a ${type}`;
  }
  if (table.runtime_type !== 'vm' && table.runtime_type !== 'oci') return `runtime_type must be "vm" or "oci", not ${JSON.stringify(table.runtime_type)}`;
  if (typeof table.runtime_path !== 'string' || !table.runtime_path.startsWith('/')) return 'runtime_path must be an absolute path';
  if (table.runtime_config_path !== undefined && table.runtime_type !== 'vm') return 'runtime_config_path is valid only with runtime_type "vm"';
  return undefined;
}

/** Whether a file's text is a drop-in of ours for `handler` (by its first line). */
export function isOurDropIn(text: string, handler: string): boolean {
  return text.split('\n', 1)[0] === crioMarker(handler);
}

/** The handlers a CRI-O config file (crio.conf or a drop-in) defines; a file that is not TOML defines none we can see. */
export function crioHandlersIn(text: string): string[] {
  try {
    const runtimes = (parse(text) as any)?.crio?.runtime?.runtimes;
    return runtimes && typeof runtimes === 'object' ? Object.keys(runtimes) : [];
  } catch {
    return [];
  }
}

/**
 * The files other than ours that define `handler` (name → text in), as CRI-O would merge
 * them: we refuse to add a handler another tool (or the distribution) already defines,
 * rather than have two files fight over it by their names' order.
 */
export function crioConflicts(files: ReadonlyMap<string, string>, handler: string, ours: string): string[] {
  return [...files].filter(([name, text]) => name !== ours && crioHandlersIn(text).includes(handler)).map(([name]) => name);
}

/**
 * The files that CRI-O reads after `ours` and that define `handler` too (host path → text in,
 * as crioConflicts takes them): CRI-O reads crio.conf first, then the drop-in folder's files
 * in lexical order, and the last table of a handler wins. Such a file takes our handler over
 * (someone else's runtime_path, or fields of theirs mixed in), whatever our file says.
 */
export function crioShadowing(files: ReadonlyMap<string, string>, handler: string, ours: string): string[] {
  const folder = path.posix.dirname(ours);
  const name = path.posix.basename(ours);
  return [...files]
    .filter(([file, text]) => file !== ours && path.posix.dirname(file) === folder && path.posix.basename(file) > name
      && crioHandlersIn(text).includes(handler))
    .map(([file]) => file)
    .sort();
}

/** The handler as CRI-O serves it (`crio status config` prints the running config as TOML), or what is wrong. */
export function crioServedHandler(statusConfig: string, handler: string): { runtimePath?: string; runtimeType?: string } | string {
  let parsed: any;
  try {
    parsed = parse(statusConfig);
  } catch (e) {
    return `CRI-O's running config is not TOML: ${(e as Error).message.split('\n')[0]}`;
  }
  const table = parsed?.crio?.runtime?.runtimes?.[handler];
  if (!table || typeof table !== 'object') return `CRI-O does not list handler ${handler}`;
  return { runtimePath: table.runtime_path, runtimeType: table.runtime_type };
}
